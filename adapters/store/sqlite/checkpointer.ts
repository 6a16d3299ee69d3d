// WAL checkpoints off the serving thread. SQLite's automatic checkpoint runs inside the COMMIT
// that pushes the WAL past 1000 pages, on whatever thread committed: in a serving process that is
// the event loop, and one request then waits for the whole copy into the database file and its
// fsync (bench/RESULTS.md, "Sending": a 0.2 ms outbox reservation took 4.9 ms at p99). Here the
// serving connection checkpoints never; a worker thread with its own connection to the same file
// runs PASSIVE checkpoints (they never block the writer or readers) every `intervalMs`.
//
// The file stays bounded: once a checkpoint has copied the whole WAL, the next commit starts it
// again from the top, and journal_size_limit truncates what was left over. If the worker dies,
// the serving connection checkpoints itself again, as before.
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { Db } from './db.ts';

/** SQLite's own default: what the serving connection goes back to without the worker. */
const AUTOCHECKPOINT_PAGES = 1000;
/** After a checkpoint, a WAL larger than this is truncated to it when it starts over. */
export const WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024;

export interface CheckpointResult {
  /** Frames in the WAL, and how many of them are now in the database file. */
  log: number;
  checkpointed: number;
}

// Plain JavaScript (the worker is evaluated, not loaded through the TypeScript loader); the
// driver's path comes from the parent, resolved next to this file.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file, { fileMustExist: true });
db.pragma('busy_timeout = 1000');
db.pragma('journal_size_limit = ' + workerData.sizeLimit);
const checkpoint = () => {
  try {
    const row = db.pragma('wal_checkpoint(PASSIVE)')[0];
    return { log: row.log, checkpointed: row.checkpointed };
  } catch (err) {
    // Busy (another process's checkpoint): the next turn tries again.
    return { log: -1, checkpointed: -1, error: String(err && err.message) };
  }
};
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on('message', (msg) => {
  if (msg.type === 'checkpoint') parentPort.postMessage({ id: msg.id, result: checkpoint() });
  if (msg.type === 'stop') {
    clearInterval(timer);
    checkpoint();
    db.close();
    parentPort.close();
  }
});
`;

export class WalCheckpointer {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly waiting = new Map<number, (r: CheckpointResult) => void>();
  private stopped = false;

  /**
   * Takes over the checkpoints of `db` (a connection to `file` in WAL mode) until stop().
   * `onError` hears a worker that failed; the serving connection then checkpoints itself again.
   */
  constructor(
    private readonly db: Db,
    file: string,
    options: { intervalMs?: number; onError?: (err: Error) => void } = {},
  ) {
    db.pragma(`journal_size_limit = ${WAL_SIZE_LIMIT_BYTES}`);
    db.pragma('wal_autocheckpoint = 0');
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { driver, file, intervalMs: options.intervalMs ?? 500, sizeLimit: WAL_SIZE_LIMIT_BYTES },
    });
    this.worker.unref();
    this.worker.on('message', (msg: { id: number; result: CheckpointResult }) => {
      this.waiting.get(msg.id)?.(msg.result);
      this.waiting.delete(msg.id);
    });
    this.worker.on('error', (err) => {
      this.takeBack();
      options.onError?.(err);
    });
    this.worker.on('exit', () => this.takeBack());
  }

  /** One checkpoint now, in the worker (tests; the timer runs them otherwise). */
  checkpoint(): Promise<CheckpointResult> {
    return new Promise((resolve) => {
      const id = this.nextId++;
      this.waiting.set(id, resolve);
      this.worker.postMessage({ type: 'checkpoint', id });
    });
  }

  /** Stops the worker after a last checkpoint; the serving connection checkpoints itself again. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    const exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    // Referenced until it exits: at shutdown nothing else may be left to keep the process alive,
    // and it would exit mid-await (code 13) without the last checkpoint.
    this.worker.ref();
    this.worker.postMessage({ type: 'stop' });
    await exited;
  }

  private takeBack(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const resolve of this.waiting.values()) resolve({ log: -1, checkpointed: -1 });
    this.waiting.clear();
    if (this.db.open) this.db.pragma(`wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`);
  }
}
