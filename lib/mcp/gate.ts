// The bounds of one POST /v1/mcp request (docs/mcp.md, "Bounds"). The SDK starts every call of
// a JSON-RPC batch at once and lets them run after the client has gone; a batch of slow calls
// then held the process (its other requests, /healthz too) for seconds. A request's calls go
// through its gate instead: a few at a time, within one time budget for them all, and none
// started once the client has disconnected.
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { Config } from '../config.ts';

export type McpLimits = Config['mcp'];

export class RequestGate {
  private running = 0;
  private readonly waiting: Array<{ start: () => void; stop: (err: Error) => void }> = [];
  private readonly deadline: number;

  constructor(
    private readonly limits: McpLimits,
    private readonly signal: AbortSignal,
  ) {
    this.deadline = performance.now() + limits.batchBudgetMs;
    signal.addEventListener('abort', () => {
      for (const w of this.waiting.splice(0)) w.stop(this.gone());
    });
  }

  /** `work`, once a place is free and if the budget and the client allow it to start. */
  async run<T>(work: () => Promise<T> | T): Promise<T> {
    await this.place();
    try {
      if (this.signal.aborted) throw this.gone();
      if (performance.now() > this.deadline) {
        throw new McpError(
          ErrorCode.RequestTimeout,
          `not started: this request's calls used its time budget of ${this.limits.batchBudgetMs} ms (POSTERN_MCP_BATCH_BUDGET_MS); send this call again in a later request`,
        );
      }
      return await work();
    } finally {
      this.release();
    }
  }

  private gone(): McpError {
    return new McpError(ErrorCode.ConnectionClosed, 'not started: the client disconnected');
  }

  private place(): Promise<void> {
    if (this.signal.aborted) return Promise.reject(this.gone());
    if (this.running < this.limits.batchConcurrency) {
      this.running++;
      return Promise.resolve();
    }
    return new Promise((start, stop) => this.waiting.push({ start, stop }));
  }

  /**
   * The place goes to the next call on a later turn of the event loop, not at once: a call whose
   * work is synchronous (an index search) would otherwise start the next one in the same
   * microtask run, and the whole batch would run without letting any other request in.
   */
  private release(): void {
    const next = this.waiting.shift();
    if (!next) {
      this.running--;
      return;
    }
    setImmediate(next.start);
  }
}
