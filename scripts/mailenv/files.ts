// Files shared between processes: atomic replacement, and a lock file.
import { randomBytes } from 'node:crypto';
import { closeSync, openSync, writeSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { isAlive } from './processes.ts';
import { errCode, sleep } from './util.ts';

/** Writes a file atomically (temp file + rename); returns whether the content changed. */
export async function writeAtomic(
  file: string,
  content: string | Buffer,
  mode: number,
  owner?: { uid: number; gid: number },
): Promise<boolean> {
  const current = await fs.readFile(file).catch(() => null);
  const next = typeof content === 'string' ? Buffer.from(content) : content;
  if (current && current.equals(next)) {
    await fs.chmod(file, mode);
    if (owner) await fs.chown(file, owner.uid, owner.gid);
    return false;
  }
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await fs.writeFile(tmp, next, { mode, flag: 'wx' });
    await fs.chmod(tmp, mode); // the umask may have narrowed it
    if (owner) await fs.chown(tmp, owner.uid, owner.gid);
    await fs.rename(tmp, file);
  } catch (e) {
    await fs.rm(tmp, { force: true });
    throw e;
  }
  return true;
}

/**
 * A lock file created with O_EXCL naming its holder's pid, shared by processes. A holder that
 * died leaves it behind; it is taken over once that pid is gone.
 */
export async function withLock<T>(lockFile: string, timeoutMs: number, fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const fd = openSync(lockFile, 'wx', 0o600);
      try {
        writeSync(fd, `${process.pid}\n`);
      } finally {
        closeSync(fd);
      }
      break;
    } catch (e) {
      if (errCode(e) !== 'EEXIST') throw e;
    }
    const holder = Number.parseInt((await fs.readFile(lockFile, 'utf8').catch(() => '')).trim(), 10);
    const age = await fs.stat(lockFile).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    // An empty file younger than a second is a holder between open and write.
    const stale = Number.isInteger(holder) ? !isAlive(holder) : age > 1000;
    if (stale) {
      // Rename first so that two waiters cannot both delete a lock a third just took.
      const moved = `${lockFile}.stale.${process.pid}.${randomBytes(4).toString('hex')}`;
      try {
        await fs.rename(lockFile, moved);
        const movedHolder = Number.parseInt((await fs.readFile(moved, 'utf8').catch(() => '')).trim(), 10);
        if (Number.isInteger(movedHolder) && isAlive(movedHolder)) await fs.link(moved, lockFile).catch(() => undefined);
        await fs.rm(moved, { force: true });
      } catch (e) {
        if (errCode(e) !== 'ENOENT') throw e;
      }
      continue;
    }
    if (Date.now() > deadline) throw new Error(`mailenv: timed out waiting for ${lockFile} (held by pid ${holder})`);
    await sleep(25 + Math.random() * 50);
  }
  try {
    return await fn();
  } finally {
    await fs.rm(lockFile, { force: true });
  }
}
