// The webhook dispatcher's parts (lib/webhooks/*.ts, docs/webhooks.md, "The dispatcher's parts"), each
// tested alone with fakes: no store, no mail server. One file, so the suite pays its start once.
import { expect } from 'chai';
import { OneAtATime, Soon } from '../../lib/webhooks/coalesce.ts';
import { deliveryBody, leadingTime } from '../../lib/webhooks/delivery-body.ts';
import type { Principal } from '../../lib/auth/access.ts';
import type { Scope } from '../../lib/auth/scopes.ts';
import { STANDING_TTL_MS, type StandingAccess, TokenStandings, type Standing } from '../../lib/webhooks/token-standing.ts';
import { clock, endpointRecord, deliveryRecord, silent } from '../helpers/webhook-fixtures.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { SigningSecrets } from '../../lib/webhooks/signing-secrets.ts';
import type {
  WebhookEndpointRecord,
  DeliveryRecord,
  DeliveryOutcome,
  WebhookDisabling,
  EnqueueLease,
  NewDelivery,
  PostResult,
} from '../../lib/webhooks/ports.ts';
import { planClaim } from '../../lib/webhooks/claim-plan.ts';
import { MAX_BATCH, PACE_EVERY_MS, Paces } from '../../lib/webhooks/pace.ts';
import { type Held, InFlight } from '../../lib/webhooks/in-flight.ts';
import { OutcomeWriter, handedBack, outcomeOf } from '../../lib/webhooks/outcomes.ts';
import type { RecordInput } from '../../lib/events/log.ts';
import { EndpointDisabling, type DisableReason } from '../../lib/webhooks/disabling.ts';
import { Cursors } from '../../lib/events/cursor.ts';
import type { StoredEvent } from '../../lib/events/types.ts';
import { Attempts } from '../../lib/webhooks/attempt.ts';
import { EndpointCache, type EndpointCacheOptions } from '../../lib/webhooks/endpoint-cache.ts';
import { Enqueuing } from '../../lib/webhooks/enqueue.ts';
import { FailingBudget } from '../../lib/webhooks/failing.ts';

describe('lib/webhooks/coalesce.ts', () => {
  // OneAtATime and Soon (lib/webhooks/coalesce.ts): how the dispatcher runs a thing once however often it is asked.
  /** A promise and its resolve, for a body the test lets finish. */
  function gate(): { wait: Promise<void>; open: () => void } {
    let open = () => {};
    const wait = new Promise<void>((r) => (open = r));
    return { wait, open };
  }

  describe('webhooks: OneAtATime', () => {
    it('runs once more after a run, for any number of asks made during it', async () => {
      const gates = [gate(), gate()];
      let runs = 0;
      const o = new OneAtATime<string>(
        async () => void (await gates[runs++]!.wait),
        () => {},
      );
      const first = o.run('a');
      void o.run('a');
      void o.run('a');
      expect(runs).to.equal(1);
      gates[0]!.open();
      await new Promise((r) => setImmediate(r));
      expect(runs).to.equal(2);
      gates[1]!.open();
      await first;
      expect(runs).to.equal(2);
    });

    it('runs different keys side by side', async () => {
      const g = gate();
      const seen: string[] = [];
      const o = new OneAtATime<string>(
        async (k) => {
          seen.push(k);
          await g.wait;
        },
        () => {},
      );
      const both = [o.run('a'), o.run('b')];
      expect(seen).to.deep.equal(['a', 'b']);
      g.open();
      await Promise.all(both);
    });

    it('stops asking again once stopped, and hands a failure to `failed`, the next ask starting afresh', async () => {
      let stopped = false;
      let runs = 0;
      const failures: unknown[] = [];
      const o = new OneAtATime<string>(
        async () => {
          runs++;
          if (runs === 1) {
            void o.run('a');
            stopped = true;
          }
          if (runs === 2) throw new Error('boom');
        },
        (err) => failures.push(err),
        () => stopped,
      );
      await o.run('a');
      expect(runs).to.equal(1);
      stopped = false;
      await o.run('a');
      expect(runs).to.equal(2);
      expect(failures).to.have.length(1);
      await o.run('a');
      expect(runs).to.equal(3);
    });
  });

  describe('webhooks: Soon', () => {
    it('calls once for every ask made before it runs, and again for an ask after', () => {
      const deferred: Array<() => void> = [];
      let calls = 0;
      const s = new Soon(
        (run) => deferred.push(run),
        () => calls++,
      );
      s.ask();
      s.ask();
      s.ask();
      expect(deferred).to.have.length(1);
      deferred.shift()!();
      expect(calls).to.equal(1);
      s.ask();
      expect(deferred).to.have.length(1);
      deferred.shift()!();
      expect(calls).to.equal(2);
    });
  });
});

