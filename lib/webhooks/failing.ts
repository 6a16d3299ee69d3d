// Attempts to failing endpoints, a budget per project (docs/webhooks.md, "Bounds"): an endpoint
// whose last attempt in this process failed (no answer in time, a refused connection, a name that
// does not resolve, a non-2xx), or that the store says is failing when this process has not tried
// it yet, starts attempts only as its project's budget allows, `perSecond` a second (as many at
// once). A receiver that answers is not slowed: its first 2xx makes the endpoint healthy again.
// Without it, a project whose hundred endpoints fail at once (a name kept as not resolving fails
// in microseconds) started attempts, wrote their outcomes and claimed the next as fast as the main
// thread went, every other project's requests and deliveries waiting behind them; deliveries
// that wait here keep their place (leased, then handed back and claimed again), nothing is dropped.

/** What the budget needs of an endpoint it has no attempt of: when the store says it began failing. */
export type FailingSince = (endpointId: string) => number | null;

interface Bucket {
  tokens: number;
  at: number;
}

export class FailingBudget {
  /** Endpoints whose last attempt here failed (true) or succeeded (false). */
  private readonly down = new Map<string, boolean>();
  private readonly buckets = new Map<string, Bucket>();

  /** `perSecond`: attempts a second to one project's failing endpoints; 0: no limit. */
  constructor(
    private readonly perSecond: number,
    private readonly now: () => number,
    private readonly failingSince: FailingSince,
  ) {}

  /** An attempt ended: whether the receiver answered 2xx ('up'), not ('down'), or it was not tried (null). */
  outcome(endpointId: string, receiver: 'up' | 'down' | null): void {
    if (receiver !== null) this.down.set(endpointId, receiver === 'down');
  }

  failing(endpointId: string): boolean {
    return this.down.get(endpointId) ?? this.failingSince(endpointId) !== null;
  }

  /**
   * Whether an attempt of the endpoint may start now: 0, and it is counted; else the ms until its
   * project's budget has room (nothing counted).
   */
  wait(endpointId: string, projectId: string): number {
    if (this.perSecond <= 0 || !this.failing(endpointId)) return 0;
    const t = this.now();
    const burst = Math.max(1, this.perSecond);
    const kept = this.buckets.get(projectId);
    const tokens = kept ? Math.min(burst, kept.tokens + ((t - kept.at) * this.perSecond) / 1000) : burst;
    if (tokens >= 1) {
      this.buckets.set(projectId, { tokens: tokens - 1, at: t });
      return 0;
    }
    this.buckets.set(projectId, { tokens, at: t });
    return Math.max(1, Math.ceil(((1 - tokens) * 1000) / this.perSecond));
  }

  forget(endpointId: string): void {
    this.down.delete(endpointId);
  }

  /** Forgets every endpoint but these (the enabled ones), and the buckets that are full again. */
  keepOnly(ids: { has(id: string): boolean }): void {
    for (const id of this.down.keys()) if (!ids.has(id)) this.down.delete(id);
    const t = this.now();
    for (const [project, b] of this.buckets) {
      if (this.perSecond <= 0 || b.tokens + ((t - b.at) * this.perSecond) / 1000 >= this.perSecond) this.buckets.delete(project);
    }
  }
}
