// IMAP connections to Dovecot, as the master user on behalf of each inbox's user (docs/mail.md, "Connections").
//
// - Bounded per inbox (maxPerInbox) and in all (maxTotal). Each inbox has its own connections
//   and queue, so work for one inbox never waits behind another's; at the global cap an idle
//   connection of another inbox is closed to make room.
// - A connection serves one task at a time (imapflow would queue commands on it, and a command
//   issued from inside a running fetch deadlocks). Tasks never share a connection.
// - Long work (downloads) runs in the "bulk" lane, which may use all but one connection of an
//   inbox, so a listing or sync always finds one.
// - Opening retries with backoff (Dovecot restarting); a task that fails because its connection
//   died is retried once on a fresh one (every task here is idempotent but copies, which ask not to be).
// - Nothing waits forever: a task that finds no connection within `acquireTimeoutMs` answers
//   503, and dedicated connections (watchers) are refused at the cap.
// - Dedicated connections never take the last `reservedForReads` of `maxTotal`: however many
//   inboxes are streamed, reads (tasks) always have those (docs/mail.md, "Limits").
import { ImapFlow, type ImapFlowOptions } from 'imapflow';
import type { Logger } from 'pino';
import type { Config } from '../../lib/config.ts';
import { DomainError, unavailable } from '../../lib/errors.ts';
import { NO_METRICS, type ImapMetrics } from '../../lib/metrics.ts';

/** The pool's settings are the configuration's, one declaration (lib/config.ts). */
export type ImapSettings = Config['imap'];

/**
 * A connection to Dovecot as `user`, by the master user (SASL PLAIN with the master separator),
 * with the connect and greeting deadlines every Postern connection has; `extra` adds the rest.
 */
export function asUser(
  s: Pick<ImapSettings, 'host' | 'port' | 'secure' | 'masterUser' | 'masterPassword' | 'masterSeparator'>,
  user: string,
  extra: Partial<ImapFlowOptions> = {},
): ImapFlow {
  return new ImapFlow({
    host: s.host,
    port: s.port,
    secure: s.secure,
    auth: { user: `${user}${s.masterSeparator}${s.masterUser}`, pass: s.masterPassword },
    logger: false,
    connectionTimeout: 10_000,
    greetingTimeout: 5_000,
    ...extra,
  });
}

/** No connection within the deadline, or none to be had at the cap: the server is busy. */
export class PoolBusyError extends DomainError {
  constructor() {
    super('unavailable', 'the mail server is busy; try again', 5);
    this.name = 'PoolBusyError';
  }
}

export type Lane = 'interactive' | 'bulk';

interface Conn {
  user: string;
  client: ImapFlow;
  idleTimer: NodeJS.Timeout | null;
  lane: Lane | null;
  /** Still counted in `total`: cleared exactly once, whichever way the connection goes. */
  counted: boolean;
}

interface Slot {
  idle: Conn[];
  busy: Set<Conn>;
  opening: number;
  bulk: number;
  waiters: Array<() => void>;
}

const IDLE_CLOSE_MS = 60_000;
const OPEN_ATTEMPTS = 6; // 100 ms doubling: about 3 s of retries before giving up

export class ImapPool {
  private readonly slots = new Map<string, Slot>();
  /** Woken when a connection closes anywhere: a task waiting at the global cap may proceed. */
  private capWaiters: Array<() => void> = [];
  private total = 0;
  private closed = false;
  private readonly dedicated = new Set<ImapFlow>();
  /** Dedicated connections open or opening (a `dedicated` entry only exists once connected). */
  private dedicatedCount = 0;

  constructor(
    private readonly settings: ImapSettings,
    private readonly log: Logger,
    private readonly metrics: ImapMetrics = NO_METRICS.imap,
  ) {}

  /** Connections open now, in all. */
  get size(): number {
    return this.total;
  }

  /** Connections now by state, for the metrics (busy + idle + opening + watching is `size`). */
  counts(): { busy: number; idle: number; opening: number; watching: number } {
    let busy = 0;
    let idle = 0;
    let opening = 0;
    for (const slot of this.slots.values()) {
      busy += slot.busy.size;
      idle += slot.idle.length;
      opening += slot.opening;
    }
    return { busy, idle, opening, watching: this.dedicatedCount };
  }