describe('lib/webhooks/delivery-body.ts', () => {
  // deliveryBody (lib/webhooks/delivery-body.ts): the event as the log keeps it, extended with its cursor as text.
  const cursors = { encode: (projectId: string, position: number) => `cur_${projectId}_${position}` };
  const d = { projectId: 'prj_a', position: 7, type: 'message.added' };

  describe('webhooks: deliveryBody', () => {
    it('extends the log JSON as text: the same bytes parsing and writing it again would give', () => {
      const event = { eventId: 'evt_1', time: '2026-01-02T03:04:05.000Z', type: 'message.added', data: { n: 1, s: 'a"b' } };
      const body = deliveryBody(cursors, d, JSON.stringify(event), 0);
      expect(body).to.equal(JSON.stringify({ type: 'message.added', timestamp: event.time, data: { ...event, cursor: 'cur_prj_a_7' } }));
    });

    it('takes the long way when the time is nested, escaped or missing', () => {
      expect(leadingTime('{"data":{"time":"x"},"time":"2026-01-01T00:00:00Z"}')).to.equal(null);
      expect(leadingTime('{"time":"a\\"b"}')).to.equal(null);
      expect(leadingTime('{"eventId":"e","time":"2026-01-01T00:00:00Z","data":{}}')).to.equal('2026-01-01T00:00:00Z');
      const nested = { data: { time: 'inner' }, time: '2026-01-01T00:00:00.000Z' };
      const parsed = JSON.parse(deliveryBody(cursors, d, JSON.stringify(nested), 0)) as { timestamp: string; data: { cursor: string } };
      expect(parsed.timestamp).to.equal('2026-01-01T00:00:00.000Z');
      expect(parsed.data.cursor).to.equal('cur_prj_a_7');
      const timeless = JSON.parse(deliveryBody(cursors, d, '{"eventId":"e"}', Date.UTC(2026, 0, 2))) as { timestamp: string };
      expect(timeless.timestamp).to.equal('2026-01-02T00:00:00.000Z');
    });
  });
});

describe('lib/webhooks/token-standing.ts', () => {
  // TokenStandings (lib/webhooks/token-standing.ts): what an endpoint's token may read, read at most once a second.
  function principal(scopes: Scope[], projectId = 'prj_a'): Principal {
    return { kind: 'token', credentialId: 'tok_a', actor: 'tok_a', projectId, memberId: 'mem_a', scopes: new Set(scopes), inboxes: null };
  }

  /** An Access answering with `current` and counting the token reads. */
  function access(current: { p: Principal | null; inboxes: string[] }): StandingAccess & { reads: number } {
    const a: StandingAccess & { reads: number } = {
      reads: 0,
      principalOfToken: async () => {
        a.reads++;
        return current.p;
      },
      hasScope: (p: Principal, s: Scope) => p.scopes.has(s),
      grantedInboxes: async () => current.inboxes.map((id) => ({ inbox: { id } })),
    };
    return a;
  }

  describe('webhooks: TokenStandings', () => {
    it('reads a token once within the TTL and again after it: a revocation reaches deliveries within it', async () => {
      const c = clock();
      const current = { p: principal(['events:read']) as Principal | null, inboxes: ['inb_1'] };
      const a = access(current);
      const s = new TokenStandings(a, c.now);
      const e = endpointRecord();
      expect(s.recent(e)).to.equal(null);
      expect((await s.of(e)).principal).to.not.equal(null);
      current.p = null;
      expect((await s.of(e)).principal).to.not.equal(null);
      expect(s.recent(e)?.readable.has('inb_1')).to.equal(true);
      expect(a.reads).to.equal(1);
      c.add(STANDING_TTL_MS);
      expect(s.recent(e)).to.equal(null);
      expect((await s.of(e)).principal).to.equal(null);
      expect(a.reads).to.equal(2);
    });

    it('a token of another project or without events:read stands for nothing', async () => {
      const c = clock();
      const e = endpointRecord();
      expect(
        (await new TokenStandings(access({ p: principal(['events:read'], 'prj_b'), inboxes: ['inb_1'] }), c.now).of(e)).principal,
      ).to.equal(null);
      const noScope = await new TokenStandings(access({ p: principal(['messages:read']), inboxes: ['inb_1'] }), c.now).of(e);
      expect(noScope.principal).to.equal(null);
      expect(noScope.readable.size).to.equal(0);
    });

    it("filters as GET /events would for the token, narrowed to the endpoint's inboxes", () => {
      const s = new TokenStandings(access({ p: null, inboxes: [] }), clock().now);
      const e = endpointRecord({ inboxes: ['inb_1', 'inb_gone'], types: ['message.*'] });
      const readable = new Set(['inb_1', 'inb_2']);
      expect(s.filterOf(e, principal(['events:read']), readable)).to.deep.equal({
        projectId: 'prj_a',
        inboxes: ['inb_1'],
        allowedInboxes: ['inb_1', 'inb_2'],
        visibilities: ['inbox'],
        types: ['message.*'],
        redactActor: false,
      });
      expect(s.filterOf(endpointRecord(), principal(['events:read', 'project:read']), readable).visibilities).to.deep.equal([
        'inbox',
        'project',
      ]);
    });
  });
});

describe('lib/webhooks/signing-secrets.ts', () => {
  // SigningSecrets (lib/webhooks/signing-secrets.ts): an endpoint's secrets opened once per change, and when a rotation's overlap ends.
  describe('webhooks: SigningSecrets', () => {
    it('opens the secrets once per change of the endpoint, and again once the previous secret expires', () => {
      const c = clock(1000);
      let opened = 0;
      const endpoints = {
        signingSecrets: (e: WebhookEndpointRecord, at?: number) => {
          opened++;
          return e.previousExpiresAt !== null && e.previousExpiresAt > (at ?? 0) ? ['new', 'old'] : ['new'];
        },
      };
      const s = new SigningSecrets(endpoints, c.now);
      const rotated = endpointRecord({ updatedAt: 5, previousExpiresAt: 2000 });
      expect(s.of(rotated)).to.deep.equal(['new', 'old']);
      expect(s.of(rotated)).to.deep.equal(['new', 'old']);
      expect(opened).to.equal(1);
      c.set(2000);
      expect(s.of(rotated)).to.deep.equal(['new']);
      expect(opened).to.equal(2);
      expect(s.of(rotated)).to.deep.equal(['new']);
      expect(opened).to.equal(2);
      s.of({ ...rotated, updatedAt: 6 });
      expect(opened).to.equal(3);
    });
  });
});

