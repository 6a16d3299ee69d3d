// Request budgets (docs/access.md, "Rate limits"): one token bucket per key, the one limiter shape
// Postern has. The per-address budget of the passkey ceremonies (lib/http/address-rate.ts) keys it
// by client address; CredentialRate below keys it by the token or session a request authenticated
// with, with a general budget for every request and a smaller one for expensive calls. No Koa
// here: the MCP tools charge the expensive budget through the same CredentialRate.
//
// The buckets are this process's own: with POSTERN_WORKERS=n (or several instances) each process
// keeps its own, so one credential may get up to n times a budget. That is abuse control, not
// billing; sharing the buckets would cost a round trip to the store or Redis on every request.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Principal } from './auth/access.ts';
import { isDomainError, rateLimited } from './errors.ts';
import type { RateKind, RateMetrics } from './metrics.ts';

/** A sustained rate and the burst a key may spend at once; `perSecond` 0 turns the budget off. */
export interface Budget {
  perSecond: number;
  burst: number;
}

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date (ms). */
  at: number;
}

/** Keys kept at most: past it the least recently seen is dropped (it gets a full bucket again). */
const MAX_KEYS = 100_000;

export class RateBuckets {
  /** In the order keys were last seen, oldest first: what the sweep and the cap drop first. */
  private readonly buckets = new Map<string, Bucket>();
  /** A bucket left alone this long is full again, so dropping it changes nothing. */
  private readonly refillMs: number;
  private readonly now: () => number;
  private readonly maxKeys: number;

  constructor(
    private readonly budget: Budget,
    options: { now?: () => number; maxKeys?: number } = {},
  ) {
    this.now = options.now ?? Date.now;
    this.maxKeys = options.maxKeys ?? MAX_KEYS;
    this.refillMs = budget.perSecond > 0 ? (budget.burst / budget.perSecond) * 1000 : 0;
  }

  get enabled(): boolean {
    return this.budget.perSecond > 0;
  }

  /** Buckets kept now (idle ones are dropped as others are taken from). */
  get size(): number {
    return this.buckets.size;
  }

  /**
   * Spends one token of `key`'s bucket: 0 when there was one, else the whole seconds (at least 1)
   * until there will be. A refused call spends nothing, so waiting that long is enough.
   */
  take(key: string): number {
    if (!this.enabled) return 0;
    const t = this.now();
    this.sweep(t);
    const { perSecond, burst } = this.budget;
    const kept = this.buckets.get(key);
    const bucket = kept ? { tokens: Math.min(burst, kept.tokens + ((t - kept.at) * perSecond) / 1000), at: t } : { tokens: burst, at: t };
    // Deleted and set again: the map's order stays the order keys were last seen in.
    this.buckets.delete(key);
    if (this.buckets.size >= this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    this.buckets.set(key, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / perSecond));
  }

  /** Drops the buckets not seen for refillMs: they are full, the same as no bucket. */
  private sweep(t: number): void {
    for (const [key, bucket] of this.buckets) {
      if (t - bucket.at < this.refillMs) return;
      this.buckets.delete(key);
    }
  }
}

/** What CredentialRate enforces: POSTERN_RATE_REQUESTS/_BURST and POSTERN_RATE_EXPENSIVE/_BURST. */
export interface CredentialLimits {
  requests: Budget;
  expensive: Budget;
  /** POSTERN_RATE_REFUSAL_DELAY_MS: a refusal is answered after this long (at most its Retry-After); 0: at once. */
  refusalDelayMs?: number;
  /** POSTERN_RATE_PER_TURN: requests of one credential started per turn of the event loop; 0: no limit. */
  perTurn?: number;
}

/** Refusals held at once in a process, at most; past it they are answered at once (each holds a socket already counted per address). */
const MAX_HELD = 10_000;

/**
 * The budgets of each token and session. `request` is charged once for every authenticated
 * request; `expensive` besides it for what costs the mail server real work (searches, whole
 * messages, MCP tool calls). Each throws a rate-limited DomainError (429 with Retry-After over
 * HTTP) when the credential's budget is spent, and counts the refusal by kind, never by credential.
 */
export class CredentialRate {
  private readonly requests: RateBuckets;
  private readonly expensiveCalls: RateBuckets;
  private readonly refusalDelayMs: number;
  private heldNow = 0;
  private readonly shares: TurnShares;

  constructor(
    limits: CredentialLimits,
    private readonly metrics: RateMetrics,
    options: { now?: () => number; maxKeys?: number } = {},
  ) {
    this.requests = new RateBuckets(limits.requests, options);
    this.expensiveCalls = new RateBuckets(limits.expensive, options);
    this.refusalDelayMs = limits.refusalDelayMs ?? 0;
    this.shares = new TurnShares(limits.perTurn ?? 0);
  }

  /** Starts `work` in `p`'s share of this turn of the event loop, or of a later one (POSTERN_RATE_PER_TURN; TurnShares). */
  inShare<T>(p: Principal, work: () => Promise<T>): Promise<T> {
    return this.shares.run(p.credentialId, work);
  }

