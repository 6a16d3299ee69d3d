// What other processes changed, as PostgreSQL announces it: triggers (migrations 008, 011) NOTIFY
// on commit of a change to a token, an event type, a grant, an inbox or an index's seeded state,
// and this one connection per process LISTENs. A process keeps those hot reads (every request
// makes one or more of them) and drops one when its change is
// announced, so a token revoked through any machine, or by `postern admin`, is refused by every
// machine as soon as the notice arrives (milliseconds), with no round trip per request.
//
// Nothing may be kept unless the connection is known to hear notices now. A connection can die
// without a word (a NAT or load balancer dropping it as idle, a half-open TCP connection, a
// PgBouncer in transaction mode that never passes notices on): so the process sends itself a
// notice on a channel of its own every heartbeat, over the pool, and counts the connection live
// only while one sent less than HEARTBEAT_BOUND beats ago has come back. PostgreSQL delivers
// notices in commit order, so a heartbeat heard means every change committed before it was sent
// has been heard too. Otherwise `live` is false: every read goes to the store, and what was kept
// is dropped (docs/deployment.md, "Kept reads").
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';

/** Channels of migrations 008 and 011. */
export type ChangeChannel = 'postern_tokens' | 'postern_event_types' | 'postern_grants' | 'postern_inboxes' | 'postern_index_seeded';

/**
 * Drops everything every process kept: for writes that bypass the triggers (a restore, triggers
 * disabled, session_replication_role = replica). `NOTIFY postern_forget` from any session.
 */
export const FORGET_CHANNEL = 'postern_forget';

const RETRY_MS = [100, 500, 2_000, 5_000];
/** Kept reads are served while a heartbeat sent less than this many beats ago has been heard. */
export const HEARTBEAT_BOUND = 3;
/** A listening connection that heard no heartbeat for this many beats is closed and opened again. */
const HEARTBEAT_DEAD = 10;
/** TCP keepalive on the listening connection: what a silent peer's death is noticed by, besides heartbeats. */
const KEEPALIVE_DELAY_MS = 10_000;

export interface PgChangesOptions {
  /** Where to LISTEN (POSTERN_DATABASE_LISTEN_URL, else the store's URL): never through a PgBouncer in transaction mode. */
  url: string;
  /** Heartbeats are sent over it (any connection of the database will do). */
  pool: pg.Pool;
  applicationName: string;
  /** How often a heartbeat is sent (POSTERN_DATABASE_HEARTBEAT_MS). */
  heartbeatMs: number;
  onError?: (err: Error) => void;
  /** The connection became live (`true`) or stopped being so, and why. */
  onState?: (live: boolean, why: string) => void;
}

export class PgChanges {
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private readonly handlers = new Map<ChangeChannel, Array<(payload: string | null) => void>>();
  private failures = 0;
  private retry: NodeJS.Timeout | null = null;
  private closed = false;
  /** Connections already taken for lost: their late `error` and `end` change nothing. */
  private readonly gone = new WeakSet<pg.Client>();
  /** This process's own heartbeat channel: no other process hears its beats. */
  private readonly beatChannel = `postern_beat_${randomBytes(8).toString('hex')}`;
  private beats: NodeJS.Timeout | null = null;
  private beating = false;
  /** When the current connection started listening (performance.now()): a beat sent before proves nothing. */
  private listeningSince = 0;
  /** When the newest heartbeat heard on the current connection was sent; null: none since it listened, or since a gap. */
  private confirmedSentAt: number | null = null;
  /** When the current connection last heard a heartbeat (or started listening). */
  private heardAt = 0;
  /**
   * Moves with every notice and every lost connection: a read begun at another generation may
   * already be stale when it answers (its change's notice came first), so it is not kept.
   */
  generation = 0;

  constructor(private readonly o: PgChangesOptions) {}

  private get boundMs(): number {
    return this.o.heartbeatMs * HEARTBEAT_BOUND;
  }

  /**
   * Listening now, and heard to (a recent heartbeat came back): what is kept is dropped on its
   * change. Starts listening when not (the caller reads the store meanwhile).
   */
  get live(): boolean {
    if (!this.client) {
      if (!this.connecting && !this.retry && !this.closed) this.connecting = this.connect();
      return false;
    }
    if (this.confirmedSentAt === null) return false;
    if (performance.now() - this.confirmedSentAt > this.boundMs) {
      this.gap(`no heartbeat came back within ${this.boundMs} ms`);
      return false;
    }
    return true;
  }

  /** `handler(payload)` on each notice of `channel`; `handler(null)` when notices may have been missed. */
  on(channel: ChangeChannel, handler: (payload: string | null) => void): void {
    const list = this.handlers.get(channel) ?? [];
    list.push(handler);
    this.handlers.set(channel, list);
  }

  private forgetAll(): void {
    this.generation += 1;
    for (const list of this.handlers.values()) for (const h of list) h(null);
  }

  /** Not heard to lately: nothing is served from what was kept, which goes (notices may be missing). */
  private gap(why: string): void {
    if (this.confirmedSentAt === null) return;
    this.confirmedSentAt = null;
    this.forgetAll();
    this.o.onState?.(false, why);
  }

