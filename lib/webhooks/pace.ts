// How fast each endpoint's receiver gets through attempts, and so how many of its deliveries
// are leased at a time (when enqueued, or claimed): a fast receiver costs one claim per batch,
// not one per attempt, and a slow one holds no more than twice its cap (docs/webhooks.md).

/** A batch holds what the endpoint gets through in this long at its recent pace. */
export const PACE_WINDOW_MS = 100;
/** The most an endpoint's batch holds. */
export const MAX_BATCH = 256;
/** How often an endpoint's pace is measured again (soon after a backlog starts, so its batches grow quickly). */
export const PACE_EVERY_MS = 50;

/** Attempts an endpoint has ended since `since`, and its pace measured before. */
interface Pace {
  ended: number;
  since: number;
  perSecond: number;
}

export class Paces {
  private readonly paces = new Map<string, Pace>();

  /** `concurrency`: the per-endpoint cap of attempts under way. */
  constructor(
    private readonly concurrency: number,
    private readonly now: () => number,
  ) {}

  /** How many deliveries an endpoint's batch holds: what it gets through in PACE_WINDOW_MS, at least twice its cap. */
  batchOf(id: string): number {
    const perSecond = this.paces.get(id)?.perSecond ?? 0;
    return Math.min(MAX_BATCH, Math.max(2 * this.concurrency, Math.ceil((perSecond * PACE_WINDOW_MS) / 1000)));
  }

  /** An attempt of the endpoint ended: its pace, measured every PACE_EVERY_MS. */
  ended(id: string): void {
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

  forget(id: string): void {
    this.paces.delete(id);
  }

  /** Forgets every endpoint but these (the enabled ones). */
  keepOnly(ids: { has(id: string): boolean }): void {
    for (const id of this.paces.keys()) if (!ids.has(id)) this.paces.delete(id);
  }
}
