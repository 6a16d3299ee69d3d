// The enabled endpoints as this process knows them (docs/webhooks.md): read from the store at
// each poll and when an edit through this process asks, with a live subscription per project
// that has any, so new events wake its endpoints' reading a moment later.
import { Soon, after } from './coalesce.ts';
import type { WebhookEndpointRecord, WebhookStore } from './ports.ts';

/** New events are read this long after the first of them arrives, with those arriving meanwhile. */
export const WAKE_DELAY_MS = 5;

export interface EndpointCacheOptions {
  store: Pick<WebhookStore, 'all'>;
  /** The event log's live feed (lib/events/live.ts): `listener` is called per new event of the project. */
  live: { subscribe(projectId: string, listener: () => void): () => void };
  /** New events in these projects (once for however many arrived within WAKE_DELAY_MS). */
  woken: (projectIds: ReadonlySet<string>) => void;
  /** Endpoints this process holds deliveries of; one no longer in the store goes to `deleted`. */
  held: () => Iterable<string>;
  /** An endpoint was deleted through another process. */
  deleted: (id: string) => void;
  closed: () => boolean;
}

export class EndpointCache {
  private endpoints = new Map<string, WebhookEndpointRecord>();
  private readonly subscriptions = new Map<string, () => void>();
  /** Refreshes started: only the latest one's read is kept. */
  private refreshes = 0;
  private readonly woken = new Set<string>();
  private readonly wake: Soon;

  constructor(private readonly o: EndpointCacheOptions) {
    this.wake = new Soon(after(WAKE_DELAY_MS), () => {
      const projects = new Set(this.woken);
      this.woken.clear();
      this.o.woken(projects);
    });
  }

  get(id: string): WebhookEndpointRecord | null {
    return this.endpoints.get(id) ?? null;
  }

  has(id: string): boolean {
    return this.endpoints.has(id);
  }

  set(e: WebhookEndpointRecord): void {
    this.endpoints.set(e.id, e);
  }

  /** False when it was not known (already dropped). */
  delete(id: string): boolean {
    return this.endpoints.delete(id);
  }

  all(): Array<[string, WebhookEndpointRecord]> {
    return [...this.endpoints];
  }

  values(): IterableIterator<WebhookEndpointRecord> {
    return this.endpoints.values();
  }

  /** Dropped now (deleted through this process): a read begun before the deletion would put it back. */
  forget(id: string): void {
    this.refreshes++;
    this.endpoints.delete(id);
  }

  /**
   * The enabled endpoints, and a live subscription per project that has any (new events wake its
   * endpoints). False: a later refresh (or forget) began meanwhile, and this one's read was dropped.
   */
  async refresh(): Promise<boolean> {
    const seq = ++this.refreshes;
    const all = await this.o.store.all();
    // A read begun before another (the poll's, before an edit's poke) and ending after it would put
    // back what that one saw changed: an endpoint just disabled would go on being sent to.
    if (seq !== this.refreshes) return false;
    const next = new Map<string, WebhookEndpointRecord>();
    for (const e of all) if (e.disabledAt === null) next.set(e.id, e);
    // Deleted through another process: stopped here too.
    const present = new Set(all.map((e) => e.id));
    for (const id of [...this.o.held()]) if (!present.has(id)) this.o.deleted(id);
    this.endpoints = next;
    const projects = new Set([...next.values()].map((e) => e.projectId));
    for (const [project, off] of this.subscriptions) {
      if (!projects.has(project)) {
        off();
        this.subscriptions.delete(project);
      }
    }
    for (const project of projects) {
      if (this.subscriptions.has(project) || this.o.closed()) continue;
      this.subscriptions.set(
        project,
        this.o.live.subscribe(project, () => this.woke(project)),
      );
    }
    return true;
  }

  /** Ends the live subscriptions. */
  close(): void {
    for (const off of this.subscriptions.values()) off();
    this.subscriptions.clear();
  }

  private woke(projectId: string): void {
    if (this.o.closed()) return;
    this.woken.add(projectId);
    this.wake.ask();
  }
}
