// What other processes changed, as PostgreSQL announces it: triggers (migrations 008, 011) NOTIFY
// on commit of a change to a token, an event type, a grant, an inbox or an index's seeded state,
// and this one connection per process LISTENs. A process keeps those hot reads (every request
// makes one or more of them) and drops one when its change is
// announced, so a token revoked through any machine, or by `postern admin`, is refused by every
// machine as soon as the notice arrives (milliseconds), with no round trip per request. Nothing
// may be kept while the connection is down: notices sent then are lost, so `live` is false, every
// read goes to the store, and what was kept is dropped.
import pg from 'pg';

/** Channels of migrations 008 and 011. */
export type ChangeChannel = 'postern_tokens' | 'postern_event_types' | 'postern_grants' | 'postern_inboxes' | 'postern_index_seeded';

const RETRY_MS = [100, 500, 2_000, 5_000];

export class PgChanges {
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private readonly handlers = new Map<ChangeChannel, Array<(payload: string | null) => void>>();
  private failures = 0;
  private retry: NodeJS.Timeout | null = null;
  private closed = false;
  /**
   * Moves with every notice and every lost connection: a read begun at another generation may
   * already be stale when it answers (its change's notice came first), so it is not kept.
   */
  generation = 0;

  constructor(
    private readonly url: string,
    private readonly applicationName: string,
    private readonly onError?: (err: Error) => void,
  ) {}

  /** Listening now: what is kept is dropped on its change. Starts listening when not (the caller reads the store meanwhile). */
  get live(): boolean {
    if (this.client) return true;
    if (!this.connecting && !this.retry && !this.closed) this.connecting = this.connect();
    return false;
  }

  /** `handler(payload)` on each notice of `channel`; `handler(null)` when notices may have been missed. */
  on(channel: ChangeChannel, handler: (payload: string | null) => void): void {
    const list = this.handlers.get(channel) ?? [];
    list.push(handler);
    this.handlers.set(channel, list);
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, application_name: `${this.applicationName} (changes)`, connectionTimeoutMillis: 10_000 });
    client.on('notification', (n) => {
      this.generation += 1;
      for (const h of this.handlers.get(n.channel as ChangeChannel) ?? []) h(n.payload ?? null);
    });
    client.on('error', (err) => {
      this.onError?.(err);
      this.lost(client);
    });
    client.on('end', () => this.lost(client));
    try {
      await client.connect();
      for (const channel of this.handlers.keys()) await client.query(`LISTEN ${channel}`);
      if (this.closed) {
        await client.end();
        return;
      }
      this.failures = 0;
      this.client = client;
    } catch (err) {
      this.onError?.(err as Error);
      client.end().catch(() => undefined);
      this.lost(client);
    } finally {
      this.connecting = null;
    }
  }

  /** Notices may have been missed: forget everything kept, and listen again after a pause. */
  private lost(client: pg.Client): void {
    if (this.client !== null && this.client !== client) return;
    this.client = null;
    this.generation += 1;
    for (const list of this.handlers.values()) for (const h of list) h(null);
    if (this.closed || this.retry) return;
    const wait = RETRY_MS[Math.min(this.failures, RETRY_MS.length - 1)]!;
    this.failures += 1;
    this.retry = setTimeout(() => {
      this.retry = null;
    }, wait);
    this.retry.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
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
