// An endpoint's reading of the event log (docs/webhooks.md): past its position, what its token
// may receive, a durable delivery per matching event, the position moved in the same transaction
// (compare-and-set, so no event is enqueued twice or skipped, across processes). What this process
// has room for is leased to it as it is made and sent without a claim, and without room nothing is
// made: an endpoint whose receiver does not keep up waits in the log, not as rows (docs/webhooks.md, "Bounds").
import type { EventLog } from '../events/log.ts';
import type { StoredEvent } from '../events/types.ts';
import type { EventFilter } from '../events/query.ts';
import type { Config } from '../config.ts';
import { Turns } from '../rate.ts';
import type { DisableReason } from './disabling.ts';
import type { EndpointCache } from './endpoint-cache.ts';
import type { DeliveryRecord, WebhookEndpointRecord, WebhookStore } from './ports.ts';
import type { TokenStandings } from './token-standing.ts';

/** Events read per step of an endpoint's catch-up. */
export const READ_BATCH = 100;
/** Catch-up steps of one project's endpoints under way at once (Enqueuing.step). */
const CATCH_UP_PER_PROJECT = 4;

export interface EnqueuingOptions {
  endpoints: Pick<EndpointCache, 'get' | 'has' | 'set' | 'delete'>;
  store: Pick<WebhookStore, 'enqueue' | 'get'>;
  events: Pick<EventLog, 'backfill'>;
  standings: Pick<TokenStandings, 'of' | 'filterOf'>;
  disable: (e: WebhookEndpointRecord, reason: DisableReason, detail: string) => Promise<void>;
  /** How many new deliveries of the endpoint this process has room to lease now. */
  room: (e: WebhookEndpointRecord) => number;
  /**
   * How many deliveries a step with room may make (the endpoint's batch, lib/webhooks/pace.ts):
   * those past its room are left for a claim. A fast endpoint catching up on a backlog makes them
   * a read at a time, not a few rows per read and commit.
   */
  ahead: (e: WebhookEndpointRecord) => number;
  /** The endpoint's catch-up stopped for want of room: to be asked again when its project's attempts end. */
  waitingForRoom: (id: string) => void;
  /** Leased as they were made: to be sent (their events are those just read). */
  leased: (leased: DeliveryRecord[], until: number, read: readonly StoredEvent[]) => Promise<void>;
  /** More were made than leased: the rest are for a claim. */
  leftUnleased: (id: string) => void;
  settings: Pick<Config['webhooks'], 'leaseMs'>;
  owner: string;
  now: () => number;
  closed: () => boolean;
}

export class Enqueuing {
  /**
   * Log reads of this turn of the event loop, by filter and position: a project's endpoints with
   * the same token, types and inboxes at the same position (woken together by its events) read
   * once, not once each. A read a moment old may miss an event appended since: that event wakes
   * them again.
   */
  private readonly reads = new Map<string, ReturnType<EventLog['backfill']>>();
  private readonly turns = new Turns(CATCH_UP_PER_PROJECT);
  /**
   * Per project, deliveries being made now and not yet held (their enqueue under way): the room
   * they take is not counted by `room` until then, and a project's steps run several at once.
   */
  private readonly making = new Map<string, number>();

  constructor(private readonly o: EnqueuingOptions) {}

  /** Reads the log past the endpoint's position and enqueues what it may receive, until caught up. */
  async catchUp(id: string): Promise<void> {
    const o = this.o;
    for (;;) {
      const e = o.endpoints.get(id);
      if (!e || o.closed()) return;
      if (!(await this.turns.run(e.projectId, () => this.step(id)))) return;
    }
  }