describe('lib/webhooks/pace.ts', () => {
  // Paces (lib/webhooks/pace.ts) and planClaim (lib/webhooks/claim-plan.ts): how many deliveries are leased, and for which endpoints.
  describe('webhooks: Paces', () => {
    it('a batch is twice the cap until the pace is measured, then what the receiver gets through in 100 ms, at most MAX_BATCH', () => {
      const c = clock();
      const p = new Paces(4, c.now);
      expect(p.batchOf('whk_a')).to.equal(8);
      // 100 attempts ended in 50 ms (the first starts the count): 2000 a second, 200 in 100 ms.
      for (let i = 0; i < 99; i++) p.ended('whk_a');
      c.add(PACE_EVERY_MS);
      p.ended('whk_a');
      expect(p.batchOf('whk_a')).to.equal(200);
      for (let i = 0; i < 1000; i++) p.ended('whk_a');
      c.add(PACE_EVERY_MS);
      p.ended('whk_a');
      expect(p.batchOf('whk_a')).to.equal(MAX_BATCH);
      expect(p.batchOf('whk_b')).to.equal(8);
      p.keepOnly(new Set(['whk_b']));
      expect(p.batchOf('whk_a')).to.equal(8);
    });
  });

  describe('webhooks: planClaim', () => {
    const endpoints = [
      ['whk_1', { projectId: 'prj_a' }],
      ['whk_2', { projectId: 'prj_a' }],
      ['whk_3', { projectId: 'prj_b' }],
    ] as const;
    const base = {
      endpoints,
      drained: new Set<string>(),
      held: () => 0,
      batchOf: () => 10,
      projectRooms: new Map<string, number>(),
      emptyProjectRoom: 100,
    };

    it('asks a batch each, skipping drained endpoints and those above half a batch', () => {
      const plan = planClaim({ ...base, turn: 0, drained: new Set(['whk_3']), held: (id) => (id === 'whk_2' ? 6 : 2) });
      expect(plan).to.deep.equal({ endpoints: [{ id: 'whk_1', limit: 8 }], projectFull: false });
    });

    it("shares a project's room among its endpoints in turn, starting one further on each claim", () => {
      const tight = { ...base, projectRooms: new Map([['prj_a', 10]]) };
      expect(planClaim({ ...tight, turn: 0 })).to.deep.equal({
        endpoints: [
          { id: 'whk_1', limit: 10 },
          { id: 'whk_3', limit: 10 },
        ],
        projectFull: true,
      });
      expect(planClaim({ ...tight, turn: 1 }).endpoints.map((e) => e.id)).to.deep.equal(['whk_2', 'whk_3']);
      expect(planClaim({ ...tight, turn: 5 }).endpoints.map((e) => e.id)).to.deep.equal(['whk_3', 'whk_1']);
    });
  });
});

