// Live streams of the project event log (docs/api.md, "Project event log") and paging under concurrent writers: frames,
// heartbeats, resume after a forced disconnect, backfill joined to live without a gap, slow
// clients cut off, and 10,000 events paged while writers append.
import { request, type IncomingMessage } from 'node:http';
import { expect } from 'chai';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
import { call, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { addInbox, expectError, getPage, json, post, register, SseClient, type WireEvent } from '../helpers/events-helpers.ts';

const MSG = (n: number) => `msg_${String(n).padStart(26, '0')}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('events: live streams (GET /events, Accept: text/event-stream)', () => {
  let s: TestServer;
  let p: TestProject;
  let A: string;
  let B: string;
  let reader: string;

  const recv = (inboxId: string, n: number) =>
    s.postern.events.record({ type: 'message.received', projectId: p.projectId, inboxId, actor: SYSTEM_ACTOR, data: { msgId: MSG(n) } });

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '1000', POSTERN_STREAM_HEARTBEAT_MS: '100' });
    p = await newProject(s);
    A = await addInbox(s, p);
    B = await addInbox(s, p);
    reader = await p.token(['events:read', 'project:read']);
  });
  after(() => s.close());

  it('sends each new event at once with id (its cursor), event (its type) and data (the Event JSON); heartbeats', async () => {
    const c = await SseClient.open(`${s.base}/events`, { token: reader });
    try {
      const r1 = await recv(A, 1);
      const r2 = await recv(B, 2);
      const frames = await c.waitFor(2, 2000);
      expect(frames.map((f) => f.event)).to.deep.equal(['message.received', 'message.received']);
      expect(frames.map((f) => f.id)).to.deep.equal([r1.cursor, r2.cursor]);
      expect(c.events().map((e) => e.id)).to.deep.equal([r1.eventId, r2.eventId]);
      expect(c.events()[0]).to.deep.include({ specversion: '1.0', scope: p.projectId, containerid: A, actor: SYSTEM_ACTOR });
      // Live streams do not wait for the settle delay (1 s here).
      expect(await c.waitUntil(() => c.comments >= 2, 1000)).to.equal(true);
    } finally {
      c.close();
    }
  });

  it('the same status codes as a page before the stream starts', async () => {
    const stream = { accept: 'text/event-stream' };
    await expectError(await call(`${s.base}/events`, { headers: stream }), 401);
    await expectError(await call(`${s.base}/events`, { headers: stream, token: await p.token(['events:write']) }), 403);
    await expectError(await call(`${s.base}/events?audit=true`, { headers: stream, token: reader }), 403);
    await expectError(await call(`${s.app}/events`, { headers: stream, session: await p.session() }), 400);
    await expectError(await call(`${s.base}/events?inboxes=ibx_01M80W1F3RD7BV8C61QAP73X5Y`, { headers: stream, token: reader }), 404);
    await expectError(await call(`${s.base}/events?after=nonsense`, { headers: stream, token: reader }), 400);
  });

  it("HEAD answers with the stream's headers at once and holds nothing open", async () => {
    const before = s.postern.events.live.subscriberCount();
    const res = await call(`${s.base}/events`, {
      method: 'HEAD',
      headers: { accept: 'text/event-stream' },
      token: reader,
      signal: AbortSignal.timeout(2000),
    });
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.match(/^text\/event-stream/);
    expect(await res.text()).to.equal('');
    expect(s.postern.events.live.subscriberCount()).to.equal(before);
  });

  it('filters live events exactly as pages do; sessions see no actor', async () => {
    const session = await SseClient.open(`${s.app}/events?inboxes=${A}`, { session: await p.session() });
    const typed = await SseClient.open(`${s.base}/events?types=mail.*`, { token: reader });
    const narrow = await SseClient.open(`${s.base}/events`, { token: await p.token(['events:read']) });
    try {
      const actor = /^svc_(tok_[0-9A-Z]{26})_/.exec(reader)![1]!;
      await s.postern.events.record({
        type: 'message.flags',
        projectId: p.projectId,
        inboxId: A,
        actor,
        data: { msgId: MSG(1), flags: ['seen'] },
      });
      await recv(B, 3);
      await s.postern.events.record({
        type: 'mail.delivery.accepted',
        projectId: p.projectId,
        inboxId: A,
        actor,
        data: { from: 'a@example.org', recipients: 1 },
      });
      await s.postern.events.record({
        type: 'access.content.read',
        projectId: p.projectId,
        inboxId: A,
        actor,
        data: { msgId: MSG(1), part: 'source' },
      });
      await recv(A, 4);
      // Last, one event each stream sees: a stream delivers in log order, so once it has its
      // last event it has had its chance at every earlier one, and the lists below are complete.
      await s.postern.events.record({ type: 'message.removed', projectId: p.projectId, inboxId: A, actor, data: { msgId: MSG(1) } });
      await s.postern.events.record({
        type: 'mail.delivery.failed',
        projectId: p.projectId,
        inboxId: A,
        actor,
        data: { from: 'a@example.org', reason: 'x', permanent: true },
      });
      const got = (c: SseClient, type: string) => c.waitUntil(() => c.events().some((e) => e.type === type), 5000);
      expect(await got(session, 'message.removed')).to.equal(true);
      expect(await got(narrow, 'message.removed')).to.equal(true);
      expect(await got(typed, 'mail.delivery.failed')).to.equal(true);
      expect(session.events().map((e) => [e.type, e.actor])).to.deep.equal([
        ['message.flags', ''],
        ['message.received', ''],
        ['message.removed', ''],
      ]);
      expect(typed.events().map((e) => e.type)).to.deep.equal(['mail.delivery.accepted', 'mail.delivery.failed']);
      expect(narrow.events().map((e) => e.type)).to.deep.equal([
        'message.flags',
        'message.received',
        'message.received',
        'message.removed',
      ]);
    } finally {
      session.close();
      typed.close();
      narrow.close();
    }
  });

  it('resumes after Last-Event-ID across a forced disconnect, while a writer keeps appending: nothing lost', async () => {
    const start = (await recv(A, 100)).cursor;
    const written: string[] = [];
    let writing = true;
    const writer = (async () => {
      for (let i = 0; writing && i < 3000; i++) {
        written.push((await recv(i % 2 ? A : B, i)).eventId);
        if (i % 20 === 0) await sleep(1);
      }
    })();
    const got: WireEvent[] = [];
    // First connection: take some events, then drop it hard.
    const c1 = await SseClient.open(`${s.base}/events?after=${start}`, { token: reader });
    await c1.waitFor(200);
    c1.close();
    got.push(...c1.events());
    const last = c1.frames.at(-1)!.id!;
    await sleep(50); // the writer goes on meanwhile
    // EventSource resends the original URL: Last-Event-ID must win over `after`.
    const c2 = await SseClient.open(`${s.base}/events?after=${start}`, { token: reader, lastEventId: last });
    await sleep(200);
    writing = false;
    await writer;
    expect(await c2.waitUntil(() => c2.events().some((e) => e.id === written.at(-1)), 5000)).to.equal(true);
    c2.close();
    got.push(...c2.events());
    const ids = got.map((e) => e.id);
    const unique = new Set(ids);
    for (const id of written) expect(unique.has(id), `missing ${id}`).to.equal(true);
    // Resuming from the exact cursor repeats nothing here (repeats would be allowed: docs/api.md, "Project event log").
    expect(unique.size).to.equal(ids.length);
    // Order is the log's order.
    const seqB = c2
      .events()
      .filter((e) => e.containerid === B)
      .map((e) => Number(e.sequence));
    expect(seqB).to.deep.equal([...seqB].sort((a, b) => a - b));
  });

  it('backfills a long history and joins it to live events without a gap', async () => {
    const start = (await recv(A, 1)).cursor;
    const before: string[] = [];
    for (let i = 0; i < 6000; i++) before.push((await recv(B, i)).eventId);
    const c = await SseClient.open(`${s.base}/events?after=${start}&types=message.received`, { token: reader });
    const during: string[] = [];
    for (let i = 0; i < 200; i++) {
      during.push((await recv(A, i)).eventId);
      if (i % 50 === 0) await sleep(5);
    }
    const all = [...before, ...during];
    expect(await c.waitUntil(() => c.frames.length >= all.length, 10_000), `got ${c.frames.length} of ${all.length}`).to.equal(true);
    c.close();
    expect(c.events().map((e) => e.id)).to.deep.equal(all);
  });

  it('with no cursor a stream starts at now; a cursor from a page continues it', async () => {
    await recv(A, 1);
    const c = await SseClient.open(`${s.base}/events`, { token: reader });
    const fresh = await recv(A, 2);
    await c.waitFor(1);
    c.close();
    expect(c.events().map((e) => e.id)).to.deep.equal([fresh.eventId]);
    // An event id works as the starting point too.
    const c2 = await SseClient.open(`${s.base}/events?after=${fresh.eventId}`, { token: reader });
    const next = await recv(B, 3);
    await c2.waitFor(1);
    c2.close();
    expect(c2.events().map((e) => e.id)).to.deep.equal([next.eventId]);
  });

  it('a client that stops reading is cut off rather than buffered without bound', async function () {
    this.timeout(20_000);
    const writer = await p.token(['events:write']);
    await register(s, writer, { name: 'ext.blob.written', description: 'x', data: [{ name: 'text', type: 'string' }] });
    const url = new URL(`${s.base}/events`);
    const baseline = s.postern.events.live.subscriberCount();
    let res: IncomingMessage | null = null;
    const req = request({
      host: url.hostname,
      port: url.port,
      path: url.pathname,
      headers: { authorization: `Bearer ${reader}`, accept: 'text/event-stream' },
    });
    req.on('response', (r) => {
      res = r;
      r.pause(); // never read
    });
    req.on('error', () => undefined);
    req.end();
    await new Promise<void>((resolve) => req.once('response', () => resolve()));
    expect(s.postern.events.live.subscriberCount()).to.equal(baseline + 1);
    const text = 'x'.repeat(4000);
    const ev = s.postern.events;
    for (let i = 0; i < 6000 && ev.live.subscriberCount() > baseline; i++) {
      await ev.publish({ projectId: p.projectId, actor: SYSTEM_ACTOR, type: 'ext.blob.written', data: { text } });
      if (i % 100 === 0) await sleep(1);
    }
    expect(ev.live.subscriberCount()).to.equal(baseline);
    (res as IncomingMessage | null)?.destroy();
    req.destroy();
  });
});

describe('events: paging 10,000 events while writers append', function () {
  this.timeout(180_000);
  let s: TestServer;
  before(async () => {
    // One token writes 4,000 events as fast as it can: past a credential's default budget (docs/access.md, "Rate limits").
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '100', POSTERN_RATE_REQUESTS: '0' });
  });
  after(() => s.close());

  it('a reader paging concurrently sees every event exactly once, in log order', async () => {
    const p = await newProject(s);
    const inboxes = [await addInbox(s, p), await addInbox(s, p), await addInbox(s, p)];
    const writer = await p.token(['events:write']);
    const reader = await p.token(['events:read', 'project:read']);
    await register(s, writer, { name: 'ext.item.made', description: 'x', data: [{ name: 'n', type: 'integer' }] });
    const written = new Set<string>();
    const TOTAL_HTTP = 4000;
    const TOTAL_RECORD = 6000;
    let done = false;
    // Four HTTP writers (project-level and inbox events) and one in-process recorder at once.
    const httpWriters = Array.from({ length: 4 }, async (_, w) => {
      for (let i = w; i < TOTAL_HTTP; i += 4) {
        const res = await post(s, writer, { type: 'ext.item.made', data: { n: i }, ...(i % 3 === 0 ? { inbox: inboxes[i % 3] } : {}) });
        expect(res.status).to.equal(201);
        written.add((await json<{ id: string }>(res)).id);
      }
    });
    const recorder = (async () => {
      for (let i = 0; i < TOTAL_RECORD; i++) {
        const r = await s.postern.events.record({
          type: 'message.received',
          projectId: p.projectId,
          inboxId: inboxes[i % 3]!,
          actor: SYSTEM_ACTOR,
          data: { msgId: MSG(i) },
        });
        written.add(r.eventId);
        if (i % 200 === 0) await sleep(2);
      }
    })();
    const writers = Promise.all([...httpWriters, recorder]).then(() => {
      done = true;
    });
    const seen: WireEvent[] = [];
    let cursor = '';
    let pages = 0;
    // The reader keeps up with the writers however long they take on a loaded machine; once they
    // are done it reads until nothing new has come for a while (well past the settle delay).
    let idleSince = Date.now();
    for (;;) {
      const page = await getPage(`${s.base}/events?limit=500${cursor ? `&after=${cursor}` : ''}`, { token: reader });
      pages++;
      seen.push(...page.events);
      expect(page.cursor).to.be.a('string');
      cursor = page.cursor;
      if (page.events.length > 0 || !done) idleSince = Date.now();
      if (done && (seen.length >= TOTAL_HTTP + TOTAL_RECORD || Date.now() - idleSince > 5000)) break;
      if (page.events.length < 500) await sleep(20);
    }
    await writers;
    const ids = seen.map((e) => e.id);
    expect(new Set(ids).size, 'no event repeated').to.equal(ids.length);
    expect(ids.length).to.equal(TOTAL_HTTP + TOTAL_RECORD);
    const idSet = new Set(ids);
    for (const id of written) if (!idSet.has(id)) expect.fail(`missing ${id}`);
    // Log order: per stream, sequences strictly increase by one.
    const byStream = new Map<string, number[]>();
    for (const e of seen) {
      const k = e.containerid ?? e.scope;
      byStream.set(k, [...(byStream.get(k) ?? []), Number(e.sequence)]);
    }
    for (const [k, seqs] of byStream) expect(seqs, k).to.deep.equal(seqs.map((_, i) => i + 1));
    expect(pages).to.be.above(20);
  });
});
