// The live feed: every event appended by any instance, delivered in position order to this
// process's subscribers. One bus subscription per process, fanned out in memory. The bus is at
// most once (a Redis restart drops messages, and instances publish after their own commits, so
// arrivals can be out of order): a position that skips ahead, a periodic check, and a bus
// reconnect all make the feed read what it missed from the store, so nothing is lost, only late.
import type { Bus, Unsubscribe } from '../bus.ts';
import type { EventStore } from './ports.ts';
import type { StoredEvent, Visibility } from './types.ts';
import { Listeners } from '../listeners.ts';
import type { WarnLog } from '../warn-log.ts';

/** The bus channel of one log: instances sharing a store share it, other deployments do not. */
export const eventsChannel = (logId: string): string => `postern:events:${logId}`;

export type LiveListener = (event: StoredEvent) => void;

export interface LiveFeedOptions {
  /** How often to compare with the store even when the bus is quiet. */
  healIntervalMs?: number;
  log?: WarnLog;
}

const HEAL_BATCH = 1000;

/** The position a message starts with, so an echo of something already delivered is skipped unparsed. */
function positionOf(message: string): number | null {
  const space = message.indexOf(' ');
  const n = space > 0 ? Number(message.slice(0, space)) : NaN;
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

function parseMessage(message: string): StoredEvent | null {
  try {
    const m = JSON.parse(message.slice(message.indexOf(' ') + 1)) as Partial<StoredEvent>;
    if (typeof m.position !== 'number' || typeof m.json !== 'string' || typeof m.projectId !== 'string') return null;
    return {
      position: m.position,
      eventId: String(m.eventId),
      projectId: m.projectId,
      inboxId: typeof m.inboxId === 'string' ? m.inboxId : null,
      type: String(m.type),
      visibility: m.visibility as Visibility,
      recordedAt: Number(m.recordedAt),
      json: m.json,
    };
  } catch {
    return null;
  }
}

export class LiveFeed {
  private readonly listeners = new Listeners<StoredEvent>();
  private delivered = 0;
  private unsubscribe: Unsubscribe | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Arrivals waiting while a heal reads the store; processed strictly one after another. */
  private queue: StoredEvent[] = [];
  private busy = false;
  private healWanted = false;
  private closed = false;
  /** Set by start(); publishers use it too. */
  channel: string | null = null;

  constructor(
    private readonly store: EventStore,
    private readonly bus: Bus,
    private readonly options: LiveFeedOptions = {},
  ) {}

  async start(): Promise<void> {
    this.channel = eventsChannel(await this.store.logId());
    this.delivered = await this.store.lastPosition();
    this.unsubscribe = await this.bus.subscribe(this.channel, (m) => this.arrive(m));
    this.timer = setInterval(() => this.heal(), this.options.healIntervalMs ?? 1000);
    this.timer.unref();
  }

  /** What an instance publishes after its commit. */
  static message(event: StoredEvent): string {
    return `${event.position} ${JSON.stringify(event)}`;
  }

  /** An event this instance just committed: delivered here at once, without the bus round trip. */
  local(event: StoredEvent): void {
    if (this.closed || this.channel === null) return;
    if (this.listeners.size === 0 && !this.busy && this.queue.length === 0) {
      this.delivered = Math.max(this.delivered, event.position);
      return;
    }
    this.accept(event);
  }

  /** The highest position delivered to subscribers so far. */
  get position(): number {
    return this.delivered;
  }

  subscribe(projectId: string, listener: LiveListener): () => void {
    return this.listeners.add(projectId, listener);
  }

  subscriberCount(): number {
    return this.listeners.count();
  }

  /** Compare with the store now (after a bus reconnect, or on a timer). */
  heal(): void {
    this.healWanted = true;
    void this.pump();
  }

  private arrive(message: string): void {
    const position = positionOf(message);
    // Our own events come back from the bus after local() delivered them.
    if (position !== null && position <= this.delivered && !this.busy) return;
    // Nobody here listens: note how far the log got (where a new stream starts) and skip the rest.
    if (position !== null && this.listeners.size === 0 && !this.busy && this.queue.length === 0) {
      this.delivered = position;
      return;
    }
    const event = position === null ? null : parseMessage(message);
    if (!event) {
      this.options.log?.warn({ message: message.slice(0, 200) }, 'malformed live event message ignored');
      return;
    }
    this.accept(event);
  }

  private accept(event: StoredEvent): void {
    // The common case, in order and nothing pending: deliver at once, no promise in the path.
    if (!this.busy && this.queue.length === 0 && event.position === this.delivered + 1) {
      this.deliver(event);
      return;
    }
    this.queue.push(event);
    void this.pump();
  }

  private async pump(): Promise<void> {
    if (this.busy || this.closed) return;
    this.busy = true;
    try {
      while (!this.closed && (this.queue.length > 0 || this.healWanted)) {
        if (this.healWanted) {
          this.healWanted = false;
          await this.catchUp(Number.MAX_SAFE_INTEGER);
          continue;
        }
        this.queue.sort((a, b) => a.position - b.position);
        const next = this.queue.shift()!;
        if (next.position <= this.delivered) continue;
        // Something before it was missed or is still on its way: the store has it (commit
        // order is position order), so read it from there.
        if (next.position > this.delivered + 1) await this.catchUp(next.position - 1);
        if (next.position > this.delivered) this.deliver(next);
      }
    } catch (err) {
      this.options.log?.warn({ err }, 'live feed could not read the store; retrying on the next check');
    } finally {
      this.busy = false;
    }
  }

  /** Delivers what the store holds after `delivered`, up to `upTo`. */
  private async catchUp(upTo: number): Promise<void> {
    for (;;) {
      const rows = await this.store.readAll(this.delivered, HEAL_BATCH);
      for (const row of rows) {
        if (row.position > upTo) return;
        if (row.position > this.delivered) this.deliver(row);
      }
      if (rows.length < HEAL_BATCH) return;
    }
  }

  private deliver(event: StoredEvent): void {
    this.delivered = event.position;
    this.listeners.emit(event.projectId, event, (err) => this.options.log?.warn({ err }, 'live listener failed'));
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (this.unsubscribe) await this.unsubscribe();
    this.listeners.clear();
  }
}
