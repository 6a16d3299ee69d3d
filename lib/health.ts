// Readiness: whether this process can serve now, as a load balancer asks it (GET /readyz). Every
// dependency is checked in parallel, each within a deadline, and the answer is kept for a moment:
// a balancer polling every few milliseconds must not open an IMAP login per poll. Once the process
// starts shutting down it is never ready again, whatever its dependencies say.
//
// /readyz answers anyone: a check's reason is a DomainError's message (written to be read by
// callers, no address or user name); anything else is reported by its code alone, and logged.
import { isDomainError } from './errors.ts';
import type { WarnLog } from './warn-log.ts';

/** One dependency's check: resolves when it answers, rejects with why not. */
export type Check = () => Promise<void>;

export interface ReadinessReport {
  ready: boolean;
  /** The process is shutting down (SIGTERM): nothing was checked. */
  draining: boolean;
  /** Each dependency: "ok", or why it did not answer. */
  checks: Record<string, string>;
}

export interface ReadinessOptions {
  /** Each check must answer within this long. */
  timeoutMs: number;
  /** A report is reused for this long. */
  cacheMs: number;
  log?: WarnLog;
}

export class Readiness {
  private last: { done: number | null; report: Promise<ReadinessReport> } | null = null;
  private stopping = false;

  constructor(
    private readonly checks: Readonly<Record<string, Check>>,
    private readonly options: ReadinessOptions,
  ) {}

  /** From now on the process answers "not ready": it is shutting down. */
  drain(): void {
    this.stopping = true;
  }

  get draining(): boolean {
    return this.stopping;
  }

  /** The last report if it is recent or still being made, else a new one. */
  report(): Promise<ReadinessReport> {
    if (this.stopping) return Promise.resolve({ ready: false, draining: true, checks: {} });
    const last = this.last;
    if (last && (last.done === null || Date.now() - last.done < this.options.cacheMs)) return last.report;
    const report = this.run();
    const entry: { done: number | null; report: Promise<ReadinessReport> } = { done: null, report };
    this.last = entry;
    // Its age counts from when it was finished; until then every caller waits for this one.
    void report.then(() => (entry.done = Date.now()));
    return report;
  }

  private async run(): Promise<ReadinessReport> {
    const names = Object.keys(this.checks);
    const results = await Promise.all(names.map((name) => this.within(name, this.checks[name]!)));
    const checks: Record<string, string> = {};
    names.forEach((name, i) => (checks[name] = results[i]!));
    return { ready: results.every((r) => r === 'ok'), draining: false, checks };
  }

  private within(name: string, check: Check): Promise<string> {
    const { timeoutMs, log } = this.options;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        log?.warn({ check: name, timeoutMs }, 'a readiness check did not answer in time');
        resolve(`no answer within ${timeoutMs} ms`);
      }, timeoutMs);
      check()
        .then(
          () => resolve('ok'),
          (err: unknown) => {
            // A DomainError is an expected outage, its message says it all; anything else in full.
            log?.warn({ check: name, ...(isDomainError(err) ? { reason: err.message } : { err }) }, 'a readiness check failed');
            const code = (err as { code?: unknown } | null)?.code;
            resolve(isDomainError(err) ? err.message : `failed${typeof code === 'string' ? ` (${code})` : ''}`);
          },
        )
        .finally(() => clearTimeout(timer));
    });
  }
}
