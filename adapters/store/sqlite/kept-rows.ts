// Rows every request reads (its token, the grant and the inbox it names), kept by this process
// while the file is unchanged (docs/deployment.md, "One store, two engines"): one check of two counters per
// event-loop turn instead of a query per row. `PRAGMA data_version` moves when another connection
// (another process, `postern admin`) commits; `total_changes()` when this connection writes. A
// turn's check is reused within the turn, so the store's own writes drop what is kept (`drop`):
// a revocation is refused from the next request, as when every row was read from the file.
import type { Statement } from 'better-sqlite3';
import type { Db } from './db.ts';

/** Kept rows at most; past it they are all dropped (a few thousand tokens and grants is the usual). */
const MAX_ROWS = 10_000;

export class KeptRows {
  private readonly check: Statement;
  /** The counters as this turn read them (null: not read yet this turn). */
  private turn: string | null = null;
  /** The counters the kept rows were read under. */
  private keptUnder: string | null = null;
  /** Key → the row as read (undefined: none), never handed out: callers map their own copy. */
  private readonly rows = new Map<string, unknown>();

  constructor(db: Db) {
    this.check = db.prepare('SELECT (SELECT data_version FROM pragma_data_version) AS v, total_changes() AS c');
  }

  /** The row under `key`, from `read` unless kept since the file last changed. */
  get(key: string, read: () => unknown): unknown {
    const now = this.counters();
    if (now !== this.keptUnder) {
      this.rows.clear();
      this.keptUnder = now;
    }
    if (this.rows.has(key)) return this.rows.get(key);
    const row = read();
    if (this.rows.size >= MAX_ROWS) this.rows.clear();
    this.rows.set(key, row);
    return row;
  }

  /** This connection changed what may be kept: nothing kept is served again. */
  drop(): void {
    this.rows.clear();
    this.keptUnder = null;
    this.turn = null;
  }

  private counters(): string {
    if (this.turn === null) {
      const { v, c } = this.check.get() as { v: number; c: number };
      this.turn = `${v} ${c}`;
      setImmediate(() => (this.turn = null)).unref();
    }
    return this.turn;
  }
}
