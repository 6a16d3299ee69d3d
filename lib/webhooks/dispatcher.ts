// The webhook dispatcher (docs/webhooks.md): reads the event log past each enabled
// endpoint's position, makes a durable delivery per matching event (the position moves in the
// same transaction, so no event is enqueued twice or skipped), and sends what is due.
//
// - Every process sharing the store runs one. An event is enqueued once (the position is moved
//   compare-and-set) and each delivery is attempted by one process at a time (a lease), so
//   several processes send each event once; a process killed mid-attempt leaves its deliveries to
//   the others when the lease lapses (at-least-once: `webhook-id` lets a receiver drop a repeat).
// - What an endpoint receives is what its creating token may read now: checked when events are
//   enqueued and again before each attempt. A revoked or expired token disables the endpoint.
// - At most `concurrency` attempts per endpoint, `projectConcurrency` per project and
//   `maxInFlight` in all are under way in a process, so a slow or dead receiver holds only its own
//   deliveries back, and a project's many slow receivers only that project's.
// - A deleted endpoint (forget) has its attempts under way abandoned and none of its leased ones started.
// - Failures are retried on the schedule (lib/webhooks/retry.ts); 410 Gone disables the endpoint,
//   and so does failing without a break for `disableAfterMs`. Both record webhook.endpoint.disabled.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Access, Principal } from '../auth/access.ts';
import type { Cursors } from '../events/cursor.ts';
import type { EventLog } from '../events/log.ts';
import { SYSTEM_ACTOR } from '../events/log.ts';
import type { EventFilter } from '../events/query.ts';
import type { StoredEvent, Visibility } from '../events/types.ts';
import type { Config } from '../config.ts';
import { NO_METRICS, type WebhookMetrics } from '../metrics.ts';
import { Turns } from '../rate.ts';
import type { WebhookEndpoints } from './endpoints.ts';
import { RecentEvents } from './recent-events.ts';
import { nextAttempt } from './retry.ts';
import { deliveryHeaders, webhookBody, webhookBodyOf } from './signature.ts';
import type { DeliveryOutcome, DeliveryRecord, WebhookEndpointRecord, WebhookStore } from './ports.ts';

/** What one POST to a receiver came to (adapters/webhooks/client.ts postWebhook, bound to its settings). */
export type PostResult =
  | { ok: true; status: number; retryAfterSeconds: number | null; ms: number }
  /** `cancelled`: abandoned through the signal (shutting down), which says nothing of the receiver. */
  | { ok: false; error: string; ms: number; cancelled?: boolean };
/** `project`: whose attempt it is (its share of DNS lookups, adapters/webhooks/dns.ts). */
export type Poster = (
  url: string,
  headers: Record<string, string>,
  body: string,
  signal?: AbortSignal,
  project?: string,
) => Promise<PostResult>;

export interface WebhookDispatcherOptions {
  store: WebhookStore;
  events: EventLog;
  access: Access;
  endpoints: WebhookEndpoints;
  post: Poster;
  settings: Config['webhooks'];
  log: Logger;
  now?: () => number;
  random?: () => number;
  /** Attempts by outcome (lib/metrics.ts). */
  metrics?: WebhookMetrics;
}

/** Events read per step of an endpoint's catch-up. */
const READ_BATCH = 100;
/** Catch-up steps of one project's endpoints under way at once (catchUpStep). */
const CATCH_UP_PER_PROJECT = 4;
/** New events are read this long after the first of them arrives, with those arriving meanwhile. */
const WAKE_DELAY_MS = 5;
/** Outcomes are written this long after an attempt ends, with those of every attempt ending meanwhile. */
const FLUSH_DELAY_MS = 20;
/**
 * An endpoint's deliveries are leased (when enqueued, or claimed) in batches of what it gets
 * through in this long at its recent pace: a fast receiver costs one claim per batch, not one
 * per attempt, and a slow one holds no more than twice its cap.
 */
const PACE_WINDOW_MS = 100;
/** The most an endpoint's batch holds. */
const MAX_BATCH = 256;
/** How often an endpoint's pace is measured again (soon after a backlog starts, so its batches grow quickly). */
const PACE_EVERY_MS = 50;
/** A token's standing is read again after this long (revocation reaches deliveries within it). */
const PRINCIPAL_TTL_MS = 1000;

/**
 * The top-level `time` of an event as the log writes it: its first `"time":"` is that key (it comes
 * before anything nested, and a quote inside a string is escaped), and an ISO time has no escapes.
 */
