// Live streams re-check their credential and access while they run. A stream is authorized once,
// when it opens; without this a revoked token, an ended or expired session or a withdrawn grant
// would keep receiving events until POSTERN_STREAM_MAX_MS. One process-wide timer re-checks
// every open stream each POSTERN_STREAM_RECHECK_MS: each distinct credential is authenticated
// once per tick however many streams share it, and each stream's own check runs against that
// result, with lookups shared between streams of one credential (`Standing.once`). A stream
// that may no longer be served gets one last frame, `event: error` with `{"error": "..."}` (the
// message a reconnect would get as its error body), and is closed. At shutdown it is also what
// ends every open stream (endAll), since every stream is watched here from its start.
import type { Access, Principal } from '../auth/access.ts';
import { isDomainError } from '../errors.ts';
import { authenticateAs, presentedCredential } from './authenticate.ts';
import type { AppContext, Surface } from './context.ts';
import type { WarnLog } from '../warn-log.ts';

/** A pass yields to the event loop after this much work, so it never holds up I/O for long. */
const SLICE_MS = 5;

/** A credential as it stands at this tick. */
export interface Standing {
  principal: Principal;
  /**
   * Runs `compute` once per credential and tick for a key, and shares the result (or the error)
   * with every stream of that credential asking for the same key.
   */
  once<T>(key: string, compute: () => Promise<T>): Promise<T>;
}

/** Throws a DomainError (its message is sent to the client) when the stream may no longer run. */
export type StreamCheck = (now: Standing) => Promise<void> | void;

/** What the guard needs of a stream: SseStream, or MCP's notification stream (routes/mcp.ts). */
export interface GuardedStream {
  readonly closed: boolean;
  /** The caller may no longer have it: it ends, telling why. */
  endWith(error: string): void;
  /** Shutdown: it ends, telling the client to come back after `retryMs`. */
  reconnect(retryMs: number): void;
  onClose(handler: () => void): void;
}

interface Watched {
  sse: GuardedStream;
  check: StreamCheck;
}

interface Credential {
  surface: Surface;
  presented: string | undefined;
  streams: Set<Watched>;
}

export interface StreamGuardOptions {
  intervalMs: number;
  log?: WarnLog;
}

export class StreamGuard {
  private readonly credentials = new Map<string, Credential>();
  private timer: NodeJS.Timeout | null = null;
  private running = false;
  private sliceStart = 0;
  private stopped = false;
  /** Set by endAll: the server is shutting down, every stream ends with this reconnect hint. */
  private ending: number | null = null;

  constructor(
    private readonly access: Access,
    private readonly options: StreamGuardOptions,
  ) {}

  /** Streams re-checked now (for tests and metrics). */
  get size(): number {
    let n = 0;
    for (const c of this.credentials.values()) n += c.streams.size;
    return n;
  }

  /** Re-checks the request's credential and `check` every interval while `sse` is open. */
  watch(ctx: AppContext, sse: GuardedStream, check: StreamCheck): void {
    if (sse.closed) return;
    if (this.ending !== null) {
      sse.reconnect(this.ending * (1 + Math.random()));
      return;
    }
    const p = ctx.state.principal;
    const key = `${p.kind}:${p.credentialId}`;
    let cred = this.credentials.get(key);
    if (!cred) {
      cred = { surface: ctx.state.surface, presented: presentedCredential(ctx, ctx.state.surface), streams: new Set() };
      this.credentials.set(key, cred);
    }
    const watched: Watched = { sse, check };
    cred.streams.add(watched);
    const entry = cred;
    sse.onClose(() => {
      entry.streams.delete(watched);
      if (entry.streams.size === 0 && this.credentials.get(key) === entry) this.credentials.delete(key);
    });
    if (!this.timer && !this.stopped) {
      this.timer = setInterval(() => void this.tick(), this.options.intervalMs);
      this.timer.unref();
    }
  }

  /** One pass over every open stream; a pass still running when the next is due lets it go. */
  async tick(): Promise<void> {
    if (this.running) return;
    if (this.credentials.size === 0) {
      // Nothing to watch: no timer until the next stream opens.
      this.clearTimer();
      return;
    }
    this.running = true;
    this.sliceStart = performance.now();
    try {
      for (const cred of [...this.credentials.values()]) await this.recheck(cred);
    } finally {
      this.running = false;
    }
  }

  /** Stops the timer for good (server shutdown); open streams end with their connections. */
  stop(): void {
    this.stopped = true;
    this.clearTimer();
  }

  /**
   * Shutdown: every open stream ends with a reconnect hint (SseStream.reconnect), each told a
   * wait between `retryMs` and twice that, so clients do not all come back in the same instant;
   * a stream opened after this ends the same way at once.
   */
  endAll(retryMs: number): void {
    this.ending = retryMs;
    for (const cred of [...this.credentials.values()]) {
      for (const { sse } of [...cred.streams]) sse.reconnect(retryMs * (1 + Math.random()));
    }
  }

  /** The store answers synchronously underneath: without this a pass would run as one block. */
  private async yieldIfDue(): Promise<void> {
    if (performance.now() - this.sliceStart < SLICE_MS) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
    this.sliceStart = performance.now();
  }

  private clearTimer(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private async recheck(cred: Credential): Promise<void> {
    if (cred.streams.size === 0) return;
    await this.yieldIfDue();
    let principal: Principal;
    try {
      principal = await authenticateAs(this.access, cred.surface, cred.presented);
    } catch (err) {
      this.failed(cred.streams, err);
      return;
    }
    const memo = new Map<string, Promise<unknown>>();
    const standing: Standing = {
      principal,
      once<T>(key: string, compute: () => Promise<T>): Promise<T> {
        let result = memo.get(key) as Promise<T> | undefined;
        if (!result) memo.set(key, (result = compute()));
        return result;
      },
    };
    for (const watched of [...cred.streams]) {
      await this.yieldIfDue();
      if (watched.sse.closed) continue;
      try {
        await watched.check(standing);
      } catch (err) {
        this.failed([watched], err);
      }
    }
  }

  /**
   * A DomainError other than unavailable (unauthenticated, forbidden, not found) means the caller may no longer have the stream: it ends.
   * Anything else is the store failing: the streams go on and the next tick tries again, so a passing
   * outage does not disconnect every client at once (POSTERN_STREAM_MAX_MS still bounds them).
   */
  private failed(streams: Iterable<Watched>, err: unknown): void {
    if (!isDomainError(err) || err.kind === 'unavailable') {
      this.options.log?.warn({ err }, 'live stream re-check failed; streams kept until the next tick');
      return;
    }
    for (const { sse } of [...streams]) sse.endWith(err.message);
  }
}