  /** Requests started in a later turn than the one they arrived in, since the start. */
  get deferred(): number {
    return this.shares.deferred;
  }

  /**
   * Resolves when a refusal of this budget may be answered: after POSTERN_RATE_REFUSAL_DELAY_MS
   * (at most its Retry-After), at once for any other error. A client that ignores Retry-After and
   * asks again the moment it is refused (a closed loop on many connections) otherwise costs the
   * process a whole request's work per refusal, as fast as it can send, and that time is every
   * other caller's (docs/access.md, "Rate limits"); held, each connection of it asks once a delay.
   */
  async refused(err: unknown): Promise<void> {
    if (this.refusalDelayMs === 0 || !isDomainError(err) || err.kind !== 'rate-limited' || this.heldNow >= MAX_HELD) return;
    this.heldNow++;
    try {
      await sleep(Math.min(this.refusalDelayMs, (err.retryAfterSeconds ?? 1) * 1000));
    } finally {
      this.heldNow--;
    }
  }

  /** One request by `p`, whatever it asks. */
  request(p: Principal): void {
    this.charge(this.requests, 'request', p, 'too many requests for this credential');
  }

  /** One expensive call by `p` (a search, a whole message, an MCP tool call), besides its request. */
  expensive(p: Principal): void {
    this.charge(this.expensiveCalls, 'expensive', p, 'too many searches, message downloads and tool calls for this credential');
  }

  /** Buckets kept now, both budgets together (for tests of the idle sweep). */
  get size(): number {
    return this.requests.size + this.expensiveCalls.size;
  }

  private charge(buckets: RateBuckets, kind: RateKind, p: Principal, what: string): void {
    const retryAfter = buckets.take(p.credentialId);
    if (retryAfter === 0) return;
    this.metrics.refused(kind);
    throw rateLimited(`${what}; try again in ${retryAfter} s`, retryAfter);
  }
}

/**
 * At most `max` pieces of work per key at once; the others wait in order. A turn ends when its
 * work settles and is handed on at the next turn of the event loop (setImmediate), so that what
 * arrived meanwhile (requests, other keys' work) runs in between rather than behind a whole
 * queue of synchronous work. The webhook dispatcher's catch-up takes turns by project with it.
 */
export class Turns {
  private readonly keys = new Map<string, { running: number; waiting: Array<() => void> }>();

  constructor(private readonly max: number) {}

  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    if (this.max === 0) return work();
    let k = this.keys.get(key);
    if (!k) this.keys.set(key, (k = { running: 0, waiting: [] }));
    if (k.running < this.max) k.running++;
    else await new Promise<void>((resolve) => k.waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = k.waiting.shift();
      // Handed on: `running` stays counted for the next.
      if (next) setImmediate(next);
      else if (--k.running === 0) this.keys.delete(key);
    }
  }
}

/**
 * At most `perTurn` pieces of work per key started in one turn of the event loop; the rest wait,
 * in order, for later turns, where each key with work waiting starts its share in turn. Node
 * accepts one new connection per turn of its event loop (libuv), and reads every socket that has
 * data in the same turn: a caller whose many keep-alive connections each bring a request makes
 * each turn as long as all its requests' synchronous work (on SQLite, nearly all of it), so every
 * other caller's requests, and every new connection, waited turns of hundreds of milliseconds
 * (bench/RESULTS.md, "Session 17"). A cap on requests at once (Turns) does not bound that: work
 * that never awaits real I/O has ended before the next request is read. Here a turn holds a
 * bounded share of each caller's work, and the next turn comes soon after.
 */
export class TurnShares {
  private readonly started = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();
  private turnAhead = false;
  /** Work started in a later turn than the one it was asked for in (the metrics' count). */
  deferred = 0;

  constructor(private readonly perTurn: number) {}

  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    if (this.perTurn === 0) return work();
    const n = this.started.get(key) ?? 0;
    if (n < this.perTurn && !this.waiting.has(key)) {
      this.started.set(key, n + 1);
      this.nextTurn();
      return work();
    }
    this.deferred++;
    return new Promise<T>((resolve, reject) => {
      let queue = this.waiting.get(key);
      if (!queue) this.waiting.set(key, (queue = []));
      queue.push(() => work().then(resolve, reject));
      this.nextTurn();
    });
  }

  /** The next turn (setImmediate: after this turn's sockets are read) starts a share of each key's waiting work. */
  private nextTurn(): void {
    if (this.turnAhead) return;
    this.turnAhead = true;
    setImmediate(() => {
      this.turnAhead = false;
      this.started.clear();
      for (const [key, queue] of this.waiting) {
        const now = queue.splice(0, this.perTurn);
        if (queue.length === 0) this.waiting.delete(key);
        this.started.set(key, now.length);
        for (const start of now) start();
      }
      if (this.started.size > 0) this.nextTurn();
    });
  }
}