describe('lib/webhooks/in-flight.ts', () => {
  // InFlight (lib/webhooks/in-flight.ts): the deliveries a process holds, started under the endpoint's, the project's and the process's caps.
  const caps = { concurrency: 2, projectConcurrency: 3, maxInFlight: 4, timeoutMs: 1000 };

  function harness(over: Partial<typeof caps> = {}, mayStart?: (h: Held) => number) {
    const c = clock();
    const started: Array<{ h: Held; signal: AbortSignal }> = [];
    const handedBack: DeliveryRecord[] = [];
    let closed = false;
    const stopping = new AbortController();
    const f = new InFlight({
      caps: { ...caps, ...over },
      now: c.now,
      start: (h, signal) => started.push({ h, signal }),
      mayStart,
      handBack: (d) => handedBack.push(d),
      closed: () => closed,
      stopping: stopping.signal,
    });
    let n = 0;
    const held = (endpointId: string, projectId = 'prj_a', until = c.now() + 60_000): Held => ({
      d: deliveryRecord({ endpointId, projectId, eventId: `evt_${++n}`, position: n }),
      until,
      event: null,
    });
    const ids = () => started.map((s) => s.h.d.eventId);
    return { c, f, started, handedBack, held, ids, close: () => (closed = true), stopping };
  }

  describe('webhooks: InFlight', () => {
    it('starts at most `concurrency` per endpoint; an attempt ending starts the next, in order', () => {
      const t = harness();
      t.f.add([t.held('whk_1'), t.held('whk_1'), t.held('whk_1')]);
      expect(t.ids()).to.deep.equal(['evt_1', 'evt_2']);
      expect(t.f.held('whk_1')).to.equal(3);
      t.f.ended(t.started[0]!.h.d);
      expect(t.ids()).to.deep.equal(['evt_1', 'evt_2', 'evt_3']);
      expect(t.f.held('whk_1')).to.equal(2);
    });

    it('holds a project to `projectConcurrency` and the process to `maxInFlight`; room goes to those waiting, in the order they began', () => {
      const t = harness();
      t.f.add([t.held('whk_1'), t.held('whk_1'), t.held('whk_2'), t.held('whk_2'), t.held('whk_3'), t.held('whk_4', 'prj_b')]);
      // prj_a: 3 under way (whk_1 twice, whk_2 once); whk_3 waits for its project; whk_4 (prj_b) starts: 4 in all.
      expect(t.ids()).to.deep.equal(['evt_1', 'evt_2', 'evt_3', 'evt_6']);
      expect(t.f.projectRoom('prj_a')).to.equal(2 * 3 - 5);
      expect(t.f.projectRooms()).to.deep.equal(
        new Map([
          ['prj_a', 2 * 3 - 5],
          ['prj_b', 2 * 3 - 1],
        ]),
      );
      expect(t.f.heldTotal()).to.equal(6);
      t.f.add([t.held('whk_5', 'prj_c')]);
      expect(t.ids()).to.have.length(4);
      // prj_b's attempt ends: the process has room, prj_a has not: whk_5 (prj_c) starts.
      t.f.ended(t.started[3]!.h.d);
      expect(t.ids().slice(4)).to.deep.equal(['evt_7']);
      // One of prj_a's ends: whk_1 has nothing left; whk_2 waited first, so it goes before whk_3.
      t.f.ended(t.started[0]!.h.d);
      expect(t.ids().slice(5)).to.deep.equal(['evt_4']);
    });

    it('hands back a delivery whose lease is too short for an attempt, and every waiting one once closed', () => {
      const t = harness();
      t.f.add([t.held('whk_1', 'prj_a', t.c.now() + 1000), t.held('whk_1')]);
      expect(t.handedBack.map((d) => d.eventId)).to.deep.equal(['evt_1']);
      expect(t.ids()).to.deep.equal(['evt_2']);
      t.close();
      t.f.add([t.held('whk_2')]);
      expect(t.handedBack.map((d) => d.eventId)).to.deep.equal(['evt_1', 'evt_3']);
    });

    it('forget abandons the endpoint’s attempts and drops what waits; attemptsEnded resolves when the last ends', async () => {
      const t = harness({ concurrency: 1 });
      t.f.add([t.held('whk_1'), t.held('whk_1'), t.held('whk_2')]);
      const [one, two] = t.started;
      expect(t.f.endpointIds()).to.deep.equal(new Set(['whk_1', 'whk_2']));
      t.f.forget('whk_1');
      expect(one!.signal.aborted).to.equal(true);
      expect(two!.signal.aborted).to.equal(false);
      let ended = false;
      const done = t.f.attemptsEnded().then(() => (ended = true));
      t.f.ended(one!.h.d);
      expect(t.ids()).to.deep.equal(['evt_1', 'evt_3']);
      await new Promise((r) => setImmediate(r));
      expect(ended).to.equal(false);
      t.stopping.abort();
      expect(two!.signal.aborted).to.equal(true);
      t.f.ended(two!.h.d);
      await done;
      expect(t.f.takeWaiting()).to.deep.equal([]);
    });

    it('mayStart holds an endpoint back until its timer, then starts it; others go on meanwhile', async () => {
      let wait = 5;
      const t = harness({}, (h) => (h.d.endpointId === 'whk_1' ? wait : 0));
      t.f.add([t.held('whk_1'), t.held('whk_2')]);
      expect(t.ids()).to.deep.equal(['evt_2']);
      // An attempt ending asks again: the timer is kept, not doubled.
      t.f.ended(t.started[0]!.h.d);
      expect(t.ids()).to.deep.equal(['evt_2']);
      wait = 0;
      await until('whk_1 started after its wait', async () => t.ids().includes('evt_1'));
      expect(t.f.held('whk_1')).to.equal(1);
      // What waits for its budget is given back when closing.
      wait = 1000;
      t.f.add([t.held('whk_1')]);
      expect(t.f.takeWaiting().map((d) => d.eventId)).to.deep.equal(['evt_3']);
    });

    it('takeWaiting gives back what never started', () => {
      const t = harness({ concurrency: 1 });
      t.f.add([t.held('whk_1'), t.held('whk_1')]);
      expect(t.f.takeWaiting().map((d) => d.eventId)).to.deep.equal(['evt_2']);
      expect(t.f.held('whk_1')).to.equal(1);
    });
  });
});

describe('lib/webhooks/failing.ts', () => {
  describe('webhooks: FailingBudget', () => {
    it("starts a failing endpoint's attempts at its project's rate; healthy endpoints and other projects are not counted", () => {
      const c = clock();
      const storeSays = new Map<string, number | null>([['whk_old', 1]]);
      const b = new FailingBudget(4, c.now, (id) => storeSays.get(id) ?? null);
      // Never tried here: healthy unless the store says it is failing.
      for (let i = 0; i < 100; i++) expect(b.wait('whk_new', 'prj_a')).to.equal(0);
      expect(b.failing('whk_old')).to.equal(true);
      b.outcome('whk_1', 'down');
      b.outcome('whk_2', 'down');
      // 4 at once (the old one's and whk_1's and whk_2's together), then one every 250 ms.
      expect([b.wait('whk_old', 'prj_a'), b.wait('whk_1', 'prj_a'), b.wait('whk_2', 'prj_a'), b.wait('whk_1', 'prj_a')]).to.deep.equal([
        0, 0, 0, 0,
      ]);
      expect(b.wait('whk_2', 'prj_a')).to.equal(250);
      // Another project's failing endpoint has its own budget; a healthy one of prj_a is not held.
      b.outcome('whk_b', 'down');
      expect(b.wait('whk_b', 'prj_b')).to.equal(0);
      expect(b.wait('whk_new', 'prj_a')).to.equal(0);
      c.add(250);
      expect(b.wait('whk_2', 'prj_a')).to.equal(0);
      expect(b.wait('whk_2', 'prj_a')).to.equal(250);
      // A 2xx: healthy again at once; not tried (null) changes nothing.
      b.outcome('whk_2', 'up');
      b.outcome('whk_1', null);
      expect(b.wait('whk_2', 'prj_a')).to.equal(0);
      expect(b.failing('whk_1')).to.equal(true);
      expect(new FailingBudget(0, c.now, () => 1).wait('whk_x', 'prj_a'), '0: no limit').to.equal(0);
    });
  });
});

