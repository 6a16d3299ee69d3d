// The SQLite event store's group commit: appends of one turn share a transaction, a bad one fails
// alone, and while another process holds the write lock the appends wait without stopping this
// process's event loop.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteEventStore } from '../../adapters/store/sqlite/events.ts';
import { formatSequence, type AppendRequest } from '../../lib/events/ports.ts';
import { newId } from '../../lib/ids.ts';
import { minimalDomain, sqlitePorts } from '../helpers/minimal-domain.ts';

let PROJECT = '';

function request(build: AppendRequest['build'] = ({ sequence, time }) => JSON.stringify({ sequence, time })): AppendRequest {
  return {
    eventId: newId('evt'),
    projectId: PROJECT,
    inboxId: null,
    type: 'ext.test.happened',
    visibility: 'project',
    stream: PROJECT,
    now: Date.now(),
    build,
  };
}

describe('event store: group commit', () => {
  let dir: string;
  let dbs: Db[] = [];
  const open = () => {
    const db = openDb(join(dir, 'events.db'));
    dbs.push(db);
    return db;
  };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'postern-store-'));
    dbs = [];
    const db = open();
    PROJECT = (await minimalDomain(sqlitePorts(db)).admin.createProject('store test')).id;
  });
  afterEach(() => {
    for (const db of dbs) db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('appends of one turn share a transaction; one that throws fails alone, the others keep gap-free sequences', async () => {
    const store = new SqliteEventStore(open());
    const results = await Promise.allSettled([
      store.append(request()),
      store.append(
        request(() => {
          throw new Error('bad event');
        }),
      ),
      store.append(request()),
    ]);
    expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'fulfilled']);
    const [first, , third] = results.map((r) => (r.status === 'fulfilled' && r.value.kind === 'appended' ? r.value.event : null));
    expect(third!.position).to.equal(first!.position + 1);
    expect([first, third].map((e) => (JSON.parse(e!.json) as { sequence: string }).sequence)).to.deep.equal([
      formatSequence(1),
      formatSequence(2),
    ]);
    expect((await store.readAll(0, 10)).map((e) => e.eventId)).to.deep.equal([first!.eventId, third!.eventId]);
  });

  it("waits for another process's write lock on the event loop, then commits", async () => {
    const store = new SqliteEventStore(open());
    const other = open(); // stands in for another Postern process on the same file
    other.exec('BEGIN IMMEDIATE');
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    try {
      const appended = store.append(request());
      // Many turns of the event loop: the append has tried (on the first) and met the lock.
      while (ticks < 10) await new Promise((r) => setTimeout(r, 5));
      // The append is still waiting, and this process kept running meanwhile.
      expect(await Promise.race([appended.then(() => 'done'), Promise.resolve('waiting')])).to.equal('waiting');
      expect(ticks).to.be.greaterThan(5);
      other.exec('COMMIT');
      const result = await appended;
      expect(result.kind).to.equal('appended');
    } finally {
      clearInterval(timer);
    }
  });

  it('gives up with a 503 when the lock is held past the wait', async function () {
    this.timeout(15_000);
    const store = new SqliteEventStore(open());
    const other = open();
    other.exec('BEGIN IMMEDIATE');
    try {
      const started = Date.now();
      const err = await store.append(request()).then(
        () => null,
        (e: unknown) => e as { kind?: string; message?: string },
      );
      expect(err?.kind).to.equal('unavailable');
      expect(err?.message).to.match(/locked/);
      expect(Date.now() - started).to.be.within(4500, 8000);
    } finally {
      other.exec('ROLLBACK');
    }
  });
});
