// Request budgets per credential (docs/access.md, "Rate limits"): the token buckets of lib/rate.ts
// on their own (a clock of the test's), then over HTTP: a token's or session's general budget
// (POSTERN_RATE_REQUESTS/_BURST) and its expensive one (POSTERN_RATE_EXPENSIVE/_BURST) for
// searches, whole messages and MCP tool calls, each 429 with Retry-After, and the refusals counted.
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { expect } from 'chai';
import type { Principal } from '../../lib/auth/access.ts';
import { isDomainError } from '../../lib/errors.ts';
import type { RateKind } from '../../lib/metrics.ts';
import { CredentialRate, RateBuckets, TurnShares, Turns } from '../../lib/rate.ts';
import { call, expectError, json, newProject, startPostern, type TestServer } from '../helpers/harness.ts';

const principal = (credentialId: string): Principal => ({
  kind: 'token',
  credentialId,
  actor: credentialId,
  projectId: 'prj_test',
  memberId: 'mem_test',
  scopes: new Set(),
  inboxes: null,
});

describe('request budgets: the token buckets', () => {
  it('spends the burst, refills at the rate, and says in whole seconds how long to wait', () => {
    let t = 0;
    const b = new RateBuckets({ perSecond: 2, burst: 3 }, { now: () => t });
    expect([b.take('a'), b.take('a'), b.take('a')]).to.deep.equal([0, 0, 0]);
    expect(b.take('a'), 'half a second for one token, told as 1').to.equal(1);
    t = 499;
    expect(b.take('a'), 'a refusal spends nothing, but it is not time yet').to.equal(1);
    t = 500;
    expect(b.take('a')).to.equal(0);
    expect(b.take('b'), 'another key has its own bucket').to.equal(0);

    const slow = new RateBuckets({ perSecond: 0.1, burst: 1 }, { now: () => t });
    expect(slow.take('a')).to.equal(0);
    expect(slow.take('a'), 'one token every 10 s').to.equal(10);
  });

  it('drops a bucket once it is full again (idle for burst / rate), keeping those still refilling', () => {
    let t = 0;
    const b = new RateBuckets({ perSecond: 1, burst: 2 }, { now: () => t });
    b.take('a');
    b.take('a');
    t = 1000;
    b.take('b');
    expect(b.size).to.equal(2);
    t = 1999;
    b.take('c');
    expect(b.size, 'a was seen 1999 ms ago: not full yet').to.equal(3);
    t = 2000;
    b.take('c');
    expect(b.size, 'a is full again: dropped').to.equal(2);
    t = 10_000;
    b.take('c');
    expect(b.size, 'only c, just seen').to.equal(1);
    // A dropped key starts again from a full bucket, as it would have had.
    expect([b.take('a'), b.take('a'), b.take('a')]).to.deep.equal([0, 0, 1]);
  });

  it('keeps at most maxKeys buckets, dropping the least recently seen', () => {
    const t = 0;
    const b = new RateBuckets({ perSecond: 1, burst: 1 }, { now: () => t, maxKeys: 2 });
    b.take('a');
    b.take('b');
    b.take('a');
    b.take('c');
    expect(b.size).to.equal(2);
    expect(b.take('a'), 'a, seen last but one, is kept: still empty').to.equal(1);
    expect(b.take('b'), 'b, the least recently seen, was dropped: full again').to.equal(0);
  });

  it('with a rate of 0 refuses nothing and keeps nothing', () => {
    const b = new RateBuckets({ perSecond: 0, burst: 1 });
    for (let i = 0; i < 100; i++) expect(b.take('a')).to.equal(0);
    expect(b.size).to.equal(0);
  });

  it('CredentialRate: a bucket per credential and per budget, refusals counted by kind, idle credentials dropped', () => {
    let t = 0;
    const refused: RateKind[] = [];
    const rate = new CredentialRate(
      { requests: { perSecond: 1, burst: 2 }, expensive: { perSecond: 1, burst: 1 } },
      { refused: (kind) => refused.push(kind) },
      { now: () => t },
    );
    const a = principal('tok_a');
    const b = principal('tok_b');
    rate.request(a);
    rate.request(a);
    const err = (() => {
      try {
        rate.request(a);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(isDomainError(err) && err.kind === 'rate-limited' && err.retryAfterSeconds === 1, String(err)).to.equal(true);
    rate.request(b);
    rate.expensive(a);
    expect(() => rate.expensive(a)).to.throw(/too many searches/);
    expect(refused).to.deep.equal(['request', 'expensive']);
    expect(rate.size).to.equal(3);
    // Each budget drops its idle buckets as it is next charged (a map that is not charged does not grow).
    t = 2000;
    rate.request(b);
    rate.expensive(b);
    expect(rate.size, 'only b, just seen, in both; a, left alone long enough, is full again').to.equal(2);
  });

  it('holds a refusal POSTERN_RATE_REFUSAL_DELAY_MS (at most its Retry-After) before it is answered; nothing else', async () => {
    const budgets = { requests: { perSecond: 1, burst: 1 }, expensive: { perSecond: 1, burst: 1 } };
    const rate = new CredentialRate({ ...budgets, refusalDelayMs: 300 }, { refused: () => undefined });
    const a = principal('tok_a');
    rate.request(a);
    const err = (() => {
      try {
        rate.request(a);
      } catch (e) {
        return e;
      }
      return null;
    })();
    let started = performance.now();
    await rate.refused(err);
    expect(performance.now() - started, 'a refusal, held').to.be.within(290, 1000);
    started = performance.now();
    await rate.refused(new Error('not a refusal'));
    expect(performance.now() - started, 'any other error: at once').to.be.below(50);
    // Never longer than the Retry-After it says.
    const long = new CredentialRate({ ...budgets, refusalDelayMs: 60_000 }, { refused: () => undefined });
    long.request(a);
    const refusal = (() => {
      try {
        long.request(a);
      } catch (e) {
        return e;
      }
      return null;
    })();
    started = performance.now();
    await long.refused(refusal);
    expect(performance.now() - started, 'Retry-After: 1 s').to.be.within(990, 3000);
  });

  it('TurnShares: at most `perTurn` of a key started per turn of the event loop, even work that never awaits; the rest in order in later turns', async () => {
    const shares = new TurnShares(2);
    const log: string[] = [];
    // Synchronous work, as a request on SQLite mostly is: a cap on work at once (Turns) never engages.
    const work = (name: string) => () => {
      log.push(name);
      return Promise.resolve(name);
    };
    const runs = ['a1', 'a2', 'a3', 'a4', 'a5'].map((n) => shares.run('a', work(n)));
    const other = shares.run('b', work('b1'));
    expect(log, 'two of a in this turn; b has its own share').to.deep.equal(['a1', 'a2', 'b1']);
    expect(shares.deferred).to.equal(3);
    // The next turn (after the sockets with data are read: setImmediate) starts a's next share, no more.
    await new Promise((resolve) => setImmediate(resolve));
    expect(log.slice(3)).to.deep.equal(['a3', 'a4']);
    await new Promise((resolve) => setImmediate(resolve));
    expect(log.slice(5)).to.deep.equal(['a5']);
    expect(await Promise.all([...runs, other])).to.deep.equal(['a1', 'a2', 'a3', 'a4', 'a5', 'b1']);
    // A key with work waiting starts nothing ahead of it in its turn: order is kept.
    const kept: string[] = [];
    const first = ['x1', 'x2', 'x3'].map((n) => shares.run('x', () => Promise.resolve(kept.push(n))));
    await new Promise((resolve) => setImmediate(resolve));
    await Promise.all([...first, shares.run('x', () => Promise.resolve(kept.push('x4')))]);
    expect(kept).to.deep.equal(['x1', 'x2', 'x3', 'x4']);
    // 0: no limit.
    const off = new TurnShares(0);
    const all: string[] = [];
    for (const n of ['1', '2', '3']) void off.run('a', () => Promise.resolve(all.push(n)));
    expect(all).to.have.length(3);
  });

  it('Turns: at most `max` per key at once, the rest in order, handed on at a later turn of the event loop', async () => {
    const turns = new Turns(2);
    const log: string[] = [];
    const gates = new Map<string, () => void>();
    const work = (name: string) => () =>
      new Promise<void>((resolve) => {
        log.push(`start ${name}`);
        gates.set(name, () => {
          log.push(`end ${name}`);
          resolve();
        });
      });
    const runs = ['a1', 'a2', 'a3', 'a4'].map((n) => turns.run('a', work(n)));
    const other = turns.run('b', work('b1'));
    await sleep(10);
    expect(log, 'two of a at once; b has its own').to.deep.equal(['start a1', 'start a2', 'start b1']);
    gates.get('a1')!();
    // Something that arrived meanwhile (an immediate queued now) runs before the next of a starts.
    setImmediate(() => log.push('in between'));
    await sleep(10);
    expect(log.slice(3)).to.deep.equal(['end a1', 'in between', 'start a3']);
    for (const n of ['a2', 'a3', 'b1']) gates.get(n)!();
    await sleep(10);
    gates.get('a4')!();
    await Promise.all([...runs, other]);
    expect(log.filter((l) => l.startsWith('start'))).to.deep.equal(['start a1', 'start a2', 'start b1', 'start a3', 'start a4']);
  });
});

/** One request after another with `auth` until one is refused: how many passed, and the refusal. */
async function untilRefused(
  url: string,
  auth: { token?: string; session?: string },
  most = 50,
): Promise<{ passed: number; refused: Response }> {
  for (let passed = 0; passed < most; passed++) {
    const res = await call(url, auth);
    if (res.status === 429) return { passed, refused: res };
    expect(res.status, `${url}: ${await res.clone().text()}`).to.equal(200);
    await res.arrayBuffer();
  }
  throw new Error(`${most} requests to ${url} and none refused`);
}

function retryAfter(res: Response): number {
  const header = res.headers.get('retry-after') ?? '';
  expect(header, 'Retry-After: whole seconds').to.match(/^[1-9]\d*$/);
  return Number(header);
}

describe('request budgets over HTTP: every request of a token or session', function () {
  this.timeout(60_000);
  let s: TestServer;
  before(async () => {
    s = await startPostern({ POSTERN_RATE_REQUESTS: '1', POSTERN_RATE_BURST: '3', POSTERN_RATE_REFUSAL_DELAY_MS: '0' });
  });
  after(() => s?.close());

  it('answers 429 with Retry-After once the burst is spent, for that token only, and again after waiting Retry-After', async () => {
    const p = await newProject(s);
    const flooded = await p.token(['messages:read']);
    const other = await p.token(['messages:read']);
    const started = Date.now();
    const { passed, refused } = await untilRefused(`${s.base}/inboxes`, { token: flooded });
    // The burst, and what refilled (one a second) while those requests ran.
    expect(passed).to.be.within(3, 3 + Math.ceil((Date.now() - started) / 1000));
    const wait = retryAfter(refused);
    expect(wait).to.equal(1);
    await expectError(refused, 429, /too many requests for this credential/);

    expect((await call(`${s.base}/inboxes`, { token: other })).status, 'another token of the same project').to.equal(200);
    await sleep(wait * 1000);
    expect((await call(`${s.base}/inboxes`, { token: flooded })).status, 'after Retry-After').to.equal(200);
  });

  it('holds a 429 POSTERN_RATE_REFUSAL_DELAY_MS while other callers are answered at once', async () => {
    const held = await startPostern({ POSTERN_RATE_REQUESTS: '1', POSTERN_RATE_BURST: '1', POSTERN_RATE_REFUSAL_DELAY_MS: '800' });
    try {
      const p = await newProject(held);
      const flooded = await p.token(['messages:read']);
      const other = await p.token(['messages:read']);
      expect((await call(`${held.base}/inboxes`, { token: flooded })).status).to.equal(200);
      const started = Date.now();
      const refusal = call(`${held.base}/inboxes`, { token: flooded }).then((res) => ({ res, at: Date.now() }));
      // While the refusal is held, another token is answered.
      const res = await call(`${held.base}/inboxes`, { token: other });
      expect(res.status).to.equal(200);
      const otherAt = Date.now();
      const { res: refused, at } = await refusal;
      await expectError(refused, 429, /too many requests for this credential/);
      expect(retryAfter(refused)).to.equal(1);
      expect(at - started, 'the refusal, held').to.be.within(750, 5000);
      expect(otherAt - started, 'the other token, not held').to.be.below(at - started - 400);
    } finally {
      await held.close();
    }
  });

  it('counts a session on /api/v1 the same way, its passkey and session endpoints included', async () => {
    const p = await newProject(s);
    const session = await p.session();
    const { passed, refused } = await untilRefused(`${s.app}/inboxes`, { session });
    expect(passed).to.be.at.least(3);
    retryAfter(refused);
    await expectError(refused, 429);
    await expectError(await call(`${s.app}/auth/sessions`, { session }), 429);
    expect((await call(`${s.app}/inboxes`, { session: await p.session() })).status, 'another session').to.equal(200);
  });
});

describe('request budgets over HTTP: searches, whole messages and MCP tool calls', function () {
  this.timeout(60_000);
  let s: TestServer;
  before(async () => {
    // One expensive call every 50 s after a burst of 2: nothing refills while the test runs.
    s = await startPostern({ POSTERN_RATE_EXPENSIVE: '0.02', POSTERN_RATE_EXPENSIVE_BURST: '2', POSTERN_METRICS_LISTEN: '127.0.0.1:0' });
  });
  after(() => s?.close());

  const refusals = async (kind: RateKind): Promise<number> => {
    const m = new RegExp(`^postern_rate_limited_total\\{kind="${kind}"\\} (\\d+)$`, 'm').exec(await s.postern.metrics!.text());
    return Number(m?.[1] ?? NaN);
  };
  const mcp = (token: string, body: unknown) =>
    call(`${s.base}/mcp`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify(body),
    });

  it('refuses them past the expensive burst while listing still passes, per token, and counts each refusal', async () => {
    const p = await newProject(s);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'content:read']);
    const before = { expensive: await refusals('expensive'), request: await refusals('request') };
    const search = `${s.base}/inboxes/${inbox.id}/search?subject=invoice`;

    expect((await call(search, { token })).status).to.equal(200);
    // A download is charged before the message is looked for: this one spends the second call.
    const raw = await call(`${s.base}/inboxes/${inbox.id}/messages/msg_00000000000000000000000000/raw`, { token });
    expect(raw.status, await raw.clone().text())
      .to.be.within(400, 499)
      .and.not.equal(429);

    const refused = await call(search, { token });
    expect(retryAfter(refused)).to.be.within(1, 50);
    await expectError(refused, 429, /too many searches, message downloads and tool calls/);
    await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/msg_00000000000000000000000000/source`, { token }), 429);
    const toolCall = await mcp(token, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'list_inboxes' } });
    retryAfter(toolCall);
    await expectError(toolCall, 429);

    // Plain reads have the general budget only.
    const labels = await json<{ labels: Array<{ id: string; name: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/labels`, { token }),
    );
    const inboxLabel = labels.labels.find((l) => l.name === 'INBOX')!;
    expect((await call(`${s.base}/inboxes/${inbox.id}/labels/${inboxLabel.id}/messages`, { token })).status).to.equal(200);
    const list = await mcp(token, { jsonrpc: '2.0', id: 2, method: 'tools/list' });
    expect(list.status, 'tools/list is not a tool call').to.equal(200);
    expect(((await list.json()) as { result?: { tools?: unknown[] } }).result?.tools).to.be.an('array').that.is.not.empty;

    const other = await p.token(['messages:read']);
    expect((await call(search, { token: other })).status, 'another token').to.equal(200);

    expect(await refusals('expensive')).to.equal(before.expensive + 3);
    expect(await refusals('request')).to.equal(before.request);
  });
});