  /** Tasks waiting for a connection now (their inbox's, or room under the global cap). */
  waiting(): number {
    let n = this.capWaiters.length;
    for (const slot of this.slots.values()) n += slot.waiters.length;
    return n;
  }

  /** Connections open for one inbox's user now (busy or idle). */
  connectionsOf(user: string): number {
    const slot = this.slots.get(user);
    return slot ? slot.idle.length + slot.busy.size : 0;
  }

  /**
   * Runs the task on a connection of the user's. With `limit`, a task still running after
   * `limit.ms` fails with `limit.error()` and its connection is closed (the server may work on
   * its command for minutes and would answer it before any other), not retried: for a command
   * whose cost the caller cannot bound, a first body search indexing a large mailbox.
   * With `retry` false, a task whose connection died is not run again: for a task that is not
   * idempotent (a COPY that completed before the connection died would be made twice).
   */
  async use<T>(
    user: string,
    task: (client: ImapFlow) => Promise<T>,
    lane: Lane = 'interactive',
    limit?: { ms: number; error: () => Error },
    retry = true,
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const conn = await this.acquire(user, lane);
      const late: { error: Error | null } = { error: null };
      let timer: NodeJS.Timeout | undefined;
      try {
        const running = task(conn.client);
        const result = limit
          ? await Promise.race([
              running,
              new Promise<never>((_resolve, reject) => {
                timer = setTimeout(() => reject((late.error = limit.error())), limit.ms);
              }),
            ])
          : await running;
        this.release(conn);
        return result;
      } catch (err) {
        if (late.error) {
          // The task fails on the closed connection meanwhile; race() has already seen to that.
          this.discard(conn);
          throw late.error;
        }
        const dead = !conn.client.usable;
        if (dead) this.discard(conn);
        else this.release(conn);
        if (retry && dead && attempt === 0 && !this.closed) {
          this.log.debug({ err, user }, 'imap connection died during a task; retrying on a new one');
          continue;
        }
        throw err;
      } finally {
        clearTimeout(timer);
      }
    }
  }

  /**
   * Runs the task only if a connection is free now (idle, or room to open one); null otherwise.
   * For extra help (a parallel fill) that must never wait while holding another connection.
   */
  tryUse<T>(user: string, task: (client: ImapFlow) => Promise<T>, lane: Lane = 'interactive'): Promise<T> | null {
    if (this.closed) return null;
    const got = this.tryTake(user, lane);
    if (!got) return null;
    return (async () => {
      const conn = await got;
      try {
        const result = await task(conn.client);
        this.release(conn);
        return result;
      } catch (err) {
        if (conn.client.usable) this.release(conn);
        else this.discard(conn);
        throw err;
      }
    })();
  }

  /**
   * A connection outside the pool's queues (the watcher's), counted against the global cap: at
   * the cap (and no idle connection to close) it is refused with a PoolBusyError at once. The
   * caller closes it; it is closed with the pool otherwise.
   */
  async openDedicated(user: string): Promise<ImapFlow> {
    if (this.closed) throw unavailable('mail server connections are closed');
    // Refused before evicting anything: the reserve is for tasks, not for more watchers.
    if (this.dedicatedCount >= this.settings.maxTotal - this.settings.reservedForReads) throw new PoolBusyError();
    if (this.total >= this.settings.maxTotal) this.evictIdle(user);
    if (this.total >= this.settings.maxTotal) throw new PoolBusyError();
    this.total++;
    this.dedicatedCount++;
    try {
      const client = await this.connect(user);
      this.dedicated.add(client);
      client.once('close', () => {
        if (!this.dedicated.delete(client)) return;
        this.dedicatedCount--;
        this.onClosed();
      });
      return client;
    } catch (err) {
      this.total--;
      this.dedicatedCount--;
      throw err;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const all: ImapFlow[] = [...this.dedicated];
    for (const slot of this.slots.values()) {
      for (const c of [...slot.idle, ...slot.busy]) {
        if (c.idleTimer) clearTimeout(c.idleTimer);
        all.push(c.client);
      }
      for (const wake of slot.waiters.splice(0)) wake();
    }
    for (const wake of this.capWaiters.splice(0)) wake();
    this.slots.clear();
    this.dedicated.clear();
    this.dedicatedCount = 0;
    for (const client of all) client.close();
    this.total = 0;
  }

  private slot(user: string): Slot {
    let slot = this.slots.get(user);
    if (!slot) this.slots.set(user, (slot = { idle: [], busy: new Set(), opening: 0, bulk: 0, waiters: [] }));
    return slot;
  }

  private async acquire(user: string, lane: Lane): Promise<Conn> {
    const deadline = Date.now() + this.settings.acquireTimeoutMs;
    // Set on the first wait: a task that never waits costs the metrics nothing.
    let waitedFrom = 0;
    for (;;) {
      if (this.closed) throw unavailable('mail server connections are closed');
      const got = this.tryTake(user, lane);
      if (got) {
        if (waitedFrom) this.metrics.waited((performance.now() - waitedFrom) / 1000, 'acquired');
        return got;
      }
      // Room in the inbox's own bound but not in the global one: wait for any connection to go.
      const slot = this.slot(user);
      const laneOpen = this.laneOpen(slot, lane);
      const atCap = laneOpen && slot.busy.size + slot.opening < this.settings.maxPerInbox;
      waitedFrom ||= performance.now();
      try {
        await this.wait(atCap ? this.capWaiters : slot.waiters, deadline);
      } catch (err) {
        if (err instanceof PoolBusyError) this.metrics.waited((performance.now() - waitedFrom) / 1000, 'timed_out');
        throw err;
      }
    }
  }

  /** Resolves when woken; a PoolBusyError once the deadline passes. */
  private wait(list: Array<() => void>, deadline: number): Promise<void> {
    const left = deadline - Date.now();
    if (left <= 0) return Promise.reject(new PoolBusyError());
    return new Promise<void>((resolve, reject) => {
      const wake = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        const i = list.indexOf(wake);
        if (i >= 0) list.splice(i, 1);
        reject(new PoolBusyError());
      }, left);
      list.push(wake);
    });
  }

  private laneOpen(slot: Slot, lane: Lane): boolean {
    const { maxPerInbox } = this.settings;
    return lane === 'interactive' || maxPerInbox === 1 || slot.bulk < maxPerInbox - 1;
  }

  /** Without waiting: an idle connection, or a new one if the bounds allow; null when neither. */
  private tryTake(user: string, lane: Lane): Conn | Promise<Conn> | null {
    const { maxPerInbox, maxTotal } = this.settings;
    const slot = this.slot(user);
    if (!this.laneOpen(slot, lane)) return null;
    let conn: Conn | undefined;
    while ((conn = slot.idle.pop())) {
      if (conn.idleTimer) clearTimeout(conn.idleTimer);
      conn.idleTimer = null;
      if (conn.client.usable) return this.take(slot, conn, lane);
      this.forget(slot, conn);
    }
    if (slot.busy.size + slot.opening >= maxPerInbox) return null;
    if (this.total >= maxTotal) this.evictIdle(user);
    if (this.total >= maxTotal) return null;
    slot.opening++;
    this.total++;
    // The lane is taken now, not once connected, or two bulk tasks could both get in.
    if (lane === 'bulk') slot.bulk++;
    return this.open(slot, user, lane);
  }

  private async open(slot: Slot, user: string, lane: Lane): Promise<Conn> {
    let client: ImapFlow;
    try {
      client = await this.connect(user);
    } catch (err) {
      this.total--;
      if (lane === 'bulk') slot.bulk--;
      this.wake(slot);
      throw err;
    } finally {
      slot.opening--;
    }
    const fresh: Conn = { user, client, idleTimer: null, lane, counted: true };
    client.once('close', () => this.onConnClosed(fresh));
    slot.busy.add(fresh);
    return fresh;
  }

  private take(slot: Slot, conn: Conn, lane: Lane): Conn {
    slot.busy.add(conn);
    conn.lane = lane;
    if (lane === 'bulk') slot.bulk++;
    return conn;
  }

  private untake(slot: Slot, conn: Conn): boolean {
    if (!slot.busy.delete(conn)) return false;
    if (conn.lane === 'bulk') slot.bulk--;
    conn.lane = null;
    return true;
  }

  private release(conn: Conn): void {
    // A task that outlived close(): its connection is in no table close() could have emptied.
    if (this.closed) {
      conn.client.close();
      return;
    }
    const slot = this.slots.get(conn.user);
    if (!slot || !this.untake(slot, conn)) return;
    if (!conn.client.usable) {
      this.discard(conn);
      return;
    }
    conn.idleTimer = setTimeout(() => {
      const i = slot.idle.indexOf(conn);
      if (i >= 0) {
        slot.idle.splice(i, 1);
        conn.client.close();
      }
    }, IDLE_CLOSE_MS);
    conn.idleTimer.unref();
    slot.idle.push(conn);
    this.wake(slot);
    // A task of another inbox waiting at the cap may close this one now that it is idle.
    if (this.capWaiters.length > 0) this.capWaiters.shift()!();
  }

  private discard(conn: Conn): void {
    const slot = this.slots.get(conn.user);
    if (slot) this.forget(slot, conn);
    conn.client.close();
  }

  private forget(slot: Slot, conn: Conn): void {
    this.untake(slot, conn);
    const i = slot.idle.indexOf(conn);
    if (i >= 0) slot.idle.splice(i, 1);
  }

  private onConnClosed(conn: Conn): void {
    if (this.closed) return;
    if (conn.idleTimer) clearTimeout(conn.idleTimer);
    const slot = this.slots.get(conn.user);
    if (slot) {
      const i = slot.idle.indexOf(conn);
      if (i >= 0) slot.idle.splice(i, 1);
      // A busy connection that closed is discarded by its task when it fails.
    }
    this.uncount(conn);
    if (slot) this.wake(slot);
  }

  private uncount(conn: Conn): void {
    if (!conn.counted) return;
    conn.counted = false;
    this.onClosed();
  }

  private onClosed(): void {
    this.total = Math.max(0, this.total - 1);
    if (this.capWaiters.length > 0) this.capWaiters.shift()!();
  }

  private wake(slot: Slot): void {
    // Every waiter re-checks: a bulk waiter may not use what an interactive one can.
    for (const wake of slot.waiters.splice(0)) wake();
  }

  /** At the global cap: close the longest-idle connection of another inbox. */
  private evictIdle(exceptUser: string): void {
    for (const [user, slot] of this.slots) {
      if (user === exceptUser) continue;
      const conn = slot.idle.shift();
      if (conn) {
        if (conn.idleTimer) clearTimeout(conn.idleTimer);
        this.uncount(conn);
        conn.client.close();
        return;
      }
    }
  }

  private async connect(user: string): Promise<ImapFlow> {
    const s = this.settings;
    let delay = 100;
    for (let attempt = 1; ; attempt++) {
      const client = asUser(s, user, {
        // Pool connections never idle: the watcher has its own connection (docs/design-facts.md, "Dovecot").
        disableAutoIdle: true,
        qresync: true,
        socketTimeout: 5 * 60_000,
      });
      // An 'error' event without a listener would crash the process; failures surface on commands.
      client.on('error', (err: unknown) => this.log.debug({ err, user }, 'imap connection error'));
      try {
        await client.connect();
      } catch (err) {
        client.close();
        const authFailed = (err as { authenticationFailed?: boolean }).authenticationFailed === true;
        if (authFailed || this.closed || attempt >= OPEN_ATTEMPTS) {
          this.log.warn({ err, user, attempt }, 'cannot open an imap connection');
          throw unavailable('the mail server is not reachable; try again later');
        }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 2000);
        continue;
      }
      // The pool closed while this one was logging in: nothing would ever close it.
      if (this.closed) {
        client.close();
        throw unavailable('mail server connections are closed');
      }
      return client;
    }
  }
}