  /**
   * One step of an endpoint's catch-up (a read of at most READ_BATCH events, and the enqueue of
   * up to a batch of them while this process has room to send, as many as that room leased to
   * it); false once it is caught up, gone, or out of room. A project's steps take turns, CATCH_UP_PER_PROJECT at once: each is
   * synchronous SQLite work, and a hundred endpoints woken by a burst of events would otherwise
   * enqueue their every delivery in one long commit while nothing else ran.
   *
   * Without room (the endpoint, its project or the process holds all it may: its receivers are
   * slow, hang or fail), nothing is read or written: the events wait in the log, where they are
   * anyway, and the step is asked again when an attempt ends (or at the next poll). Making rows
   * that cannot be sent cost a project whose hundred endpoints never answer most of the main
   * thread (a read and a row per endpoint per event; bench/RESULTS.md, "Session 18").
   */
  private async step(id: string): Promise<boolean> {
    const o = this.o;
    const e = o.endpoints.get(id);
    if (!e || o.closed()) return false;
    if (this.roomOf(e) <= 0) {
      o.waitingForRoom(id);
      return false;
    }
    const standing = await o.standings.of(e);
    if (!standing.principal) {
      await o.disable(e, 'token', 'the token that created it was revoked or expired');
      return false;
    }
    const filter = o.standings.filterOf(e, standing.principal, standing.readable);
    const read = await this.read(filter, e.position);
    if (read.scannedTo <= e.position) return false;
    const at = o.now();
    // Room again: the read awaited, and other steps may have leased meanwhile.
    const room = Math.max(0, this.roomOf(e));
    if (room === 0 && read.events.length > 0) {
      o.waitingForRoom(id);
      return false;
    }
    // While there is room: up to a batch (or the room, if more), the room's worth leased, the rest
    // for a claim. The position moves to the last one made (the events before it that the filter
    // left out are passed over with it), else past all that was read.
    const take = Math.max(room, o.ahead(e));
    const made = read.events.length > take ? read.events.slice(0, take) : read.events;
    const to = made.length < read.events.length ? made[made.length - 1]!.position : read.scannedTo;
    const deliveries = made.map((ev) => ({ eventId: ev.eventId, position: ev.position, type: ev.type }));
    const lease = Math.min(room, deliveries.length);
    const until = at + o.settings.leaseMs;
    this.make(e.projectId, lease);
    let leased: DeliveryRecord[] | null;
    try {
      leased = await o.store.enqueue(e.id, e.position, to, deliveries, at, lease > 0 ? { owner: o.owner, until, count: lease } : undefined);
      if (leased) {
        // Not put back when a refresh dropped it meanwhile (disabled, deleted): the attempt then
        // finds it gone and hands its deliveries back, instead of sending to a disabled endpoint.
        if (o.endpoints.has(id)) o.endpoints.set({ ...e, position: to });
        await o.leased(leased, until, made);
      }
    } finally {
      this.make(e.projectId, -lease);
    }
    if (leased) {
      if (deliveries.length > leased.length) o.leftUnleased(id);
    } else {
      // Another process moved it on, or a replay rewound it: read where it stands now.
      const fresh = await o.store.get(e.projectId, e.id);
      if (!fresh || fresh.disabledAt !== null) {
        o.endpoints.delete(id);
        return false;
      }
      o.endpoints.set(fresh);
    }
    return !(read.complete && to === read.scannedTo && to === o.endpoints.get(id)?.position);
  }

  /** The endpoint's room (EnqueuingOptions.room) less what its project's steps are making now. */
  private roomOf(e: WebhookEndpointRecord): number {
    return this.o.room(e) - (this.making.get(e.projectId) ?? 0);
  }

  private make(projectId: string, n: number): void {
    if (n === 0) return;
    const left = (this.making.get(projectId) ?? 0) + n;
    if (left === 0) this.making.delete(projectId);
    else this.making.set(projectId, left);
  }

  /** The log past `position` as `filter` sees it, read once per turn for every endpoint asking the same. */
  private read(filter: EventFilter, position: number): ReturnType<EventLog['backfill']> {
    const key = `${position} ${JSON.stringify(filter)}`;
    const known = this.reads.get(key);
    if (known) return known;
    if (this.reads.size === 0) setImmediate(() => this.reads.clear());
    const reading = this.o.events.backfill(filter, position, READ_BATCH);
    this.reads.set(key, reading);
    // A failed read is not kept: the next asks again.
    reading.catch(() => this.reads.delete(key));
    return reading;
  }
}
