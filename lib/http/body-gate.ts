// Bounds the memory large request bodies take at once: a request reserves what it will hold
// (its body, and the copies made from it: lib/http/routes/send.ts) before reading it, and waits
// while the budget is spent. A waiting request's body stays unread in the socket (TCP pushes back
// on the client), so eight clients sending 25 MB at once are handled a few at a time instead of
// all being held in memory together. A request larger than the whole budget goes alone.
//
// Large requests are served first come, first served. A small one (a normal message) does not
// queue behind a large one that the other large ones are keeping out: it goes at once while it
// fits, so a burst of 25 MB sends does not stall the 20 KB ones. It never overtakes a large one
// that is only waiting for small ones to finish, so a stream of small sends cannot starve it.

/** Requests up to this many bytes are small: they may overtake large ones held up by large ones. */
export const SMALL_REQUEST_BYTES = 1024 * 1024;

export class BodyGate {
  private inUse = 0;
  /** The part of inUse held by small requests. */
  private inUseSmall = 0;
  private readonly waiting: Array<{ bytes: number; go: () => void }> = [];

  constructor(private readonly budgetBytes: number) {}

  /** Resolves with a release function once `bytes` fit in the budget. */
  async enter(bytes: number): Promise<() => void> {
    if (this.fits(bytes) && (this.waiting.length === 0 || this.mayOvertake(bytes))) this.take(bytes);
    else await new Promise<void>((go) => this.waiting.push({ bytes, go }));
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse -= bytes;
      if (bytes <= SMALL_REQUEST_BYTES) this.inUseSmall -= bytes;
      this.wake();
    };
  }

  private fits(bytes: number): boolean {
    return this.inUse === 0 || this.inUse + bytes <= this.budgetBytes;
  }

  /** A small request may go before the first waiter while large requests alone keep that one out. */
  private mayOvertake(bytes: number): boolean {
    if (bytes > SMALL_REQUEST_BYTES) return false;
    const large = this.inUse - this.inUseSmall;
    const first = this.waiting[0]!.bytes;
    return large > 0 && large + first > this.budgetBytes;
  }

  private take(bytes: number): void {
    this.inUse += bytes;
    if (bytes <= SMALL_REQUEST_BYTES) this.inUseSmall += bytes;
  }

  private wake(): void {
    while (this.waiting.length > 0 && this.fits(this.waiting[0]!.bytes)) {
      const next = this.waiting.shift()!;
      this.take(next.bytes);
      next.go();
    }
    // Small ones queued behind a large one that is still kept out by large ones.
    for (let i = 1; i < this.waiting.length; i++) {
      const w = this.waiting[i]!;
      if (this.fits(w.bytes) && this.mayOvertake(w.bytes)) {
        this.waiting.splice(i--, 1);
        this.take(w.bytes);
        w.go();
      }
    }
  }
}
