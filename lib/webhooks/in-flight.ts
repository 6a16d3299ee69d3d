// The deliveries this process holds (docs/webhooks.md): leased ones waiting to start, and
// attempts under way, under three caps: `concurrency` per endpoint, `projectConcurrency` per
// project and `maxInFlight` in all, so a slow or dead receiver holds only its own deliveries
// back, and a project's many slow receivers only that project's. It starts attempts; what an
// attempt does is the caller's (`start`).
import type { StoredEvent } from '../events/types.ts';
import type { DeliveryRecord } from './ports.ts';

/** A leased delivery waiting for room under its endpoint's cap, until when its lease holds, and its event (null: no longer in the log). */
export interface Held {
  d: DeliveryRecord;
  until: number;
  event: StoredEvent | null;
}

export interface InFlightOptions {
  caps: { concurrency: number; projectConcurrency: number; maxInFlight: number; timeoutMs: number };
  now: () => number;
  /** Starts an attempt; it calls ended() when it is over. `signal`: abandon it (endpoint deleted, or stopping). */
  start: (h: Held, signal: AbortSignal) => void;
  /**
   * Whether the delivery may start now, besides the caps: 0 (counted as started), else the ms
   * to wait (lib/webhooks/failing.ts: a failing endpoint's project budget). Absent: always.
   */
  mayStart?: (h: Held) => number;
  /** A delivery not started (its lease too short, or the process stopping): to be handed back. */
  handBack: (d: DeliveryRecord) => void;
  /** True once the process stops taking work: waiting deliveries are handed back, not started. */
  closed: () => boolean;
  /** Aborts every attempt still running (close's grace is over). */
  stopping: AbortSignal;
}

export class InFlight {
  private readonly running = new Map<string, number>();
  private readonly runningByProject = new Map<string, number>();
  private runningTotal = 0;
  /** Leased deliveries waiting for room under their endpoint's cap. */
  private readonly queued = new Map<string, Held[]>();
  /** Endpoints with deliveries waiting for room under their project's cap or the process's, in turn. */
  private readonly waitingForRoom = new Set<string>();
  /** Per endpoint with attempts under way: what abandons them (deleted, or the process stopping). */
  private readonly aborts = new Map<string, { controller: AbortController; signal: AbortSignal }>();
  /** Endpoints waiting for mayStart, and the timer that drains each again. */
  private readonly waitingForBudget = new Map<string, NodeJS.Timeout>();
  /** Wakes close once no attempt is under way. */
  private allEnded: (() => void) | null = null;

  constructor(private readonly o: InFlightOptions) {}

  /** Queues leased deliveries by endpoint and starts them while there is room. */
  add(held: readonly Held[]): void {
    for (const h of held) {
      const q = this.queued.get(h.d.endpointId);
      if (q) q.push(h);
      else this.queued.set(h.d.endpointId, [h]);
    }
    for (const id of new Set(held.map((h) => h.d.endpointId))) this.drain(id);
  }

  /** Deliveries of an endpoint this process holds: under way, and leased waiting to start. */
  held(id: string): number {
    return (this.running.get(id) ?? 0) + (this.queued.get(id)?.length ?? 0);
  }

  heldTotal(): number {
    let n = this.runningTotal;
    for (const q of this.queued.values()) n += q.length;
    return n;
  }

  /**
   * How many more deliveries a project's endpoints may hold in this process: twice its cap of
   * attempts under way (the next ones ready to start), so one project's backlog cannot fill the
   * process's room for claims.
   */
  projectRoom(projectId: string): number {
    let n = this.runningByProject.get(projectId) ?? 0;
    for (const q of this.queued.values()) if (q[0]?.d.projectId === projectId) n += q.length;
    return this.emptyProjectRoom() - n;
  }

  /** projectRoom of every project holding deliveries, in one walk of the queues (others: emptyProjectRoom). */
  projectRooms(): Map<string, number> {
    const rooms = new Map<string, number>();
    const cap = this.emptyProjectRoom();
    for (const [project, n] of this.runningByProject) rooms.set(project, cap - n);
    for (const q of this.queued.values()) {
      const project = q[0]?.d.projectId;
      if (project !== undefined) rooms.set(project, (rooms.get(project) ?? cap) - q.length);
    }
    return rooms;
  }

