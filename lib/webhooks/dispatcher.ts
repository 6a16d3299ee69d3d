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
//   deliveries back, and a project's many slow receivers only that project's. No more
//   deliveries are made than there is room to send (the rest wait in the log), and a project's
//   failing endpoints start `failingPerSecond` attempts a second (lib/webhooks/failing.ts).
// - A deleted endpoint (forget) has its attempts under way abandoned and none of its leased ones started.
// - Failures are retried on the schedule (lib/webhooks/retry.ts); 410 Gone disables the endpoint,
//   and so does failing without a break for `disableAfterMs`. Both record webhook.endpoint.disabled.
//
// This file puts the parts together and decides when each runs; each part does one job:
// endpoint-cache.ts (the enabled endpoints, woken by new events), enqueue.ts (reading the log
// into deliveries), claim-plan.ts and pace.ts (what to lease, how much at a time), in-flight.ts
// (the caps, starting attempts), attempt.ts (one attempt), outcomes.ts (writing outcomes behind
// the attempts), failing.ts (the failing endpoints' budget), disabling.ts, token-standing.ts, signing-secrets.ts, delivery-body.ts; and
// coalesce.ts, how a thing asked for often runs once.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Access } from '../auth/access.ts';
import type { EventLog } from '../events/log.ts';
import type { StoredEvent } from '../events/types.ts';
import type { Config } from '../config.ts';
import { NO_METRICS, type WebhookMetrics } from '../metrics.ts';
import { Attempts } from './attempt.ts';
import { planClaim } from './claim-plan.ts';
import { OneAtATime, Soon, nextTurn } from './coalesce.ts';
import { type DisableReason, EndpointDisabling } from './disabling.ts';
import { FailingBudget } from './failing.ts';
import { EndpointCache } from './endpoint-cache.ts';
import type { WebhookEndpoints } from './endpoints.ts';
import { Enqueuing } from './enqueue.ts';
import { type Held, InFlight } from './in-flight.ts';
import { OutcomeWriter, handedBack } from './outcomes.ts';
import { Paces } from './pace.ts';
import { RecentEvents } from './recent-events.ts';
import { SigningSecrets } from './signing-secrets.ts';
import type { DeliveryOutcome, DeliveryRecord, Poster, WebhookEndpointRecord, WebhookStore } from './ports.ts';
import { TokenStandings } from './token-standing.ts';

// Also named here, where they were first declared (tests import them from this file).
export type { Poster, PostResult } from './ports.ts';

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

/** How often settled deliveries older than `keepMs` are purged. */
const PURGE_EVERY_MS = 60 * 60 * 1000;

