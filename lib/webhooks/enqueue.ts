// An endpoint's reading of the event log (docs/webhooks.md): past its position, what its token
// may receive, a durable delivery per matching event, the position moved in the same transaction
// (compare-and-set, so no event is enqueued twice or skipped, across processes). What this process
// has room for is leased to it as it is made and sent without a claim.
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
   * One step of an endpoint's catch-up (a read of at most READ_BATCH events, and their enqueue);
   * false once it is caught up or gone. A project's steps take turns, CATCH_UP_PER_PROJECT at
   * once: each is synchronous SQLite work, and a hundred endpoints woken by a burst of events
   * would otherwise enqueue their every delivery in one long commit while nothing else ran.
   */
  private async step(id: string): Promise<boolean> {
    const o = this.o;
    const e = o.endpoints.get(id);
    if (!e || o.closed()) return false;
    const standing = await o.standings.of(e);
    if (!standing.principal) {
      await o.disable(e, 'token', 'the token that created it was revoked or expired');
      return false;
    }
    const filter = o.standings.filterOf(e, standing.principal, standing.readable);
    const read = await this.read(filter, e.position);
    if (read.scannedTo <= e.position) return false;
    const at = o.now();
    const deliveries = read.events.map((ev) => ({ eventId: ev.eventId, position: ev.position, type: ev.type }));
    // What there is room for is leased to this process as it is made, and sent without a claim.
    const room = Math.min(o.room(e), deliveries.length);
    const until = at + o.settings.leaseMs;
    const leased = await o.store.enqueue(
      e.id,
      e.position,
      read.scannedTo,
      deliveries,
      at,
      room > 0 ? { owner: o.owner, until, count: room } : undefined,
    );
    if (leased) {
      // Not put back when a refresh dropped it meanwhile (disabled, deleted): the attempt then
      // finds it gone and hands its deliveries back, instead of sending to a disabled endpoint.
      if (o.endpoints.has(id)) o.endpoints.set({ ...e, position: read.scannedTo });
      await o.leased(leased, until, read.events);
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
    return !(read.complete && read.scannedTo === o.endpoints.get(id)?.position);
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