describe('lib/webhooks/outcomes.ts', () => {
  // OutcomeWriter (lib/webhooks/outcomes.ts): attempts' outcomes written behind them, many to a write.
  describe('webhooks: OutcomeWriter', () => {
    it('writes every outcome pushed before the deferred write in one call, then tells what the store says of failing endpoints', async () => {
      const writes: DeliveryOutcome[][] = [];
      const told: Array<Map<string, number | null>> = [];
      const deferred: Array<() => void> = [];
      const w = new OutcomeWriter({
        store: {
          finish: async (batch) => {
            writes.push([...batch]);
            return new Map([['whk_a', 5]]);
          },
        },
        log: silent,
        written: async (failing) => void told.push(failing),
        defer: (run) => deferred.push(run),
      });
      for (const n of [1, 2, 3]) {
        w.push(handedBack(deliveryRecord({ eventId: `evt_${n}` }), 'me', 10));
        w.soon();
      }
      expect(deferred).to.have.length(1);
      deferred[0]!();
      await w.flush();
      expect(writes.map((b) => b.map((o) => o.eventId))).to.deep.equal([['evt_1', 'evt_2', 'evt_3']]);
      expect(told).to.deep.equal([new Map([['whk_a', 5]])]);
      await w.flush();
      expect(writes).to.have.length(1);
    });

    it('a write waits for the one under way; a failed write is logged, not thrown', async () => {
      let release = () => {};
      let calls = 0;
      const w = new OutcomeWriter({
        store: {
          finish: async () => {
            if (++calls === 1) await new Promise<void>((r) => (release = r));
            else throw new Error('store down');
            return new Map();
          },
        },
        log: silent,
        written: async () => {},
      });
      w.push(handedBack(deliveryRecord(), 'me', 1));
      const first = w.flush();
      w.push(handedBack(deliveryRecord({ eventId: 'evt_2' }), 'me', 1));
      const second = w.flush();
      await new Promise((r) => setImmediate(r));
      expect(calls).to.equal(1);
      release();
      await Promise.all([first, second]);
      expect(calls).to.equal(2);
    });

    it('an outcome names the delivery and the owner; handed back keeps what the last attempt said', () => {
      const d = deliveryRecord({ lastStatus: 500, lastError: 'HTTP 500', lastMs: 12, nextAttemptAt: 99 });
      expect(handedBack(d, 'me', 7)).to.deep.equal(outcomeOf(d, 'me', 'pending', 99, 7, 500, 'HTTP 500', 12, null));
      expect(outcomeOf(d, 'me', 'delivered', 99, 7, 200, null, 3, 'up')).to.deep.equal({
        endpointId: 'whk_a',
        eventId: 'evt_1',
        position: 1,
        owner: 'me',
        state: 'delivered',
        nextAttemptAt: 99,
        at: 7,
        status: 200,
        error: null,
        ms: 3,
        receiver: 'up',
      });
    });
  });
});

describe('lib/webhooks/disabling.ts', () => {
  // EndpointDisabling (lib/webhooks/disabling.ts): the dispatcher disables an endpoint once per spell, and says why.
  function harness(current: WebhookEndpointRecord | null) {
    const set: Array<{ id: string; disabling: WebhookDisabling | null }> = [];
    const recorded: RecordInput[] = [];
    const d = new EndpointDisabling({
      store: {
        get: async () => current,
        setDisabled: async (_p, id, disabling) => {
          set.push({ id, disabling });
          return null;
        },
      },
      events: {
        record: async (input) => {
          recorded.push(input);
          return null;
        },
      },
      log: silent,
      now: clock(5000).now,
    });
    return { d, set, recorded };
  }

  describe('webhooks: EndpointDisabling', () => {
    it('disables it by the dispatcher and records webhook.endpoint.disabled, keyed by when the spell began', async () => {
      const t = harness(endpointRecord({ updatedAt: 42 }));
      await t.d.disable(endpointRecord({ failingSince: 1234 }), 'failing', 'HTTP 500');
      expect(t.set).to.deep.equal([
        { id: 'whk_a', disabling: { at: 5000, by: 'dispatcher', reason: 'every attempt failed for too long' } },
      ]);
      expect(t.recorded).to.have.length(1);
      expect(t.recorded[0]).to.include({ type: 'webhook.endpoint.disabled', projectId: 'prj_a', subject: 'whk_a' });
      expect(t.recorded[0]!.data).to.deep.equal({ webhookId: 'whk_a', reason: 'failing', detail: 'HTTP 500' });
      expect(t.recorded[0]!.dedupeKey).to.equal('webhook.endpoint.disabled whk_a failing 1234');
      const gone = harness(endpointRecord({ updatedAt: 42 }));
      await gone.d.disable(endpointRecord(), 'gone', 'x'.repeat(600));
      expect(gone.recorded[0]!.dedupeKey).to.equal('webhook.endpoint.disabled whk_a gone 42');
      expect((gone.recorded[0]!.data as { detail: string }).detail).to.have.length(500);
    });

    it('does nothing to an endpoint already disabled (by anyone) or deleted', async () => {
      for (const current of [endpointRecord({ disabledAt: 1, disabledBy: 'staff' }), null]) {
        const t = harness(current);
        await t.d.disable(endpointRecord(), 'token', 'revoked');
        expect(t.set).to.deep.equal([]);
        expect(t.recorded).to.deep.equal([]);
      }
    });
  });
});

