// Bounds the memory large request bodies take at once: a request reserves its body's size
// (Content-Length, or the route's limit when it does not say) before reading it, and waits while
// the budget is spent. A waiting request's body stays unread in the socket (TCP pushes back on
// the client), so eight clients sending 25 MB at once are handled a few at a time instead of all
// being held in memory together. A body larger than the whole budget goes alone.
export class BodyGate {
  private inUse = 0;
  private readonly waiting: Array<{ bytes: number; go: () => void }> = [];

  constructor(private readonly budgetBytes: number) {}

  /** Resolves with a release function once `bytes` fit in the budget. */
  async enter(bytes: number): Promise<() => void> {
    if (!this.fits(bytes) || this.waiting.length > 0) {
      await new Promise<void>((go) => this.waiting.push({ bytes, go }));
    } else {
      this.inUse += bytes;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse -= bytes;
      this.wake();
    };
  }

  private fits(bytes: number): boolean {
    return this.inUse === 0 || this.inUse + bytes <= this.budgetBytes;
  }

  /** First come, first served: a large body is not overtaken forever by small ones. */
  private wake(): void {
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.bytes)) {
      const next = this.waiting.shift()!;
      this.inUse += next.bytes;
      next.go();
    }
  }
}