export class WebhookDispatcher {
  private readonly now: () => number;
  /** This process's lease name. */
  readonly owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
  private readonly endpoints: EndpointCache;
  private readonly standings: TokenStandings;
  private readonly paces: Paces;
  /** Attempts to failing endpoints, a budget per project (lib/webhooks/failing.ts). */
  private readonly failing: FailingBudget;
  private readonly inFlight: InFlight;
  private readonly attempts: Attempts;
  private readonly outcomes: OutcomeWriter;
  private readonly disabling: EndpointDisabling;
  private readonly enqueuing: Enqueuing;
  /** Each endpoint's reading of the log, one at a time per endpoint. */
  private readonly fills: OneAtATime<string>;
  /** Claims, one at a time. */
  private readonly claims: OneAtATime<'claim'>;
  /** Claims again after this turn, once for every attempt ending in it. */
  private readonly claimSoon: Soon;
  /** A claim left endpoints out for want of room in their project: the next attempt's end claims again. */
  private projectFull = false;
  /** Claims made: where the next one starts among the endpoints. */
  private claimTurn = 0;
  /**
   * Endpoints whose last claim came back short: not claimed for again until the next poll, or
   * until this process enqueues deliveries it does not lease. Every attempt's end asked again, and
   * once a backlog was drained (or with live events, leased as they are made) each of those
   * claims found nothing: a third of the claims in a run of the throughput benchmark.
   */
  private readonly drained = new Set<string>();
  /**
   * Endpoints whose catch-up stopped for want of room (lib/webhooks/enqueue.ts): read again once
   * an attempt ends, not on every event of their project (a hundred endpoints whose receivers
   * hang, woken by each event, each found no room).
   */
  private readonly waitingForRoom = new Set<string>();
  /** Catch-ups waiting for room asked again after this turn, once for every attempt ending in it. */
  private readonly roomSoon: Soon;
  /** Events read lately: a claimed delivery's body, without reading the log again. */
  private readonly recent = new RecentEvents();
  private timer: NodeJS.Timeout | null = null;
  /** Aborts the attempts still running when close's grace is over. */
  private readonly stopping = new AbortController();
  private purgeTimer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(private readonly o: WebhookDispatcherOptions) {
    const now = (this.now = o.now ?? Date.now);
    const closed = () => this.closed;
    const disable = (e: WebhookEndpointRecord, reason: DisableReason, detail: string) => this.disable(e, reason, detail);
    this.endpoints = new EndpointCache({
      store: o.store,
      live: o.events.live,
      woken: (projects) => {
        for (const e of this.endpoints.values()) if (projects.has(e.projectId) && !this.waitingForRoom.has(e.id)) void this.fill(e.id);
      },
      held: () => this.inFlight.endpointIds(),
      deleted: (id) => this.forget(id),
      closed,
    });
    this.standings = new TokenStandings(o.access, now);
    this.paces = new Paces(o.settings.concurrency, now);
    this.failing = new FailingBudget(o.settings.failingPerSecond, now, (id) => this.endpoints.get(id)?.failingSince ?? null);
    this.inFlight = new InFlight({
      caps: o.settings,
      now,
      start: (h, signal) => void this.run(h, signal),
      mayStart: (h) => this.failing.wait(h.d.endpointId, h.d.projectId),
      // Written by the next flush: claims no longer write the outcomes waiting first.
      handBack: (d) => {
        this.outcomes.push(handedBack(d, this.owner, this.now()));
        this.outcomes.soon();
      },
      closed,
      stopping: this.stopping.signal,
    });
    this.disabling = new EndpointDisabling({ store: o.store, events: o.events, log: o.log, now });
    this.attempts = new Attempts({
      known: (id) => this.endpoints.get(id),
      store: o.store,
      events: o.events,
      standings: this.standings,
      secrets: new SigningSecrets(o.endpoints, now),
      disable,
      post: o.post,
      settings: o.settings,
      metrics: o.metrics ?? NO_METRICS.webhooks,
      owner: this.owner,
      now,
      random: o.random,
    });
    this.outcomes = new OutcomeWriter({ store: o.store, log: o.log, written: (failing, batch) => this.disableFailing(failing, batch) });
    this.enqueuing = new Enqueuing({
      endpoints: this.endpoints,
      store: o.store,
      events: o.events,
      standings: this.standings,
      disable,
      room: (e) =>
        Math.min(
          this.paces.batchOf(e.id) - this.inFlight.held(e.id),
          o.settings.maxInFlight - this.inFlight.heldTotal(),
          this.inFlight.projectRoom(e.projectId),
        ),
      leased: (leased, until, read) => {
        // Kept for the deliveries claimed later (a backlog past what was leased now), and for these.
        this.recent.add(read);
        return this.hold(leased, until);
      },
      ahead: (e) => this.paces.batchOf(e.id),
      waitingForRoom: (id) => this.waitingForRoom.add(id),
      leftUnleased: (id) => {
        this.drained.delete(id);
        void this.pump();
      },
      settings: o.settings,
      owner: this.owner,
      now,
      closed,
    });
    this.fills = new OneAtATime(
      (id) => this.enqueuing.catchUp(id),
      (err, id) => o.log.warn({ err, webhook: id }, 'webhook enqueue failed; trying again'),
      closed,
    );
    this.claims = new OneAtATime(
      () => this.claim(),
      (err) => o.log.warn({ err }, 'webhook claim failed; trying again'),
      closed,
    );
    this.claimSoon = new Soon(nextTurn, () => void this.pump());
    this.roomSoon = new Soon(nextTurn, () => this.roomLeft());
  }

  async start(): Promise<void> {
    await this.tick();
    this.timer = setInterval(() => void this.tick(), this.o.settings.pollMs);
    this.timer.unref();
    this.purgeTimer = setInterval(() => void this.purge(), PURGE_EVERY_MS);
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
    this.endpoints.forget(endpointId);
    this.drained.delete(endpointId);
    this.waitingForRoom.delete(endpointId);
    this.paces.forget(endpointId);
    this.failing.forget(endpointId);
    this.inFlight.forget(endpointId);
  }

