// The SQLite outbox on the connection's group commit (adapters/store/sqlite/group-commit.ts): a
// state change rides in the transaction of the reservations and events of its turn, one write
// that fails fails alone, and each caller hears of its write only once it is committed. And the sending rate's
// count: exact at every edge of its window, whatever the limit.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteOutboxStore } from '../../adapters/store/sqlite/outbox.ts';
import type { OutboxEntry } from '../../lib/send/ports.ts';

const RATE = { since: 0, max: 1000 };

function entry(n: number, now = Date.now()): OutboxEntry {
  return {
    id: `e${n}x`.padEnd(32, '0'),
    inboxId: 'ibx_test',
    projectId: 'prj_test',
    actor: 'tok_test',
    draftId: null,
    fingerprint: null,
    state: 'relaying',
    outcomeUnknown: false,
    settledBy: null,
    mailFrom: 'a@x.test',
    recipients: 1,
    messageId: `<${n}@x.test>`,
    size: 10,
    attempts: 0,
    claims: 0,
    nextAttemptAt: now,
    sendAt: null,
    holdUntil: null,
    failure: null,
    createdAt: now,
  };
}

describe('outbox store: relayed', () => {
  let dir: string;
  let db: Db;
  let other: Database.Database;
  let store: SqliteOutboxStore;
  /** The state as another connection sees it: only what was committed. */
  const committedState = (id: string) => other.prepare('SELECT state FROM mail_outbox WHERE id = ?').pluck().get(id);

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-outbox-'));
    db = openDb(join(dir, 'postern.db'));
    other = new Database(join(dir, 'postern.db'), { readonly: true });
    store = new SqliteOutboxStore(db);
  });
  afterEach(() => {
    other.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('commits on its own, and resolves once committed', async () => {
    await store.reserve(entry(1), [Buffer.from('copy')], RATE);
    const done = store.relayed(entry(1).id, Date.now());
    expect(committedState(entry(1).id)).to.equal('relaying');
    await done;
    expect(committedState(entry(1).id)).to.equal('filing');
  });

  it('rides in a reservation of the same turn: committed with it', async () => {
    await store.reserve(entry(1), [Buffer.from('copy')], RATE);
    let heard = false;
    const done = store.relayed(entry(1).id, Date.now()).then(() => (heard = true));
    await store.reserve(entry(2), [Buffer.from('copy')], RATE);
    // Before the turn's own flush could have run (that is a setImmediate): the reservation's commit held it.
    expect(committedState(entry(1).id)).to.equal('filing');
    await done;
    expect(heard).to.equal(true);
  });

  it('commits with its turn when a reservation of that turn failed: that one fails alone', async () => {
    await store.reserve(entry(1), [Buffer.from('copy')], RATE);
    const done = store.relayed(entry(1).id, Date.now());
    // The same id again: the reservation's insert fails, and only its savepoint rolls back.
    const failed = store.reserve(entry(1), [Buffer.from('copy')], RATE).catch((err: unknown) => err);
    const other = store.reserve(entry(3), [Buffer.from('copy 3')], RATE);
    expect(committedState(entry(1).id)).to.equal('relaying');
    expect(await failed).to.be.instanceOf(Error);
    expect(await other).to.deep.equal({ ok: true });
    await done;
    expect(committedState(entry(1).id)).to.equal('filing');
    expect(committedState(entry(3).id)).to.equal('relaying');
    expect(await store.copy(entry(1).id)).to.deep.equal(Buffer.from('copy'));
  });
});

describe('outbox store: the sending rate', () => {
  let dir: string;
  let db: Db;
  let store: SqliteOutboxStore;
  const HOUR = 3_600_000;
  /** A moment 20 s into a minute, so sends land on either side of a minute's edge. */
  const T = Math.floor(Date.now() / 60_000) * 60_000 + 20_000;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-outbox-'));
    db = openDb(join(dir, 'postern.db'));
    store = new SqliteOutboxStore(db);
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const reserveAt = (n: number, at: number, max: number, now = at) =>
    store.reserve(entry(n, at), [Buffer.from('copy')], { since: now - HOUR, max });

  it('counts exactly the sends of the last hour, to the millisecond, across minute edges', async () => {
    // Sends at -61 min, then 5 in the minute the window will start in (either side of its start), then 5 later.
    const start = T + 90_000 - HOUR; // the window of a send at T + 90 s starts here, mid-minute
    const times = [T - 61 * 60_000, start - 2, start - 1, start, start + 1, start + 2, T, T + 1, T + 60_000, T + 61_000, T + 89_000];
    for (const [i, at] of times.entries()) expect(await reserveAt(i, at, 1000)).to.deep.equal({ ok: true });
    // In the window of T + 90 s: start, start + 1, start + 2 and the 5 after: 8.
    const refused = await reserveAt(100, T + 90_000, 8);
    expect(refused).to.deep.include({ ok: false, reason: 'rate', sent: 8 });
    expect(await reserveAt(101, T + 90_000, 9)).to.deep.equal({ ok: true });
    // One millisecond later the send at `start` has left the window: 8 again, with the one just made.
    expect(await reserveAt(102, T + 90_001, 9)).to.deep.equal({ ok: true });
    expect(await reserveAt(103, T + 90_001, 10)).to.deep.equal({ ok: true });
    expect(await reserveAt(104, T + 90_001, 10)).to.deep.include({ ok: false, reason: 'rate', sent: 10 });
  });

  it('does not count a send that was dropped (the relay never took it)', async () => {
    expect(await reserveAt(1, T, 2)).to.deep.equal({ ok: true });
    expect(await reserveAt(2, T + 1, 2)).to.deep.equal({ ok: true });
    expect(await reserveAt(3, T + 2, 2)).to.deep.include({ ok: false, reason: 'rate', sent: 2 });
    await store.drop(entry(2).id);
    expect(await reserveAt(3, T + 3, 2)).to.deep.equal({ ok: true });
  });

  it("counts another inbox's sends apart", async () => {
    expect(await reserveAt(1, T, 1)).to.deep.equal({ ok: true });
    const other = { ...entry(2, T), inboxId: 'ibx_other' };
    expect(await store.reserve(other, [Buffer.from('copy')], { since: T - HOUR, max: 1 })).to.deep.equal({ ok: true });
  });
});

