// WAL checkpoints off the serving thread (adapters/store/sqlite/checkpointer.ts): the serving
// connection's commits never checkpoint, the worker's do, and the WAL stays bounded.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { WalCheckpointer, WAL_SIZE_LIMIT_BYTES } from '../../adapters/store/sqlite/checkpointer.ts';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { ROOT } from '../../lib/paths.ts';

const PAGE = 4096;
const walBytes = (file: string) => statSync(`${file}-wal`, { throwIfNoEntry: false })?.size ?? 0;

describe('WAL checkpointer', () => {
  let dir: string;
  let file: string;
  let db: Db;
  let checkpointer: WalCheckpointer | null;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-wal-'));
    file = join(dir, 'postern.db');
    db = openDb(file);
    db.exec('CREATE TABLE blobs (id INTEGER PRIMARY KEY, bytes BLOB NOT NULL)');
    checkpointer = null;
  });
  afterEach(async () => {
    await checkpointer?.stop();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** `count` commits of 16 KB each (4 pages and more per commit). */
  const write = (count: number) => {
    const insert = db.prepare('INSERT INTO blobs (bytes) VALUES (?)');
    for (let i = 0; i < count; i++) insert.run(Buffer.alloc(16 * 1024, i));
  };

  it('without it, a commit past 1000 pages checkpoints (what the serving thread no longer pays for)', () => {
    write(400);
    // SQLite's autocheckpoint copied the WAL and started it over: well under what was written.
    expect(walBytes(file)).to.be.below(1200 * PAGE);
  });

  it('the serving connection never checkpoints; the worker does, and the WAL starts over', async () => {
    checkpointer = new WalCheckpointer(db, file, { intervalMs: 3_600_000 });
    expect(db.pragma('wal_autocheckpoint', { simple: true })).to.equal(0);
    write(400);
    const grown = walBytes(file);
    expect(grown).to.be.above(1600 * PAGE);
    const done = await checkpointer.checkpoint();
    expect(done.log).to.be.above(1600);
    expect(done.checkpointed).to.equal(done.log);
    // The next commit writes from the top of the WAL again: it grows no further.
    write(10);
    expect(walBytes(file)).to.equal(grown);
    const again = await checkpointer.checkpoint();
    expect(again.log).to.be.below(100);
    expect(db.prepare('SELECT count(*) FROM blobs').pluck().get()).to.equal(410);
  });

  it('runs on its own timer, and truncates a WAL over the limit when it starts over', async function () {
    this.timeout(60_000);
    checkpointer = new WalCheckpointer(db, file, { intervalMs: 50 });
    // Past the size limit in one transaction, so no checkpoint can come between.
    const insert = db.prepare('INSERT INTO blobs (bytes) VALUES (?)');
    db.transaction(() => {
      for (let i = 0; i < (WAL_SIZE_LIMIT_BYTES / (256 * 1024)) * 1.25; i++) insert.run(Buffer.alloc(256 * 1024, i));
    })();
    expect(walBytes(file)).to.be.above(WAL_SIZE_LIMIT_BYTES);
    // Commits until the timer's checkpoint has let one start the WAL over, truncated.
    const until = Date.now() + 30_000;
    while (walBytes(file) > WAL_SIZE_LIMIT_BYTES && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 20));
      write(1);
    }
    expect(walBytes(file)).to.be.at.most(WAL_SIZE_LIMIT_BYTES);
  });

  it('gives the checkpoints back to the serving connection when stopped', async () => {
    checkpointer = new WalCheckpointer(db, file, { intervalMs: 3_600_000 });
    await checkpointer.stop();
    expect(db.pragma('wal_autocheckpoint', { simple: true })).to.equal(1000);
    write(400);
    expect(walBytes(file)).to.be.below(1200 * PAGE);
  });
  it('stopping it keeps the process alive until the worker is done, when nothing else does', async () => {
    // What `postern serve` meets on SIGTERM: everything else closed, the worker's stop awaited
    // last. An unreferenced worker left the event loop empty, and the process exited at once
    // (code 13, an unsettled top-level await) without its last checkpoint.
    const script = `
      import { openDb } from './adapters/store/sqlite/db.ts';
      import { WalCheckpointer } from './adapters/store/sqlite/checkpointer.ts';
      const db = openDb(${JSON.stringify(join(dir, 'alone.db'))});
      const checkpointer = new WalCheckpointer(db, ${JSON.stringify(join(dir, 'alone.db'))});
      await checkpointer.stop();
      db.close();
      console.log('stopped');
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT });
    expect(stdout.trim()).to.equal('stopped');
  });
});