describe('lib/webhooks/attempt.ts', () => {
  // Attempts (lib/webhooks/attempt.ts): one attempt of one delivery and the outcome its answer comes to, with a fake receiver.
  const principal: Principal = {
    kind: 'token',
    credentialId: 'tok_a',
    actor: 'tok_a',
    projectId: 'prj_a',
    memberId: 'mem_a',
    scopes: new Set(['events:read']),
    inboxes: null,
  };

  const event = (inboxId: string | null = 'ibx_1'): StoredEvent => ({
    position: 1,
    eventId: 'evt_1',
    projectId: 'prj_a',
    inboxId,
    type: 'message.added',
    visibility: 'inbox',
    recordedAt: 1,
    json: JSON.stringify({ eventId: 'evt_1', time: '2026-01-01T00:00:00.000Z', type: 'message.added', data: {} }),
  });

  function harness(o: { answer?: PostResult; standing?: Partial<Standing>; known?: WebhookEndpointRecord | null } = {}) {
    const c = clock();
    const posts: Array<{ url: string; headers: Record<string, string>; body: string; project?: string }> = [];
    const disabled: DisableReason[] = [];
    const standing: Standing = { principal, readable: new Set(['ibx_1']), at: c.now(), ...o.standing };
    const metrics: string[] = [];
    const a = new Attempts({
      known: () => (o.known === undefined ? endpointRecord() : o.known),
      store: { get: async () => null },
      events: { cursors: async () => new Cursors(new Uint8Array(32)) },
      standings: { recent: () => standing, of: async () => standing },
      secrets: { of: () => ['whsec_BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc='] },
      disable: async (_e, reason) => void disabled.push(reason),
      post: async (url, headers, body, _signal, project) => {
        posts.push({ url, headers, body, project });
        return o.answer ?? { ok: true, status: 200, retryAfterSeconds: null, ms: 3 };
      },
      settings: { scheduleMs: [1000, 2000] },
      metrics: { attempted: (outcome) => void metrics.push(outcome) },
      owner: 'me',
      now: c.now,
      random: () => 0.5,
    });
    const signal = new AbortController().signal;
    return { a, c, posts, disabled, metrics, signal };
  }

  describe('webhooks: Attempts', () => {
    it('posts the signed body to the endpoint for its project; a 2xx is delivered', async () => {
      const t = harness();
      const out = await t.a.attempt(deliveryRecord(), event(), t.signal);
      expect(out).to.include({ state: 'delivered', status: 200, receiver: 'up', owner: 'me', ms: 3 });
      expect(t.posts).to.have.length(1);
      expect(t.posts[0]!.project).to.equal('prj_a');
      expect(t.posts[0]!.headers).to.include.keys('webhook-id', 'webhook-timestamp', 'webhook-signature');
      expect(JSON.parse(t.posts[0]!.body)).to.have.nested.property('data.cursor');
      expect(t.metrics).to.deep.equal(['delivered']);
    });

    it('a failure is retried on the schedule (Retry-After for 429), then given up', async () => {
      const t = harness({ answer: { ok: true, status: 429, retryAfterSeconds: 7, ms: 1 } });
      const out = await t.a.attempt(deliveryRecord(), event(), t.signal);
      expect(out).to.include({ state: 'pending', nextAttemptAt: t.c.now() + 7000, status: 429, receiver: 'down' });
      expect(out.error).to.equal('the receiver answered HTTP 429');
      const last = harness({ answer: { ok: false, error: 'connection refused', ms: 1 } });
      const given = await last.a.attempt(deliveryRecord({ attempts: 2 }), event(), last.signal);
      expect(given).to.include({ state: 'failed', error: 'connection refused', status: null });
      expect(last.metrics).to.deep.equal(['failed']);
    });

    it('410 Gone disables the endpoint and keeps the delivery pending', async () => {
      const t = harness({ answer: { ok: true, status: 410, retryAfterSeconds: null, ms: 1 } });
      const out = await t.a.attempt(deliveryRecord(), event(), t.signal);
      expect(t.disabled).to.deep.equal(['gone']);
      expect(out).to.include({ state: 'pending', status: 410 });
    });

    it('hands back, untried, what it may not send: cancelled, endpoint gone or disabled, token revoked', async () => {
      const cancelled = harness({ answer: { ok: false, error: 'aborted', ms: 1, cancelled: true } });
      expect(await cancelled.a.attempt(deliveryRecord(), event(), cancelled.signal)).to.include({ state: 'pending', receiver: null });
      for (const known of [null, endpointRecord({ disabledAt: 1 })]) {
        const t = harness({ known });
        expect(await t.a.attempt(deliveryRecord(), event(), t.signal)).to.include({ state: 'pending', receiver: null });
        expect(t.posts).to.have.length(0);
      }
      const revoked = harness({ standing: { principal: null } });
      expect(await revoked.a.attempt(deliveryRecord(), event(), revoked.signal)).to.include({ state: 'pending', receiver: null });
      expect(revoked.disabled).to.deep.equal(['token']);
      expect(revoked.posts).to.have.length(0);
    });

    it('fails, unsent, an event gone from the log or of an inbox the token may no longer read', async () => {
      const gone = harness();
      expect(await gone.a.attempt(deliveryRecord(), null, gone.signal)).to.include({
        state: 'failed',
        error: 'the event is no longer in the log',
      });
      const unreadable = harness();
      const out = await unreadable.a.attempt(deliveryRecord(), event('ibx_2'), unreadable.signal);
      expect(out).to.include({ state: 'failed', error: "the endpoint's token may no longer read this inbox" });
      expect(gone.posts.length + unreadable.posts.length).to.equal(0);
    });
  });
});

