// docs/access.md, "How many streams and connections a caller may hold": one caller cannot take every IMAP connection. Open live streams are capped per
// credential and per project (429 with Retry-After), for inbox streams and project event streams
// alike, and watchers never take the share of the pool kept for reads: another project's reads
// stay fast however many inboxes one token streams.
import { expect } from 'chai';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { call, expectError, newProject, startPostern, type TestInbox, type TestServer } from '../helpers/harness.ts';
import { SseReader, until } from '../helpers/mail-fixtures.ts';

interface Opened {
  status: number;
  res: Response;
  reader: SseReader | null;
}

describe('live stream caps and the pool share kept for reads', function () {
  this.timeout(90_000);
  const readers: SseReader[] = [];
  let s: TestServer | null = null;

  const openStream = async (url: string, token: string): Promise<Opened> => {
    const abort = new AbortController();
    const res = await call(url, { token, headers: { accept: 'text/event-stream' }, signal: abort.signal });
    if (res.status !== 200) return { status: res.status, res, reader: null };
    const reader = new SseReader(res, abort);
    readers.push(reader);
    return { status: 200, res, reader };
  };

  /** A read of another project's inbox: its status and how long it took. */
  const timedRead = async (base: string, inbox: TestInbox, token: string) => {
    const started = performance.now();
    const res = await call(`${base}/inboxes/${inbox.id}/labels`, { token });
    await res.arrayBuffer();
    return { status: res.status, ms: performance.now() - started };
  };

  afterEach(async () => {
    for (const r of readers.splice(0)) await r.close();
    await s?.close();
    s = null;
  });

  it('caps the streams of one credential and of one project (429, Retry-After); another project reads at once', async () => {
    s = await startPostern({
      // Without the caps, six watchers would take the whole pool and reads would wait 3 s for a 503.
      POSTERN_IMAP_MAX_TOTAL: '6',
      POSTERN_IMAP_ACQUIRE_TIMEOUT_MS: '3000',
      POSTERN_IMAP_READ_RESERVE_PERCENT: '0',
      POSTERN_STREAM_MAX_PER_CREDENTIAL: '3',
      POSTERN_STREAM_MAX_PER_PROJECT: '4',
    });
    const a = await newProject(s);
    const inboxes: TestInbox[] = [];
    for (let i = 0; i < 6; i++) inboxes.push(await a.inbox());
    const greedy = await a.token(['messages:read', 'events:read']);

    const opened: Opened[] = [];
    for (const inbox of inboxes) opened.push(await openStream(`${s.base}/inboxes/${inbox.id}/events`, greedy));

    // Another project's read does not wait for the pool.
    const b = await newProject(s);
    const other = await b.inbox();
    const reader = await b.token(['messages:read']);
    const read = await timedRead(s.base, other, reader);
    expect(read.status).to.equal(200);
    expect(read.ms, 'the other project read at once').to.be.below(2000);

    expect(opened.map((o) => o.status)).to.deep.equal([200, 200, 200, 429, 429, 429]);
    for (const refused of opened.slice(3)) {
      expect(refused.res.headers.get('retry-after'), 'Retry-After').to.match(/^\d+$/);
      await expectError(refused.res, 429, /too many open inbox streams for this credential/);
    }

    // The project's cap counts every credential of the project: a second token gets one more.
    const second = await a.token(['messages:read']);
    expect((await openStream(`${s.base}/inboxes/${inboxes[3]!.id}/events`, second)).status).to.equal(200);
    const refused = await openStream(`${s.base}/inboxes/${inboxes[4]!.id}/events`, second);
    expect(refused.res.headers.get('retry-after')).to.match(/^\d+$/);
    await expectError(refused.res, 429, /too many open inbox streams for this project/);

    // Project event streams have their own count, capped the same way.
    const events: number[] = [];
    for (let i = 0; i < 4; i++) {
      const opened = await openStream(`${s.base}/events`, greedy);
      events.push(opened.status);
      if (opened.status !== 200) await expectError(opened.res, 429, /too many open event streams for this credential/);
    }
    expect(events).to.deep.equal([200, 200, 200, 429]);

    // A stream that ends gives its place back: the credential opens another (once the server saw the close).
    await readers[0]!.close();
    const again = await until(
      'a place freed by a closed stream',
      async () => {
        const opened = await openStream(`${s!.base}/inboxes/${inboxes[5]!.id}/events`, greedy);
        if (opened.status === 429) await opened.res.arrayBuffer();
        return opened.status === 200 ? opened : null;
      },
      5000,
    );
    expect(again.status).to.equal(200);
  });

  it('keeps POSTERN_IMAP_READ_RESERVE_PERCENT of the pool for reads, rounded down', () => {
    expect(loadConfig({}).imap.reservedForReads).to.equal(40);
    expect(loadConfig({ POSTERN_IMAP_MAX_TOTAL: '1' }).imap.reservedForReads, 'a single connection stays usable by a watcher').to.equal(0);
    expect(loadConfig({ POSTERN_IMAP_MAX_TOTAL: '10', POSTERN_IMAP_READ_RESERVE_PERCENT: '90' }).imap.reservedForReads).to.equal(9);
    expect(() => loadConfig({ POSTERN_IMAP_READ_RESERVE_PERCENT: '100' })).to.throw(ConfigError);
  });

  it('watchers never take the share of the pool kept for reads', async () => {
    s = await startPostern({
      // 5 connections, 40% (2) kept for reads: at most 3 watchers. No stream caps here.
      POSTERN_IMAP_MAX_TOTAL: '5',
      POSTERN_IMAP_READ_RESERVE_PERCENT: '40',
      POSTERN_IMAP_ACQUIRE_TIMEOUT_MS: '3000',
      POSTERN_STREAM_MAX_PER_CREDENTIAL: '0',
      POSTERN_STREAM_MAX_PER_PROJECT: '0',
    });
    const a = await newProject(s);
    const inboxes: TestInbox[] = [];
    for (let i = 0; i < 5; i++) inboxes.push(await a.inbox());
    const greedy = await a.token(['messages:read']);
    const opened: Opened[] = [];
    for (const inbox of inboxes) opened.push(await openStream(`${s.base}/inboxes/${inbox.id}/events`, greedy));

    const b = await newProject(s);
    const others = [await b.inbox(), await b.inbox()];
    const reader = await b.token(['messages:read']);
    for (const other of others) {
      const read = await timedRead(s.base, other, reader);
      expect(read.status).to.equal(200);
      expect(read.ms, 'the other project read at once').to.be.below(2000);
    }

    expect(opened.map((o) => o.status)).to.deep.equal([200, 200, 200, 503, 503]);
    for (const refused of opened.slice(3)) await expectError(refused.res, 503, /busy/);
  });
});