  /** What a project holding no deliveries may hold: projectRoom's cap. */
  emptyProjectRoom(): number {
    return 2 * this.o.caps.projectConcurrency;
  }

  /** Endpoints with deliveries held (under way or waiting). */
  endpointIds(): Set<string> {
    return new Set([...this.aborts.keys(), ...this.queued.keys()]);
  }

  /** The endpoint was deleted: its attempts under way abandoned, its waiting deliveries dropped (their rows went with it). */
  forget(id: string): void {
    this.queued.delete(id);
    this.waitingForRoom.delete(id);
    clearTimeout(this.waitingForBudget.get(id));
    this.waitingForBudget.delete(id);
    this.aborts.get(id)?.controller.abort();
  }

  /** An attempt ended: its room goes to the endpoint's next delivery, then to those waiting for room, in turn. */
  ended(d: DeliveryRecord): void {
    const n = (this.running.get(d.endpointId) ?? 1) - 1;
    if (n === 0) {
      this.running.delete(d.endpointId);
      this.aborts.delete(d.endpointId);
    } else this.running.set(d.endpointId, n);
    const inProject = (this.runningByProject.get(d.projectId) ?? 1) - 1;
    if (inProject === 0) this.runningByProject.delete(d.projectId);
    else this.runningByProject.set(d.projectId, inProject);
    this.runningTotal--;
    if (this.runningTotal === 0 && this.allEnded) {
      const wake = this.allEnded;
      this.allEnded = null;
      wake();
    }
    this.drain(d.endpointId);
    if (this.waitingForRoom.size > 0) this.drainWaiting();
  }

  /** Resolves once no attempt is under way. */
  attemptsEnded(): Promise<void> {
    if (this.runningTotal === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const before = this.allEnded;
      this.allEnded = () => {
        before?.();
        resolve();
      };
    });
  }

  /** The deliveries leased but never started, no longer held (closing: handed back for another process). */
  takeWaiting(): DeliveryRecord[] {
    const out: DeliveryRecord[] = [];
    for (const q of this.queued.values()) for (const h of q) out.push(h.d);
    this.queued.clear();
    for (const timer of this.waitingForBudget.values()) clearTimeout(timer);
    this.waitingForBudget.clear();
    return out;
  }

  /** Starts an endpoint's waiting deliveries while it, its project and the process are under their caps. */
  private drain(id: string): void {
    const q = this.queued.get(id);
    const caps = this.o.caps;
    while (q && q.length > 0 && (this.running.get(id) ?? 0) < caps.concurrency) {
      const h = q[0]!;
      // Not started with less of its lease left than an attempt may take (another process could
      // claim it meanwhile): handed back, to be claimed afresh.
      if (this.o.closed() || h.until - this.o.now() <= caps.timeoutMs) {
        q.shift();
        this.o.handBack(h.d);
        continue;
      }
      if ((this.runningByProject.get(h.d.projectId) ?? 0) >= caps.projectConcurrency || this.runningTotal >= caps.maxInFlight) {
        // Started when an attempt of its project (or any, for the process's cap) ends.
        this.waitingForRoom.add(id);
        break;
      }
      if (this.waitingForBudget.has(id)) break;
      const wait = this.o.mayStart?.(h) ?? 0;
      if (wait > 0) {
        // Drained again when the budget has room (its lease is checked again then).
        const timer = setTimeout(() => {
          this.waitingForBudget.delete(id);
          this.drain(id);
        }, wait);
        timer.unref();
        this.waitingForBudget.set(id, timer);
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
    this.running.set(d.endpointId, (this.running.get(d.endpointId) ?? 0) + 1);
    this.runningByProject.set(d.projectId, (this.runningByProject.get(d.projectId) ?? 0) + 1);
    this.runningTotal++;
    let abort = this.aborts.get(d.endpointId);
    if (!abort) {
      const controller = new AbortController();
      abort = { controller, signal: AbortSignal.any([controller.signal, this.o.stopping]) };
      this.aborts.set(d.endpointId, abort);
    }
    this.o.start(h, abort.signal);
  }
}