describe('lib/webhooks/endpoint-cache.ts', () => {
  // EndpointCache (lib/webhooks/endpoint-cache.ts): the enabled endpoints, a live subscription per project, wakes batched.
  function harness(over: Partial<EndpointCacheOptions> = {}) {
    let rows: WebhookEndpointRecord[] = [];
    const listeners = new Map<string, () => void>();
    const deleted: string[] = [];
    let woken: (projects: ReadonlySet<string>) => void = () => {};
    const cache = new EndpointCache({
      store: { all: async () => rows },
      live: {
        subscribe: (project, listener) => {
          listeners.set(project, listener);
          return () => listeners.delete(project);
        },
      },
      woken: (projects) => woken(projects),
      held: () => [],
      deleted: (id) => deleted.push(id),
      closed: () => false,
      ...over,
    });
    return {
      cache,
      listeners,
      deleted,
      setRows: (r: WebhookEndpointRecord[]) => (rows = r),
      nextWake: () => new Promise<ReadonlySet<string>>((r) => (woken = r)),
    };
  }

  describe('webhooks: EndpointCache', () => {
    it('keeps the enabled endpoints and one live subscription per project that has any', async () => {
      const t = harness();
      t.setRows([
        endpointRecord(),
        endpointRecord({ id: 'whk_b', projectId: 'prj_b', disabledAt: 1 }),
        endpointRecord({ id: 'whk_c', projectId: 'prj_c' }),
      ]);
      expect(await t.cache.refresh()).to.equal(true);
      expect(t.cache.all().map(([id]) => id)).to.deep.equal(['whk_a', 'whk_c']);
      expect([...t.listeners.keys()]).to.deep.equal(['prj_a', 'prj_c']);
      t.setRows([endpointRecord({ id: 'whk_c', projectId: 'prj_c' })]);
      await t.cache.refresh();
      expect([...t.listeners.keys()]).to.deep.equal(['prj_c']);
      t.cache.close();
      expect(t.listeners.size).to.equal(0);
    });

    it('wakes once for the projects whose events arrived within WAKE_DELAY_MS', async () => {
      const t = harness();
      t.setRows([endpointRecord(), endpointRecord({ id: 'whk_b', projectId: 'prj_b' })]);
      await t.cache.refresh();
      const wake = t.nextWake();
      t.listeners.get('prj_a')!();
      t.listeners.get('prj_b')!();
      t.listeners.get('prj_a')!();
      expect([...(await wake)]).to.deep.equal(['prj_a', 'prj_b']);
    });

    it('drops a read begun before a forget (or a later refresh), and reports held endpoints no longer stored', async () => {
      let release = () => {};
      const t = harness({ held: () => ['whk_a', 'whk_gone'] });
      const rows = [endpointRecord()];
      const slow = new EndpointCache({
        store: { all: () => new Promise((r) => (release = () => r(rows))) },
        live: { subscribe: () => () => {} },
        woken: () => {},
        held: () => [],
        deleted: () => {},
        closed: () => false,
      });
      const reading = slow.refresh();
      slow.forget('whk_a');
      release();
      expect(await reading).to.equal(false);
      expect(slow.has('whk_a')).to.equal(false);
      t.setRows([endpointRecord()]);
      await t.cache.refresh();
      expect(t.deleted).to.deep.equal(['whk_gone']);
    });
  });
});