function leadingTime(json: string): string | null {
  const at = json.indexOf('"time":"');
  if (at < 0) return null;
  // Only a key before anything nested (else: the long way).
  const brace = json.indexOf('{', 1);
  const bracket = json.indexOf('[');
  if ((brace >= 0 && brace < at) || (bracket >= 0 && bracket < at)) return null;
  const end = json.indexOf('"', at + 8);
  const time = json.slice(at + 8, end);
  return end > 0 && !time.includes('\\') ? time : null;
}

type DisableReason = 'failing' | 'gone' | 'token';

/** A leased delivery waiting for room under its endpoint's cap, until when its lease holds, and its event (null: no longer in the log). */
interface Held {
  d: DeliveryRecord;
  until: number;
  event: StoredEvent | null;
}

/** Attempts an endpoint has ended since `since`, and its pace measured before. */
interface Pace {
  ended: number;
  since: number;
  perSecond: number;
}

interface Standing {
  principal: Principal | null;
  /** Inboxes it may read now (ids). */
  readable: Set<string>;
  at: number;
}

export class WebhookDispatcher {
  private readonly now: () => number;
  /** This process's lease name. */
  readonly owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  private endpoints = new Map<string, WebhookEndpointRecord>();
  private readonly subscriptions = new Map<string, () => void>();
  private readonly standings = new Map<string, Standing>();
  private readonly secrets = new Map<string, { updatedAt: number; until: number; list: string[] }>();
  /** Endpoints being read now, and those asked to read again once that is done. */
  private readonly filling = new Set<string>();
  private readonly refill = new Set<string>();
  private readonly inFlight = new Map<string, number>();
  private readonly inFlightByProject = new Map<string, number>();
  private inFlightTotal = 0;
  /** Endpoints with deliveries waiting for room under their project's cap or the process's, in turn. */
  private readonly waitingForRoom = new Set<string>();
  /** A claim left endpoints out for want of room in their project: the next attempt's end claims again. */
  private projectFull = false;
  /** Claims made: where the next one starts among the endpoints. */
  private claims = 0;
  /** Per endpoint with attempts under way: what abandons them (deleted, or the process stopping). */
  private readonly aborts = new Map<string, { controller: AbortController; signal: AbortSignal }>();
  /** Wakes close once no attempt is under way. */
  private allEnded: (() => void) | null = null;
  private outcomes: DeliveryOutcome[] = [];
  private flushing: Promise<void> | null = null;
  private pumping = false;
  private settling = false;
  private refilling = false;
  private waking = false;
  /** Leased deliveries waiting for room under their endpoint's cap. */
  private readonly queued = new Map<string, Held[]>();
  private readonly paces = new Map<string, Pace>();
  /**
   * Endpoints whose last claim came back short: not claimed for again until the next poll, or
   * until this process enqueues deliveries it does not lease. Every attempt's end asked again, and
   * once a backlog was drained (or with live events, leased as they are made) each of those
   * claims found nothing: a third of the claims in a run of the throughput benchmark.
   */
  private readonly drained = new Set<string>();
  private cursorCodec: Cursors | null = null;
  /** Events read lately: a claimed delivery's body, without reading the log again. */
  private readonly recent = new RecentEvents();
  private readonly woken = new Set<string>();
  /**
   * Log reads of this turn of the event loop, by filter and position: a project's endpoints with
   * the same token, types and inboxes at the same position (woken together by its events) read
   * once, not once each. A read a moment old may miss an event appended since: that event wakes
   * them again.
   */
  private readonly reads = new Map<string, ReturnType<EventLog['backfill']>>();
  private readonly catchUpTurns = new Turns(CATCH_UP_PER_PROJECT);
  private pumpAgain = false;
  /** Refreshes started: only the latest one's read is kept. */
  private refreshes = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Aborts the attempts still running when close's grace is over. */
  private readonly stopping = new AbortController();
  private purgeTimer: NodeJS.Timeout | null = null;
  private closed = false;

  private readonly metrics: WebhookMetrics;

  constructor(private readonly o: WebhookDispatcherOptions) {
    this.now = o.now ?? Date.now;
    this.metrics = o.metrics ?? NO_METRICS.webhooks;
  }