/** A keep-alive connection to `base`'s host that sends raw requests and records when each answer's head arrives. */
async function rawConnection(
  base: string,
  token: string,
  answered: string[],
  name: string,
): Promise<{ send: (path: string) => void; socket: Socket }> {
  const u = new URL(base);
  const socket = connect(Number(u.port), u.hostname);
  await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let seen = '';
  socket.on('data', (d: Buffer) => {
    seen += d.toString('latin1');
    // One answer each (a short JSON body): counted by its status line.
    for (let i = seen.indexOf('HTTP/1.1 '); i >= 0; i = seen.indexOf('HTTP/1.1 ')) {
      answered.push(name);
      seen = seen.slice(i + 9);
    }
  });
  return {
    socket,
    send: (path) => socket.write(`GET ${u.pathname}${path} HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${token}\r\n\r\n`),
  };
}

describe("request shares over HTTP: one token's many connections and another token's request", function () {
  this.timeout(60_000);

  it("answers another token's request in the turn it arrives, not after all of one token's requests read in the same turn", async () => {
    const s = await startPostern({ POSTERN_RATE_PER_TURN: '2' });
    const sockets: Socket[] = [];
    try {
      const p = await newProject(s);
      const many = await p.token(['messages:read']);
      const one = await p.token(['messages:read']);
      const answered: string[] = [];
      const a = await Promise.all(Array.from({ length: 40 }, (_, i) => rawConnection(s.base, many, answered, `a${i}`)));
      const b = await rawConnection(s.base, one, answered, 'b');
      sockets.push(...a.map((c) => c.socket), b.socket);
      // Each connection answered once first, so every socket is open, accepted and idle.
      for (const c of [...a, b]) c.send('/inboxes');
      while (answered.length < 41) await sleep(10);
      answered.length = 0;
      // All in one go: the server reads them in one turn, the other token's last.
      for (const c of a) c.send('/inboxes');
      b.send('/inboxes');
      while (answered.length < 41) await sleep(10);
      const before = answered.indexOf('b');
      // Before the shares, the 40 of one token were worked through first (before = 40).
      expect(before, `answers of the many-connection token before the other's: ${answered.join(' ')}`).to.be.at.most(10);
    } finally {
      for (const c of sockets) c.destroy();
      await s.close();
    }
  });
});