  private heard(client: pg.Client, payload: string | undefined): void {
    const sentAt = Number(payload);
    if (client !== this.client || !Number.isFinite(sentAt) || sentAt < this.listeningSince) return;
    this.heardAt = performance.now();
    // Late beats may come back after a gap: one sent too long ago does not make the connection live.
    if (this.heardAt - sentAt > this.boundMs || (this.confirmedSentAt !== null && sentAt <= this.confirmedSentAt)) return;
    const was = this.confirmedSentAt;
    this.confirmedSentAt = sentAt;
    if (was !== null) return;
    // Only a connection heard on resets the backoff: one that opens but never hears (a pooler
    // passing no notices) is opened again ever more slowly.
    this.failures = 0;
    this.o.onState?.(true, 'a heartbeat came back');
  }

  /** Sends a heartbeat (one at a time); closes a connection that has heard none for too long. */
  private beat(): void {
    const client = this.client;
    if (!client || this.closed) return;
    if (performance.now() - this.heardAt > this.o.heartbeatMs * HEARTBEAT_DEAD) {
      this.o.onError?.(
        new Error(`the listening connection heard no heartbeat for ${this.o.heartbeatMs * HEARTBEAT_DEAD} ms: closed, to be opened again`),
      );
      // Its socket, not a polite end: a dead peer would never answer one.
      client.connection.stream.destroy();
      this.lost(client, 'heartbeats stopped coming back');
      return;
    }
    if (this.beating) return;
    this.beating = true;
    // Failures are the pool's to report; a heartbeat that is not sent is not heard, which is what counts.
    this.o.pool
      .query('SELECT pg_notify($1, $2)', [this.beatChannel, String(performance.now())])
      .catch(() => undefined)
      .finally(() => (this.beating = false));
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.o.url,
      application_name: `${this.o.applicationName} (changes)`,
      connectionTimeoutMillis: 10_000,
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_DELAY_MS,
    });
    client.on('notification', (n) => {
      if (n.channel === this.beatChannel) return this.heard(client, n.payload);
      if (client !== this.client) return;
      if (n.channel === FORGET_CHANNEL) return this.forgetAll();
      this.generation += 1;
      for (const h of this.handlers.get(n.channel as ChangeChannel) ?? []) h(n.payload ?? null);
    });
    client.on('error', (err) => {
      this.o.onError?.(err);
      this.lost(client, `the listening connection failed: ${err.message}`);
    });
    client.on('end', () => this.lost(client, 'the listening connection ended'));
    try {
      await client.connect();
      // One statement list: one transaction, so behind a pooler it is all on one server connection.
      const channels = [this.beatChannel, FORGET_CHANNEL, ...this.handlers.keys()];
      await client.query(channels.map((c) => `LISTEN ${c}`).join('; '));
      if (this.closed) {
        await client.end();
        return;
      }
      this.client = client;
      this.listeningSince = performance.now();
      this.heardAt = this.listeningSince;
      this.confirmedSentAt = null;
      if (!this.beats) {
        this.beats = setInterval(() => this.beat(), this.o.heartbeatMs);
        this.beats.unref();
      }
      this.beat();
    } catch (err) {
      this.o.onError?.(err as Error);
      client.end().catch(() => undefined);
      this.lost(client, `the listening connection could not be opened: ${(err as Error).message}`);
    } finally {
      this.connecting = null;
    }
  }

  /** Notices may have been missed: forget everything kept, and listen again after a pause (longer after each failure). */
  private lost(client: pg.Client, why: string): void {
    if (this.gone.has(client) || (this.client !== null && this.client !== client)) return;
    this.gone.add(client);
    const wasLive = this.client !== null && this.confirmedSentAt !== null;
    this.client = null;
    this.confirmedSentAt = null;
    this.forgetAll();
    if (wasLive) this.o.onState?.(false, why);
    if (this.closed || this.retry) return;
    const wait = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)]!;
    this.failures += 1;
    this.retry = setTimeout(() => {
      this.retry = null;
      if (!this.closed && !this.client && !this.connecting) this.connecting = this.connect();
    }, wait);
    this.retry.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
    if (this.beats) clearInterval(this.beats);
    await this.connecting;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }
}

/**
 * Reads kept while `changes` is live, each at most `ttlMs`, dropped by key (or all) on a notice.
 * `ttlMs` 0 keeps nothing.
 */
export class KeptReads<V> {
  private readonly kept = new Map<string, { value: V; until: number }>();
  /** Moves with every drop: a read begun before one is not kept. */
  private drops = 0;

  constructor(
    private readonly changes: PgChanges,
    private readonly ttlMs: number,
    private readonly max = 10_000,
  ) {}

  /** The kept value of `key`, or what `read` answers (kept unless null). */
  async get(key: string, read: () => Promise<V | null>): Promise<V | null> {
    if (this.ttlMs <= 0) return read();
    const live = this.changes.live;
    const now = Date.now();
    const hit = this.kept.get(key);
    if (live && hit && hit.until > now) return hit.value;
    const [generation, drops] = [this.changes.generation, this.drops];
    const value = await read();
    // Kept only if nothing was dropped and no notice came while it was read: it may have been for it.
    if (value !== null && live && this.changes.live && generation === this.changes.generation && drops === this.drops) {
      if (this.kept.size >= this.max) this.kept.clear();
      this.kept.set(key, { value, until: now + this.ttlMs });
    }
    return value;
  }

  /** Drops `key`'s entry, or (null) every entry. */
  drop(key: string | null): void {
    this.drops += 1;
    if (key === null) this.kept.clear();
    else this.kept.delete(key);
  }

  /** Drops every entry whose key starts with `prefix`. */
  dropPrefix(prefix: string): void {
    this.drops += 1;
    for (const key of this.kept.keys()) if (key.startsWith(prefix)) this.kept.delete(key);
  }
}