  /** Stops taking work, lets attempts under way finish (at most `graceMs`), writes their outcomes. */
  async close(graceMs = 2000): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    if (this.purgeTimer) clearInterval(this.purgeTimer);
    this.endpoints.close();
    // Attempts still running after the grace are abandoned and handed back (their leases released).
    await Promise.race([this.inFlight.attemptsEnded(), new Promise((r) => setTimeout(r, graceMs).unref())]);
    this.stopping.abort();
    await this.inFlight.attemptsEnded();
    // Claimed but never started: handed back for another process.
    for (const d of this.inFlight.takeWaiting()) this.outcomes.push(handedBack(d, this.owner, this.now()));
    await this.outcomes.flush();
  }

  private async tick(only?: string): Promise<void> {
    if (this.closed) return;
    try {
      if (await this.endpoints.refresh()) {
        this.paces.keepOnly(this.endpoints);
        this.failing.keepOnly(this.endpoints);
      }
      for (const e of this.endpoints.values()) {
        if (only && e.id !== only) continue;
        this.waitingForRoom.delete(e.id);
        void this.fill(e.id);
      }
      // Retries come due and leases lapse with time, and other processes enqueue: each poll asks again.
      this.drained.clear();
      void this.pump();
    } catch (err) {
      this.o.log.warn({ err }, 'webhook dispatcher pass failed; trying again');
    }
  }

  /** Reads the log past the endpoint's position and enqueues what it may receive, until caught up. */
  private fill(id: string): Promise<void> {
    return this.fills.run(id);
  }

  /** Claims due deliveries while there is room, and starts their attempts. */
  private pump(): Promise<void> {
    return this.claims.run('claim');
  }

  private async claim(): Promise<void> {
    while (!this.closed && this.inFlight.heldTotal() < this.o.settings.maxInFlight) {
      // Outcomes waiting are not written first: they are at most FLUSH_DELAY_MS of attempts,
      // which the claim walks past (still leased), cheaper than a write of a few rows before
      // every claim, which also split the outcomes into small batches.
      const all = this.endpoints.all();
      const plan = planClaim({
        endpoints: all,
        turn: all.length > 0 ? this.claimTurn++ : 0,
        drained: this.drained,
        held: (id) => this.inFlight.held(id),
        batchOf: (id) => this.paces.batchOf(id),
        projectRooms: this.inFlight.projectRooms(),
        emptyProjectRoom: this.inFlight.emptyProjectRoom(),
      });
      this.projectFull = plan.projectFull;
      if (plan.endpoints.length === 0) break;
      const now = this.now();
      const leaseUntil = now + this.o.settings.leaseMs;
      const claimed = await this.o.store.claim({ owner: this.owner, now, leaseUntil, endpoints: plan.endpoints });
      const got = new Map<string, number>();
      for (const d of claimed) got.set(d.endpointId, (got.get(d.endpointId) ?? 0) + 1);
      for (const e of plan.endpoints) if ((got.get(e.id) ?? 0) < e.limit) this.drained.add(e.id);
      await this.hold(claimed, leaseUntil);
      if (claimed.length === 0) break;
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
    this.inFlight.add(leased.map((d) => ({ d, until, event: events.get(d.position) ?? null })));
  }

  /** One attempt and what follows it (one promise per attempt, not a chain of them). */
  private async run(h: Held, signal: AbortSignal): Promise<void> {
    const d = h.d;
    try {
      const outcome = await this.attempts.attempt(d, h.event, signal);
      this.failing.outcome(d.endpointId, outcome.receiver);
      this.outcomes.push(outcome);
    } catch (err) {
      // The lease lapses and the delivery is tried again, by this process or another.
      this.o.log.warn({ err, webhook: d.endpointId, event: d.eventId }, 'webhook attempt failed unexpectedly');
    }
    this.paces.ended(d.endpointId);
    this.inFlight.ended(d);
    this.settled(d.endpointId);
  }

  /**
   * An attempt ended: its outcome is written with others a moment later (one transaction for
   * many), and the room it left is claimed again after this turn (one claim for all of them).
   */
  private settled(endpointId: string): void {
    this.outcomes.soon();
    // Room left: the catch-ups that stopped for want of it go on (the claim below may take it first).
    if (this.waitingForRoom.size > 0) this.roomSoon.ask();
    // Claimed in batches: only once what the endpoint holds is down to half a batch.
    if (this.projectFull || this.inFlight.held(endpointId) <= this.paces.batchOf(endpointId) / 2) this.claimSoon.ask();
  }

  /**
   * The catch-ups waiting for room that have some now go on; the rest wait for the next attempt's
   * end. The rooms are counted once for the pass (counting one walks every queue).
   */
  private roomLeft(): void {
    const left = this.o.settings.maxInFlight - this.inFlight.heldTotal();
    if (left <= 0) return;
    const rooms = this.inFlight.projectRooms();
    const empty = this.inFlight.emptyProjectRoom();
    for (const id of this.waitingForRoom) {
      const e = this.endpoints.get(id);
      if (!e) {
        this.waitingForRoom.delete(id);
        continue;
      }
      if ((rooms.get(e.projectId) ?? empty) <= 0 || this.paces.batchOf(id) - this.inFlight.held(id) <= 0) continue;
      this.waitingForRoom.delete(id);
      void this.fill(id);
    }
  }

  /** After outcomes are written: endpoints failing without a break for disableAfterMs are disabled. */
  private async disableFailing(failing: Map<string, number | null>, batch: readonly DeliveryOutcome[]): Promise<void> {
    const now = this.now();
    for (const [id, since] of failing) {
      const e = this.endpoints.get(id);
      if (e && since !== null && now - since >= this.o.settings.disableAfterMs) {
        const last = batch.filter((o) => o.endpointId === id).pop();
        await this.disable({ ...e, failingSince: since }, 'failing', last?.error ?? 'every attempt failed');
      }
    }
  }

  /** Stops sending to an endpoint and records why, once per spell however many processes see it. */
  private async disable(e: WebhookEndpointRecord, reason: DisableReason, detail: string): Promise<void> {
    if (!this.endpoints.delete(e.id)) return;
    await this.disabling.disable(e, reason, detail);
  }

  private async purge(): Promise<void> {
    try {
      await this.o.store.purgeDeliveries(this.now() - this.o.settings.keepMs);
    } catch (err) {
      this.o.log.warn({ err }, 'purging settled webhook deliveries failed');
    }
  }
}
