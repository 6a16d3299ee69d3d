// `postern admin backup` on SQLite: a consistent copy of the live file through SQLite's online
// backup API, safe while `postern serve` writes. Copying the file itself would not be: the newest
// commits are in the -wal file, and a copy taken mid-checkpoint is torn.
import { closeSync, existsSync, rmSync, statSync } from 'node:fs';
import Database from 'better-sqlite3';
import { createExclusive, DumpError } from '../rows/dump.ts';
import { BUSY_TIMEOUT_MS } from './db.ts';

/**
 * Copies the store at `file` to `to`, a new file (an existing one is refused, not overwritten),
 * then checks the copy (PRAGMA quick_check). Every page goes in one backup step: a step reads one
 * snapshot, and a copy made in many steps starts over whenever another process commits between
 * two of them, which on a busy server could go on for ever. Under WAL that one step holds a read
 * snapshot only; writers carry on meanwhile.
 */
export async function backupSqlite(file: string, to: string): Promise<{ bytes: number }> {
  if (!existsSync(file)) throw new DumpError(`no SQLite store at ${file} (POSTERN_DB)`, true);
  // Made here, empty (an empty file is an empty database to SQLite), so no other writer can have it.
  closeSync(createExclusive(to));
  const source = new Database(file, { fileMustExist: true });
  try {
    source.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    await source.backup(to, { progress: () => 0x7fffffff });
  } catch (err) {
    rmSync(to, { force: true });
    throw new DumpError(`the backup of ${file} failed: ${(err as Error).message}`);
  } finally {
    source.close();
  }
  const copy = new Database(to, { fileMustExist: true });
  let check: string;
  try {
    check = copy.pragma('quick_check', { simple: true }) as string;
  } finally {
    // Closing the last connection checkpoints the copy into its one file.
    copy.close();
  }
  if (check !== 'ok') {
    rmSync(to, { force: true });
    throw new DumpError(`the copy of ${file} failed its check (${check}); nothing was kept`);
  }
  return { bytes: statSync(to).size };
}