  async start(): Promise<void> {
    await this.tick();
    this.timer = setInterval(() => void this.tick(), this.o.settings.pollMs);
    this.timer.unref();
    this.purgeTimer = setInterval(() => void this.purge(), 60 * 60 * 1000);
    this.purgeTimer.unref();
  }

  /**
   * Reads the endpoints again now (one was made, edited, rotated or replayed through this
   * process), so what follows uses them; other processes see the change within pollMs.
   */
  poke(endpointId?: string): Promise<void> {
    return this.tick(endpointId);
  }

  /**
   * The endpoint was deleted through this process: its attempts under way are abandoned now and
   * none of its leased deliveries is started (their rows went with it). Other processes see the
   * deletion at their next poll (refresh) and do the same.
   */
  forget(endpointId: string): void {
    // A read of the endpoints begun before the deletion would put it back.
    this.refreshes++;
    this.endpoints.delete(endpointId);
    this.queued.delete(endpointId);
    this.waitingForRoom.delete(endpointId);
    this.drained.delete(endpointId);
    this.paces.delete(endpointId);
    this.aborts.get(endpointId)?.controller.abort();
  }

  /** Stops taking work, lets attempts under way finish (at most `graceMs`), writes their outcomes. */
  async close(graceMs = 2000): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (this.purgeTimer) clearInterval(this.purgeTimer);
    for (const off of this.subscriptions.values()) off();
    this.subscriptions.clear();
    // Attempts still running after the grace are abandoned and handed back (their leases released).
    await Promise.race([this.attemptsEnded(), new Promise((r) => setTimeout(r, graceMs).unref())]);
    this.stopping.abort();
    await this.attemptsEnded();
    // Claimed but never started: handed back for another process.
    for (const q of this.queued.values()) for (const h of q) this.outcomes.push(this.released(h.d));
    this.queued.clear();
    await this.flush();
  }

  /** Resolves once no attempt is under way. */
  private attemptsEnded(): Promise<void> {
    if (this.inFlightTotal === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const before = this.allEnded;
      this.allEnded = () => {
        before?.();
        resolve();
      };
    });
  }

  private async tick(only?: string): Promise<void> {
    if (this.closed) return;
    try {
      await this.refresh();
      for (const e of this.endpoints.values()) if (!only || e.id === only) void this.fill(e.id);
      // Retries come due and leases lapse with time, and other processes enqueue: each poll asks again.
      this.drained.clear();
      void this.pump();
    } catch (err) {
      this.o.log.warn({ err }, 'webhook dispatcher pass failed; trying again');
    }
  }

  /** The enabled endpoints, and a live subscription per project that has any (new events wake their fill). */
  private async refresh(): Promise<void> {
    const seq = ++this.refreshes;
    const all = await this.o.store.all();
    // A read begun before another (the poll's, before an edit's poke) and ending after it would put
    // back what that one saw changed: an endpoint just disabled would go on being sent to.
    if (seq !== this.refreshes) return;
    const next = new Map<string, WebhookEndpointRecord>();
    for (const e of all) if (e.disabledAt === null) next.set(e.id, e);
    // Deleted through another process: stopped here too.
    const present = new Set(all.map((e) => e.id));
    for (const id of new Set([...this.aborts.keys(), ...this.queued.keys()])) if (!present.has(id)) this.forget(id);
    this.endpoints = next;
    for (const id of this.paces.keys()) if (!next.has(id)) this.paces.delete(id);
    const projects = new Set([...next.values()].map((e) => e.projectId));
    for (const [project, off] of this.subscriptions) {
      if (!projects.has(project)) {
        off();
        this.subscriptions.delete(project);
      }
    }
    for (const project of projects) {
      if (this.subscriptions.has(project) || this.closed) continue;
      this.subscriptions.set(
        project,
        this.o.events.live.subscribe(project, () => this.wake(project)),
      );
    }
  }

  /** New events of a project: its endpoints read a moment later, once for however many arrived meanwhile. */
  private wake(projectId: string): void {
    if (this.closed) return;
    this.woken.add(projectId);
    if (this.waking) return;
    this.waking = true;
    setTimeout(() => {
      this.waking = false;
      const projects = new Set(this.woken);
      this.woken.clear();
      for (const e of this.endpoints.values()) if (projects.has(e.projectId)) void this.fill(e.id);
    }, WAKE_DELAY_MS).unref();
  }

  /**
   * Attempts ended: their outcomes are written together a moment later (one transaction for many),
   * and the room they left is claimed again after this turn (one claim for all of them).
   */
  private settled(endpointId: string): void {
    this.flushSoon();
    // Claimed in batches: only once what the endpoint holds is down to half a batch.
    if (!this.refilling && (this.projectFull || this.held(endpointId) <= this.batchOf(endpointId) / 2)) {
      this.refilling = true;
      setImmediate(() => {
        this.refilling = false;
        void this.pump();
      });
    }
  }

  /** Outcomes are written a moment from now, with every one pushed meanwhile. */
  private flushSoon(): void {
    if (this.settling) return;
    this.settling = true;
    setTimeout(() => {
      this.settling = false;
      void this.flush();
    }, FLUSH_DELAY_MS).unref();
  }

  /** Reads the log past the endpoint's position and enqueues what it may receive, until caught up. */
  private async fill(id: string): Promise<void> {
    if (this.filling.has(id)) {
      this.refill.add(id);
      return;
    }
    this.filling.add(id);
    try {
      do {
        this.refill.delete(id);
        await this.catchUp(id);
      } while (this.refill.has(id) && !this.closed);
    } catch (err) {
      this.o.log.warn({ err, webhook: id }, 'webhook enqueue failed; trying again');
    } finally {
      this.filling.delete(id);
    }
  }

  private async catchUp(id: string): Promise<void> {
    for (;;) {
      const e = this.endpoints.get(id);
      if (!e || this.closed) return;
      if (!(await this.catchUpTurns.run(e.projectId, () => this.catchUpStep(id)))) return;
    }
  }

  /**
   * One step of an endpoint's catch-up (a read of at most READ_BATCH events, and their enqueue);
   * false once it is caught up or gone. A project's steps take turns, CATCH_UP_PER_PROJECT at
   * once: each is synchronous SQLite work, and a hundred endpoints woken by a burst of events
   * would otherwise enqueue their every delivery in one long commit while nothing else ran.
   */
  private async catchUpStep(id: string): Promise<boolean> {
    const e = this.endpoints.get(id);
    if (!e || this.closed) return false;
    const standing = await this.standing(e);
    if (!standing.principal) {
      await this.disable(e, 'token', 'the token that created it was revoked or expired');
      return false;
    }
    const filter = this.filterOf(e, standing);
    const read = await this.read(filter, e.position);
    if (read.scannedTo <= e.position) return false;
    const at = this.now();
    const deliveries = read.events.map((ev) => ({ eventId: ev.eventId, position: ev.position, type: ev.type }));
    // What there is room for is leased to this process as it is made, and sent without a claim.
    const room = Math.min(
      this.batchOf(id) - this.held(id),
      this.o.settings.maxInFlight - this.heldTotal(),
      this.projectRoom(e.projectId),
      deliveries.length,
    );
    const until = at + this.o.settings.leaseMs;
    const leased = await this.o.store.enqueue(
      e.id,
      e.position,
      read.scannedTo,
      deliveries,
      at,
      room > 0 ? { owner: this.owner, until, count: room } : undefined,
    );
    if (leased) {
      // Not put back when a refresh dropped it meanwhile (disabled, deleted): attempt() then
      // finds it gone and hands its deliveries back, instead of sending to a disabled endpoint.
      if (this.endpoints.has(id)) this.endpoints.set(id, { ...e, position: read.scannedTo });
      // Kept for the deliveries claimed later (a backlog past what was leased now), and for these.
      this.recent.add(read.events);
      await this.hold(leased, until);
      if (deliveries.length > leased.length) {
        this.drained.delete(id);
        void this.pump();
      }
    } else {
      // Another process moved it on, or a replay rewound it: read where it stands now.
      const fresh = await this.o.store.get(e.projectId, e.id);
      if (!fresh || fresh.disabledAt !== null) {
        this.endpoints.delete(id);
        return false;
      }
      this.endpoints.set(id, fresh);
    }
    return !(read.complete && read.scannedTo === this.endpoints.get(id)?.position);
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

  /** GET /events' filter for the endpoint's token, narrowed to the endpoint's types and inboxes. */
  private filterOf(e: WebhookEndpointRecord, s: Standing): EventFilter {
    const p = s.principal!;
    const visibilities: Visibility[] = ['inbox'];
    if (this.o.access.hasScope(p, 'project:read')) visibilities.push('project');
    const allowed = [...s.readable];
    return {
      projectId: e.projectId,
      inboxes: e.inboxes ? e.inboxes.filter((i) => s.readable.has(i)) : null,
      allowedInboxes: allowed,
      visibilities,
      types: e.types,
      redactActor: false,
    };
  }

  /** The endpoint's token as it stands now (read at most once a second per token). */
  private async standing(e: WebhookEndpointRecord): Promise<Standing> {
    const known = this.standings.get(e.tokenId);
    if (known && this.now() - known.at < PRINCIPAL_TTL_MS) return known;
    const principal = await this.o.access.principalOfToken(e.tokenId);
    const usable = principal !== null && principal.projectId === e.projectId && this.o.access.hasScope(principal, 'events:read');
    const readable = usable ? new Set((await this.o.access.grantedInboxes(principal)).map((g) => g.inbox.id)) : new Set<string>();
    const s: Standing = { principal: usable ? principal : null, readable, at: this.now() };
    this.standings.set(e.tokenId, s);
    return s;
  }

  /** Claims due deliveries while there is room, and starts their attempts. */
  private async pump(): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        while (!this.closed && this.heldTotal() < this.o.settings.maxInFlight) {
          // Outcomes waiting are not written first: they are at most FLUSH_DELAY_MS of attempts,
          // which the claim walks past (still leased), cheaper than a write of a few rows before
          // every claim, which also split the outcomes into small batches.
          // A batch each: the next ones wait here, ready to start the moment an attempt ends. Only
          // endpoints down to half a batch (as settled() asks): topping up by the few attempts
          // that ended during the last claim cost a flush and a claim for a handful of rows.
          // Each project's endpoints share what it may hold (projectRoom), in turn: each claim
          // starts one endpoint further on, so the first ones cannot keep a busy project's room.
          const endpoints: Array<{ id: string; limit: number }> = [];
          // Each project's room, counted once for the pass (projectRoom walks every queue).
          const room = this.projectRooms();
          this.projectFull = false;
          const all = [...this.endpoints];
          const from = all.length > 0 ? this.claims++ % all.length : 0;
          for (const [id, e] of [...all.slice(from), ...all.slice(0, from)]) {
            if (this.drained.has(id) || this.held(id) > this.batchOf(id) / 2) continue;
            const left = room.get(e.projectId) ?? 2 * this.o.settings.projectConcurrency;
            const limit = Math.min(this.batchOf(id) - this.held(id), left);
            if (limit <= 0) {
              this.projectFull = true;
              continue;
            }
            room.set(e.projectId, left - limit);
            endpoints.push({ id, limit });
          }
          if (endpoints.length === 0) break;
          const now = this.now();
          const leaseUntil = now + this.o.settings.leaseMs;
          const claimed = await this.o.store.claim({ owner: this.owner, now, leaseUntil, endpoints });
          const got = new Map<string, number>();
          for (const d of claimed) got.set(d.endpointId, (got.get(d.endpointId) ?? 0) + 1);
          for (const e of endpoints) if ((got.get(e.id) ?? 0) < e.limit) this.drained.add(e.id);
          await this.hold(claimed, leaseUntil);
          if (claimed.length === 0) break;
        }
      } while (this.pumpAgain && !this.closed);
    } catch (err) {
      this.o.log.warn({ err }, 'webhook claim failed; trying again');
    } finally {
      this.pumping = false;
    }
  }

  /**
   * Leased deliveries to send: their events taken from those read lately (RecentEvents) or read
   * from the log (one read per project for the batch), queued by endpoint, started while there is room.
   */
  private async hold(leased: readonly DeliveryRecord[], until: number): Promise<void> {
    if (leased.length === 0) return;
    // By log position: unique across projects.
    const events = new Map<number, StoredEvent>();
    const wanted = new Map<string, number[]>();
    for (const d of leased) {
      const kept = this.recent.get(d.projectId, d.position);
      if (kept) {
        events.set(d.position, kept);
        continue;
      }
      const list = wanted.get(d.projectId);
      if (list) list.push(d.position);
      else wanted.set(d.projectId, [d.position]);
    }
    for (const [projectId, positions] of wanted) {
      for (const ev of await this.o.events.atPositions(projectId, positions)) events.set(ev.position, ev);
    }
    for (const d of leased) {
      const h = { d, until, event: events.get(d.position) ?? null };
      const q = this.queued.get(d.endpointId);
      if (q) q.push(h);
      else this.queued.set(d.endpointId, [h]);
    }
    for (const id of new Set(leased.map((d) => d.endpointId))) this.drain(id);
  }

  /** How many deliveries an endpoint's batch holds: what it gets through in PACE_WINDOW_MS, at least twice its cap. */
  private batchOf(id: string): number {
    const perSecond = this.paces.get(id)?.perSecond ?? 0;
    return Math.min(MAX_BATCH, Math.max(2 * this.o.settings.concurrency, Math.ceil((perSecond * PACE_WINDOW_MS) / 1000)));
  }

  /** An attempt of the endpoint ended: its pace, measured every PACE_EVERY_MS. */
  private paced(id: string): void {
    const now = this.now();
    const p = this.paces.get(id);
    if (!p) {
      this.paces.set(id, { ended: 1, since: now, perSecond: 0 });
      return;
    }
    p.ended++;
    if (now - p.since >= PACE_EVERY_MS) {
      p.perSecond = (p.ended * 1000) / (now - p.since);
      p.ended = 0;
      p.since = now;
    }
  }

  /** Deliveries of an endpoint this process holds: under way, and leased waiting to start. */
  private held(id: string): number {
    return (this.inFlight.get(id) ?? 0) + (this.queued.get(id)?.length ?? 0);
  }

  /**
   * How many more deliveries a project's endpoints may hold in this process: twice its cap of
   * attempts under way (the next ones ready to start), so one project's backlog cannot fill the
   * process's room for claims.
   */
  private projectRoom(projectId: string): number {
    let n = this.inFlightByProject.get(projectId) ?? 0;
    for (const q of this.queued.values()) if (q[0]?.d.projectId === projectId) n += q.length;
    return 2 * this.o.settings.projectConcurrency - n;
  }

  /** projectRoom of every project holding deliveries, in one walk of the queues. */
  private projectRooms(): Map<string, number> {
    const rooms = new Map<string, number>();
    const cap = 2 * this.o.settings.projectConcurrency;
    for (const [project, n] of this.inFlightByProject) rooms.set(project, cap - n);
    for (const q of this.queued.values()) {
      const project = q[0]?.d.projectId;
      if (project !== undefined) rooms.set(project, (rooms.get(project) ?? cap) - q.length);
    }
    return rooms;
  }

  private heldTotal(): number {
    let n = this.inFlightTotal;
    for (const q of this.queued.values()) n += q.length;
    return n;
  }

  /** Starts an endpoint's waiting deliveries while it, its project and the process are under their caps. */
  private drain(id: string): void {
    const q = this.queued.get(id);
    while (q && q.length > 0 && (this.inFlight.get(id) ?? 0) < this.o.settings.concurrency) {
      const h = q[0]!;
      const { d, until } = h;
      // Not started with less of its lease left than an attempt may take (another process could
      // claim it meanwhile): handed back, to be claimed afresh.
      // (Written by the next flush: claims no longer write the outcomes waiting first.)
      if (this.closed || until - this.now() <= this.o.settings.timeoutMs) {
        q.shift();
        this.outcomes.push(this.released(d));
        this.flushSoon();
        continue;
      }
      if (
        (this.inFlightByProject.get(d.projectId) ?? 0) >= this.o.settings.projectConcurrency ||
        this.inFlightTotal >= this.o.settings.maxInFlight
      ) {
        // Started when an attempt of its project (or any, for the process's cap) ends.
        this.waitingForRoom.add(id);
        break;
      }
      q.shift();
      this.launch(h);
    }
    if (q && q.length === 0) this.queued.delete(id);
  }

  /** Endpoints waiting for room, in the order they began waiting (each goes to the back if it waits again). */
  private drainWaiting(): void {
    for (const id of [...this.waitingForRoom]) {
      this.waitingForRoom.delete(id);
      this.drain(id);
    }
  }

  private launch(h: Held): void {
    const d = h.d;
    this.inFlight.set(d.endpointId, (this.inFlight.get(d.endpointId) ?? 0) + 1);
    this.inFlightByProject.set(d.projectId, (this.inFlightByProject.get(d.projectId) ?? 0) + 1);
    this.inFlightTotal++;
    let abort = this.aborts.get(d.endpointId);
    if (!abort) {
      const controller = new AbortController();
      abort = { controller, signal: AbortSignal.any([controller.signal, this.stopping.signal]) };
      this.aborts.set(d.endpointId, abort);
    }
    void this.run(d, h.event, abort.signal);
  }

  /** One attempt and what follows it (one promise per attempt, not a chain of them). */
  private async run(d: DeliveryRecord, event: StoredEvent | null, signal: AbortSignal): Promise<void> {
    try {
      // Awaited first: `this.outcomes` is a new array after each flush.
      const outcome = await this.attempt(d, event, signal);
      this.outcomes.push(outcome);
    } catch (err) {
      // The lease lapses and the delivery is tried again, by this process or another.
      this.o.log.warn({ err, webhook: d.endpointId, event: d.eventId }, 'webhook attempt failed unexpectedly');
    }
    const n = (this.inFlight.get(d.endpointId) ?? 1) - 1;
    if (n === 0) {
      this.inFlight.delete(d.endpointId);
      this.aborts.delete(d.endpointId);
    } else this.inFlight.set(d.endpointId, n);
    const inProject = (this.inFlightByProject.get(d.projectId) ?? 1) - 1;
    if (inProject === 0) this.inFlightByProject.delete(d.projectId);
    else this.inFlightByProject.set(d.projectId, inProject);
    this.inFlightTotal--;
    if (this.inFlightTotal === 0 && this.allEnded) {
      const wake = this.allEnded;
      this.allEnded = null;
      wake();
    }
    this.paced(d.endpointId);
    this.drain(d.endpointId);
    if (this.waitingForRoom.size > 0) this.drainWaiting();
    this.settled(d.endpointId);
  }

  private async attempt(d: DeliveryRecord, ev: StoredEvent | null, signal: AbortSignal): Promise<DeliveryOutcome> {
    const e = this.endpoints.get(d.endpointId) ?? (await this.o.store.get(d.projectId, d.endpointId));
    if (!e || e.disabledAt !== null) return this.released(d);
    // The token's standing as last read, when that is recent (no await: most attempts use it).
    const known = this.standings.get(e.tokenId);
    const standing = known && this.now() - known.at < PRINCIPAL_TTL_MS ? known : await this.standing(e);
    if (!standing.principal) {
      await this.disable(e, 'token', 'the token that created it was revoked or expired');
      return this.released(d);
    }
    if (ev === null) {
      this.metrics.attempted('failed');
      return this.outcome(d, 'failed', d.nextAttemptAt, this.now(), null, 'the event is no longer in the log', null, null);
    }
    // The event's containerid is its row's inbox (lib/events/log.ts writes it from the same value).
    if (ev.inboxId !== null && !standing.readable.has(ev.inboxId)) {
      this.metrics.attempted('failed');
      return this.outcome(d, 'failed', d.nextAttemptAt, this.now(), null, "the endpoint's token may no longer read this inbox", null, null);
    }
    this.cursorCodec ??= await this.o.events.cursors();
    const body = this.body(this.cursorCodec, d, ev.json);
    const headers = deliveryHeaders(this.secretsOf(e), d.eventId, body, new Date(this.now()));
    const r = await this.o.post(e.url, headers, body, signal, e.projectId);
    if (!r.ok && r.cancelled) return this.released(d);
    const at = this.now();
    const attempts = d.attempts + 1;
    if (r.ok && r.status >= 200 && r.status < 300) {
      this.metrics.attempted('delivered');
      return this.outcome(d, 'delivered', d.nextAttemptAt, at, r.status, null, r.ms, 'up');
    }
    const status = r.ok ? r.status : null;
    const error = r.ok ? `the receiver answered HTTP ${r.status}` : r.error;
    if (status === 410) {
      this.metrics.attempted('gone');
      await this.disable(e, 'gone', 'the receiver answered 410 Gone');
      // Kept for when the endpoint is enabled again.
      return this.outcome(d, 'pending', at, at, status, error, r.ms, 'down');
    }
    const retryAfter = r.ok && (status === 429 || status === 503) ? r.retryAfterSeconds : null;
    const next = nextAttempt({ scheduleMs: this.o.settings.scheduleMs, random: this.o.random }, attempts, at, retryAfter);
    this.metrics.attempted(next === null ? 'failed' : 'retrying');
    return this.outcome(d, next === null ? 'failed' : 'pending', next ?? at, at, status, error, r.ms, 'down');
  }

  /** Hands a delivery back untried: pending as it was, its lease given up. */
  private released(d: DeliveryRecord): DeliveryOutcome {
    return this.outcome(d, 'pending', d.nextAttemptAt, this.now(), d.lastStatus, d.lastError, d.lastMs, null);
  }

  /**
   * An attempt's outcome, written as one literal: V8 adds each property after a spread (`{...base,
   * state}`) on a slow path, several microseconds an outcome.
   */
  private outcome(
    d: DeliveryRecord,
    state: DeliveryOutcome['state'],
    nextAttemptAt: number,
    at: number,
    status: number | null,
    error: string | null,
    ms: number | null,
    receiver: DeliveryOutcome['receiver'],
  ): DeliveryOutcome {
    return {
      endpointId: d.endpointId,
      eventId: d.eventId,
      position: d.position,
      owner: this.owner,
      state,
      nextAttemptAt,
      at,
      status,
      error,
      ms,
      receiver,
    };
  }

  /** The body as sent: `{type, timestamp, data}`, data being the event as GET /events serves it plus its cursor. */
  private body(cursors: Cursors, d: DeliveryRecord, json: string): string {
    const cursor = cursors.encode(d.projectId, d.position);
    // The log's JSON is JSON.stringify's, `time` among its first keys (lib/events/log.ts): read and
    // extended as text, not parsed and written again. Anything else takes the long way.
    const time = leadingTime(json);
    if (time !== null && json.endsWith('}') && !json.includes('"cursor":'))
      return webhookBodyOf(d.type, time, `${json.slice(0, -1)},"cursor":${JSON.stringify(cursor)}}`);
    const event = JSON.parse(json) as { time?: unknown };
    return webhookBody(d.type, typeof event.time === 'string' ? event.time : new Date(this.now()).toISOString(), { ...event, cursor });
  }

  /** The endpoint's signing secrets, opened once per change of the endpoint (and again when a rotation's overlap ends). */
  private secretsOf(e: WebhookEndpointRecord): string[] {
    const now = this.now();
    const known = this.secrets.get(e.id);
    if (known && known.updatedAt === e.updatedAt && now < known.until) return known.list;
    const list = this.o.endpoints.signingSecrets(e, now);
    const until = e.previousExpiresAt !== null && e.previousExpiresAt > now ? e.previousExpiresAt : Number.POSITIVE_INFINITY;
    this.secrets.set(e.id, { updatedAt: e.updatedAt, until, list });
    return list;
  }

  /** Writes the outcomes gathered so far (one transaction), then disables endpoints failing too long. */
  private async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    this.flushing = (async () => {
      try {
        const failing = await this.o.store.finish(batch);
        const now = this.now();
        for (const [id, since] of failing) {
          const e = this.endpoints.get(id);
          if (e && since !== null && now - since >= this.o.settings.disableAfterMs) {
            const last = batch.filter((o) => o.endpointId === id).pop();
            await this.disable({ ...e, failingSince: since }, 'failing', last?.error ?? 'every attempt failed');
          }
        }
      } catch (err) {
        // Their leases lapse and the deliveries are tried again.
        this.o.log.warn({ err, outcomes: batch.length }, 'writing webhook outcomes failed');
      } finally {
        this.flushing = null;
      }
    })();
    await this.flushing;
  }

  /** Stops sending to an endpoint and records why, once per spell however many processes see it. */
  private async disable(e: WebhookEndpointRecord, reason: DisableReason, detail: string): Promise<void> {
    if (!this.endpoints.delete(e.id)) return;
    const current = await this.o.store.get(e.projectId, e.id);
    if (!current || current.disabledAt !== null) return;
    const at = this.now();
    const words = {
      failing: 'every attempt failed for too long',
      gone: 'the receiver answered 410 Gone',
      token: 'its token was revoked or expired',
    }[reason];
    await this.o.store.setDisabled(e.projectId, e.id, { at, by: 'dispatcher', reason: words }, at);
    this.o.log.warn({ webhook: e.id, reason, detail }, 'webhook endpoint disabled');
    await this.o.events.record({
      type: 'webhook.endpoint.disabled',
      projectId: e.projectId,
      actor: SYSTEM_ACTOR,
      subject: e.id,
      data: { webhookId: e.id, reason, detail: detail.slice(0, 500) },
      // One event per spell, across processes: the spell is named by when it began.
      dedupeKey: `webhook.endpoint.disabled ${e.id} ${reason} ${e.failingSince ?? current.updatedAt}`,
    });
  }

  private async purge(): Promise<void> {
    try {
      await this.o.store.purgeDeliveries(this.now() - this.o.settings.keepMs);
    } catch (err) {
      this.o.log.warn({ err }, 'purging settled webhook deliveries failed');
    }
  }
}
