// Message searches off the serving thread (docs/search.md, "What a search may cost"). better-sqlite3
// is synchronous and cannot stop a statement under way (no sqlite3_interrupt, no progress handler):
// on the event loop, one search of a very large inbox would hold every other tenant's requests.
// Here each search's statement runs in a worker thread with its own read-only connection to the
// same file (WAL: it reads beside the writer), within the search's budget. Past it the caller gets
// the budget's error at once and the worker is terminated; a thread inside a native call only
// exits once that call returns, so it is abandoned meanwhile and a fresh worker serves the next
// search. At most `maxAbandoned` may be abandoned at once: beyond, searches wait for a worker
// (and answer over budget if none frees in time) rather than start ever more threads.
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { searchOverBudget } from '../../../lib/mail/search-bounds.ts';
import { BUSY_TIMEOUT_MS } from './db.ts';

export interface SearchWorkersOptions {
  /** Workers serving searches at once (default 2). */
  size?: number;
  /** Terminated workers still finishing a native call, at most (default 2). */
  maxAbandoned?: number;
}

// Plain JavaScript (the worker is evaluated, not loaded through the TypeScript loader), as in
// checkpointer.ts. `stallMs` (tests only) holds the thread before the statement, as a long
// native call would.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { readonly: true, fileMustExist: true });
db.pragma('busy_timeout = ' + workerData.busyTimeoutMs);
parentPort.on('message', (msg) => {
  if (msg.type === 'stop') {
    db.close();
    parentPort.close();
    return;
  }
  if (msg.stallMs > 0) {
    const until = Date.now() + msg.stallMs;
    while (Date.now() < until);
  }
  try {
    parentPort.postMessage({ id: msg.id, rows: db.prepare(msg.sql).all(msg.params) });
  } catch (err) {
    parentPort.postMessage({ id: msg.id, error: { message: String(err && err.message), code: err && err.code } });
  }
});
`;

interface Job {
  id: number;
  sql: string;
  params: Record<string, unknown>;
  budgetMs: number;
  timer: NodeJS.Timeout;
  resolve: (rows: unknown[]) => void;
  reject: (err: unknown) => void;
}

interface Reply {
  id: number;
  rows?: unknown[];
  error?: { message: string; code?: string };
}

export class SearchWorkers {
  /** Tests only: how long each worker holds its thread before a statement. */
  stallMs = 0;
  private readonly size: number;
  private readonly maxAbandoned: number;
  private readonly driver = createRequire(import.meta.url).resolve('better-sqlite3');
  private readonly idle: Worker[] = [];
  private readonly busy = new Map<Worker, Job>();
  private readonly queue: Job[] = [];
  /** Every thread not yet exited, abandoned ones included: close() waits for them. */
  private readonly exits = new Map<Worker, Promise<void>>();
  private abandoned = 0;
  private nextId = 0;
  private closed = false;

  constructor(
    private readonly file: string,
    options: SearchWorkersOptions = {},
  ) {
    this.size = options.size ?? 2;
    this.maxAbandoned = options.maxAbandoned ?? 2;
  }

  /** The statement's rows, read in a worker; the budget's error (unavailable) past `budgetMs`, counted from now. */
  run(sql: string, params: Record<string, unknown>, budgetMs: number): Promise<unknown[]> {
    if (this.closed) return Promise.reject(new Error('the store is closed'));
    return new Promise((resolve, reject) => {
      const job: Job = {
        id: this.nextId++,
        sql,
        params,
        budgetMs,
        resolve,
        reject,
        timer: setTimeout(() => this.overBudget(job), budgetMs),
      };
      this.queue.push(job);
      this.dispatch();
    });
  }

  /** Stops every worker, the abandoned ones included, and waits for their threads to exit. */
  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) this.fail(job, new Error('the store is closed'));
    for (const [worker, job] of this.busy) {
      this.fail(job, new Error('the store is closed'));
      void worker.terminate();
    }
    for (const worker of this.idle.splice(0)) {
      worker.ref();
      worker.postMessage({ type: 'stop' });
    }
    await Promise.all(this.exits.values());
  }

  private dispatch(): void {
    while (this.queue.length > 0 && !this.closed) {
      const worker = this.idle.pop() ?? this.spawn();
      if (!worker) return;
      const job = this.queue.shift()!;
      this.busy.set(worker, job);
      // Referenced while it works for someone: a pending search keeps the process alive.
      worker.ref();
      worker.postMessage({ type: 'search', id: job.id, sql: job.sql, params: job.params, stallMs: this.stallMs });
    }
  }

  /** A new worker, unless the live ones or the abandoned ones are at their bound. */
  private spawn(): Worker | null {
    if (this.busy.size + this.idle.length >= this.size || this.abandoned >= this.maxAbandoned) return null;
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { driver: this.driver, file: this.file, busyTimeoutMs: BUSY_TIMEOUT_MS },
    });
    this.exits.set(
      worker,
      new Promise<void>((resolve) =>
        worker.once('exit', () => {
          this.exits.delete(worker);
          resolve();
        }),
      ),
    );
    worker.on('message', (reply: Reply) => this.answered(worker, reply));
    worker.on('error', (err) => this.lost(worker, err));
    worker.on('exit', () => this.lost(worker, new Error('the search worker stopped')));
    return worker;
  }

  private answered(worker: Worker, reply: Reply): void {
    const job = this.busy.get(worker);
    if (!job || job.id !== reply.id) return;
    this.busy.delete(worker);
    clearTimeout(job.timer);
    if (reply.error) job.reject(Object.assign(new Error(reply.error.message), { code: reply.error.code }));
    else job.resolve(reply.rows ?? []);
    worker.unref();
    this.idle.push(worker);
    this.dispatch();
  }

  /** A worker that failed or exited: its search fails, and the next search gets a fresh one. */
  private lost(worker: Worker, err: Error): void {
    const at = this.idle.indexOf(worker);
    if (at >= 0) this.idle.splice(at, 1);
    const job = this.busy.get(worker);
    if (job) {
      this.busy.delete(worker);
      this.fail(job, err);
    }
    this.dispatch();
  }

  private overBudget(job: Job): void {
    const queued = this.queue.indexOf(job);
    if (queued >= 0) this.queue.splice(queued, 1);
    for (const [worker, running] of this.busy) {
      if (running !== job) continue;
      // Abandoned: its thread exits once its native call returns; until then it counts.
      this.busy.delete(worker);
      this.abandoned++;
      worker.once('exit', () => {
        this.abandoned--;
        this.dispatch();
      });
      void worker.terminate();
    }
    job.reject(searchOverBudget(job.budgetMs));
    this.dispatch();
  }

  private fail(job: Job, err: unknown): void {
    clearTimeout(job.timer);
    job.reject(err);
  }
}