describe('outbox store: what a process that died left behind', () => {
  let dir: string;
  let db: Db;
  /** Two processes sharing the store: `dead` is made to look gone, `live` recovers. */
  let dead: SqliteOutboxStore;
  let live: SqliteOutboxStore;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-outbox-'));
    db = openDb(join(dir, 'postern.db'));
    dead = new SqliteOutboxStore(db);
    live = new SqliteOutboxStore(db);
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The owner of `id` now names a process that no longer runs (a pid with no /proc entry). */
  const kill = (id: string) =>
    db.prepare('UPDATE mail_outbox_owners SET pid = 2147483646 WHERE id = (SELECT owner FROM mail_outbox WHERE id = ?)').run(id);
  const row = (id: string) =>
    db.prepare('SELECT state, outcome, next_attempt_at AS next FROM mail_outbox WHERE id = ?').get(id) as
      | { state: string; outcome: string | null; next: number }
      | undefined;

  it('drops its sends whose end of data was never written, keeps those that may have as outcome unknown, and takes back its claims at once', async () => {
    const now = Date.now();
    for (const n of [1, 2, 3, 4]) await dead.reserve(entry(n, now), [Buffer.from(`copy ${n}`)], RATE);
    // 1 its end of data never written; 2 its end of data written, reply pending; 3 accepted, its copy claimed for 2 minutes; 4 accepted, due.
    await dead.sending(entry(2).id);
    await dead.relayed(entry(3).id, now);
    await dead.relayed(entry(4).id, now);
    expect(await dead.claim(entry(3).id, now, now + 120_000)).to.equal(true);

    // While it runs, nothing of it is touched.
    expect(await live.recover(now + 1)).to.deep.equal({ dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] });
    expect(row(entry(1).id)?.state).to.equal('relaying');

    kill(entry(1).id);
    expect(await live.recover(now + 2)).to.deep.equal({ dropped: 1, unknown: 1, reclaimed: 1, unknownIds: [entry(2).id] });
    expect(row(entry(1).id)).to.equal(undefined);
    expect(await live.copy(entry(1).id)).to.equal(null);
    // Unknown: its copy kept, not filed until evidence settles it.
    expect(row(entry(2).id)).to.deep.equal({ state: 'unknown', outcome: 'unknown', next: now + 2 });
    expect((await live.get(entry(2).id))?.outcomeUnknown).to.equal(true);
    expect(row(entry(3).id)).to.deep.equal({ state: 'filing', outcome: null, next: now + 2 });
    expect(row(entry(4).id)?.next).to.equal(now);
    // Due now, claimed before (so filed as a retry: looked for in Sent first).
    const due = await live.due(now + 2, 10);
    expect(due.map((e) => e.id)).to.not.include(entry(2).id);
    expect(due.map((e) => [e.id, e.claims])).to.deep.include.members([
      [entry(3).id, 1],
      [entry(4).id, 0],
    ]);
    // The dropped draft-free send no longer counts toward the rate; once settled, nothing more to do.
    expect(await live.recover(now + 3)).to.deep.equal({ dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] });
  });

  it('takes rows from before owners were recorded for outcome unknown', async () => {
    await live.reserve(entry(1), [Buffer.from('copy')], RATE);
    db.prepare('UPDATE mail_outbox SET owner = NULL').run();
    expect(await live.recover(Date.now())).to.deep.include({ unknown: 1 });
    expect(row(entry(1).id)).to.deep.include({ state: 'unknown', outcome: 'unknown' });
  });

  it('answers a lost reply as outcome unknown, and a refusal after the bytes by dropping the send', async () => {
    await live.reserve(entry(1), [Buffer.from('copy')], RATE);
    await live.reserve(entry(2), [Buffer.from('copy')], RATE);
    await live.sending(entry(1).id);
    await live.sending(entry(2).id);
    await live.outcomeUnknown(entry(1).id, 5);
    await live.drop(entry(2).id);
    expect(row(entry(1).id)).to.deep.equal({ state: 'unknown', outcome: 'unknown', next: 5 });
    expect(row(entry(2).id)).to.equal(undefined);
  });
});
