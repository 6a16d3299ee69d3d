// Group commit for one SQLite connection: the small writes asked for in one turn of the event
// loop (event appends, send reservations, outbox state changes) share one IMMEDIATE
// transaction, and one that fails fails alone. A commit costs far more
// than a row (the WAL frames of every page it touched, the locks): this is what lets 32
// concurrent publishers exceed one row per commit, and a send's reservation and the event of the
// send before it share their index pages. Each caller still hears of its write only after the
// commit that holds it.
//
// While another process holds the write lock, the batch is tried again on the next turns
// rather than sleeping in SQLite's busy handler, which would stop this whole process; what
// arrives meanwhile joins the same transaction.
import { unavailable } from '../../../lib/errors.ts';
import { BUSY_TIMEOUT_MS, isBusy, withoutBusyWait, type Db } from './db.ts';

/** A batch gives up when another process has held the write lock this long, as other writes do. */
const LOCK_WAIT_MS = BUSY_TIMEOUT_MS;
/**
 * For this long, retry on the very next turn of the event loop: another process's commit holds
 * the lock for about a millisecond, and each turn serves requests meanwhile. Waiting on a 1 ms
 * timer at once instead cost two workers about a quarter of their throughput. Then every ms.
 */
const SPIN_MS = 10;

interface Pending {
  work: () => unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
  done?: { ok: true; value: unknown } | { ok: false; error: unknown };
}

export class GroupCommit {
  private queue: Pending[] = [];
  /** While another process holds the write lock: when this batch started waiting. */
  private waitingSince: number | null = null;
  private readonly batch: (items: Pending[]) => void;
  /** Counts the transactions begun: a writer keeping state for one transaction checks it. */
  transaction = 0;

  constructor(db: Db) {
    // A write almost never fails, so a batch first runs them plainly; if one throws, the batch is
    // rolled back and run again with each write in its own savepoint. So a write must be one that
    // can run twice (statements only, no effect outside the transaction).
    const plain = db.transaction((items: Pending[]) => {
      this.transaction++;
      for (const item of items) item.done = { ok: true, value: item.work() };
    });
    const one = db.transaction((work: () => unknown) => work());
    const careful = db.transaction((items: Pending[]) => {
      this.transaction++;
      for (const item of items) {
        try {
          item.done = { ok: true, value: one(item.work) };
        } catch (error) {
          // A lock lost to another process is the whole batch's: it is tried again.
          if (isBusy(error)) throw error;
          item.done = { ok: false, error };
        }
      }
    });
    this.batch = (items) =>
      withoutBusyWait(db, () => {
        try {
          plain.immediate(items);
        } catch (err) {
          if (isBusy(err)) throw err;
          for (const item of items) delete item.done;
          careful.immediate(items);
        }
      });
  }

  /**
   * Runs `work` (synchronous statements, safe to run twice) in the next group transaction;
   * resolves with what it returned once committed, or rejects with what it threw.
   */
  run<T>(work: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.queue.length === 0) setImmediate(this.flush);
      this.queue.push({ work, resolve: resolve, reject });
    });
  }

  private readonly flush = (): void => {
    const items = this.queue;
    this.queue = [];
    try {
      this.batch(items);
    } catch (err) {
      for (const item of items) delete item.done;
      const waited = isBusy(err) ? performance.now() - (this.waitingSince ??= performance.now()) : Infinity;
      if (waited < LOCK_WAIT_MS) {
        this.queue = items.concat(this.queue);
        if (waited < SPIN_MS) setImmediate(this.flush);
        else setTimeout(this.flush, 1);
        return;
      }
      // The batch itself failed (locked past LOCK_WAIT_MS, disk full): nothing of it committed.
      this.waitingSince = null;
      const failure = isBusy(err) ? unavailable('the store stayed locked by another process; try again') : err;
      for (const item of items) item.reject(failure);
      return;
    }
    this.waitingSince = null;
    for (const item of items) {
      const done = item.done!;
      if (done.ok) item.resolve(done.value);
      else item.reject(done.error);
    }
  };
}

const perDb = new WeakMap<Db, GroupCommit>();

/** The connection's one group committer: every store on it shares its transactions. */
export function groupCommitOf(db: Db): GroupCommit {
  let gc = perDb.get(db);
  if (!gc) {
    gc = new GroupCommit(db);
    perDb.set(db, gc);
  }
  return gc;
}