describe('lib/webhooks/enqueue.ts', () => {
  // Enqueuing (lib/webhooks/enqueue.ts): an endpoint's reading of the log into deliveries, with a fake log and store.
  const principal: Principal = {
    kind: 'token',
    credentialId: 'tok_a',
    actor: 'tok_a',
    projectId: 'prj_a',
    memberId: 'mem_a',
    scopes: new Set(['events:read']),
    inboxes: null,
  };

  const stored = (position: number): StoredEvent => ({
    position,
    eventId: `evt_${position}`,
    projectId: 'prj_a',
    inboxId: null,
    type: 'message.added',
    visibility: 'inbox',
    recordedAt: position,
    json: '{}',
  });

  interface Enqueued {
    from: number;
    to: number;
    deliveries: readonly NewDelivery[];
    lease?: EnqueueLease;
  }

  function harness(o: {
    log: number;
    room: number | (() => number);
    standing?: Partial<Standing>;
    moved?: WebhookEndpointRecord | null;
    /** Events a read returns (2 unless told). */
    perRead?: number;
    /** EnqueuingOptions.ahead (0 unless told). */
    ahead?: number;
  }) {
    const c = clock();
    const reads: number[] = [];
    const waiting: string[] = [];
    const known = new Map([['whk_a', endpointRecord()]]);
    const enqueued: Enqueued[] = [];
    const leased: Array<{ leased: DeliveryRecord[]; read: number }> = [];
    const unleased: string[] = [];
    const disabled: DisableReason[] = [];
    const standing: Standing = { principal, readable: new Set(), at: 0, ...o.standing };
    const q = new Enqueuing({
      endpoints: {
        get: (id) => known.get(id) ?? null,
        has: (id) => known.has(id),
        set: (e) => void known.set(e.id, e),
        delete: (id) => known.delete(id),
      },
      store: {
        enqueue: async (_id, from, to, deliveries, _at, lease) => {
          if (o.moved !== undefined) return null;
          enqueued.push({ from, to, deliveries, lease });
          return deliveries.slice(0, lease?.count ?? 0).map((d) => deliveryRecord({ ...d }));
        },
        get: async () => o.moved ?? null,
      },
      // Two events a read, up to the log's head.
      events: {
        backfill: async (_filter, after) => {
          reads.push(after);
          const events = Array.from({ length: o.perRead ?? 2 }, (_, i) => after + 1 + i)
            .filter((p) => p <= o.log)
            .map(stored);
          const scannedTo = events.at(-1)?.position ?? after;
          return { events, scannedTo, complete: scannedTo >= o.log };
        },
      },
      standings: {
        of: async () => standing,
        filterOf: () => ({
          projectId: 'prj_a',
          inboxes: null,
          allowedInboxes: [],
          visibilities: ['inbox'],
          types: null,
          redactActor: false,
        }),
      },
      disable: async (_e, reason) => void disabled.push(reason),
      room: () => (typeof o.room === 'number' ? o.room : o.room()),
      ahead: () => o.ahead ?? 0,
      waitingForRoom: (id) => void waiting.push(id),
      leased: async (l, _until, read) => void leased.push({ leased: l, read: read.length }),
      leftUnleased: (id) => unleased.push(id),
      settings: { leaseMs: 30_000 },
      owner: 'me',
      now: c.now,
      closed: () => false,
    });
    return { q, known, enqueued, leased, unleased, disabled, c, reads, waiting };
  }

  describe('webhooks: Enqueuing', () => {
    it('reads until caught up, moving the position read by read, making and leasing what there is room for', async () => {
      const t = harness({ log: 3, room: 2 });
      await t.q.catchUp('whk_a');
      expect(t.enqueued.map((e) => [e.from, e.to, e.deliveries.map((d) => d.position)])).to.deep.equal([
        [0, 2, [1, 2]],
        [2, 3, [3]],
      ]);
      expect(t.enqueued[0]!.lease).to.deep.equal({ owner: 'me', until: t.c.now() + 30_000, count: 2 });
      expect(t.leased.map((l) => l.leased.map((d) => d.position))).to.deep.equal([[1, 2], [3]]);
      expect(t.unleased).to.deep.equal([]);
      expect(t.waiting).to.deep.equal([]);
      expect(t.known.get('whk_a')!.position).to.equal(3);
    });

    it('makes no more deliveries than there is room to send: the position moves to the last one made', async () => {
      // 10 events a read, room for 3: what is leased takes it.
      let room = 3;
      const held = () => t.leased.reduce((n, l) => n + l.leased.length, 0);
      const t: ReturnType<typeof harness> = harness({ log: 10, perRead: 10, room: () => room - held() });
      await t.q.catchUp('whk_a');
      expect(t.enqueued.map((e) => [e.from, e.to, e.deliveries.map((d) => d.position), e.lease?.count])).to.deep.equal([
        [0, 3, [1, 2, 3], 3],
      ]);
      expect(t.leased.map((l) => l.leased.length)).to.deep.equal([3]);
      expect(t.known.get('whk_a')!.position).to.equal(3);
      // Out of room: waiting, the next step read nothing.
      expect(t.waiting).to.deep.equal(['whk_a']);
      expect(t.reads).to.deep.equal([0]);
      // Room again: it goes on from there.
      room = 103;
      await t.q.catchUp('whk_a');
      expect(t.enqueued.map((e) => [e.from, e.to])).to.deep.equal([
        [0, 3],
        [3, 10],
      ]);
      expect(t.known.get('whk_a')!.position).to.equal(10);
    });

    it('with room, makes up to a batch ahead: the room leased, the rest for a claim', async () => {
      const room = 3;
      const held = () => t.leased.reduce((n, l) => n + l.leased.length, 0);
      const t: ReturnType<typeof harness> = harness({ log: 10, perRead: 10, room: () => room - held(), ahead: 6 });
      await t.q.catchUp('whk_a');
      expect(t.enqueued.map((e) => [e.from, e.to, e.deliveries.map((d) => d.position), e.lease?.count])).to.deep.equal([
        [0, 6, [1, 2, 3, 4, 5, 6], 3],
      ]);
      expect(t.unleased).to.deep.equal(['whk_a']);
      expect(t.waiting).to.deep.equal(['whk_a']);
    });

    it('without room, reads and writes nothing: the events wait in the log, the endpoint waits for room', async () => {
      const t = harness({ log: 200, room: 0 });
      await t.q.catchUp('whk_a');
      expect(t.reads).to.deep.equal([]);
      expect(t.enqueued).to.deep.equal([]);
      expect(t.waiting).to.deep.equal(['whk_a']);
      expect(t.known.get('whk_a')!.position).to.equal(0);
    });

    it('reads where the endpoint stands when another process moved it, and drops it once disabled', async () => {
      const t = harness({ log: 2, room: 1, moved: endpointRecord({ position: 2 }) });
      await t.q.catchUp('whk_a');
      expect(t.known.get('whk_a')!.position).to.equal(2);
      const off = harness({ log: 2, room: 1, moved: endpointRecord({ disabledAt: 1 }) });
      await off.q.catchUp('whk_a');
      expect(off.known.has('whk_a')).to.equal(false);
    });

    it('disables the endpoint when its token stands for nothing, reading nothing', async () => {
      const t = harness({ log: 2, room: 1, standing: { principal: null } });
      await t.q.catchUp('whk_a');
      expect(t.disabled).to.deep.equal(['token']);
      expect(t.enqueued).to.deep.equal([]);
    });
  });
});
