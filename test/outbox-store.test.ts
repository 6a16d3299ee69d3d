// The SQLite outbox's group commit of `relayed` (adapters/store/sqlite/outbox.ts): a state change
// rides in the next reservation's transaction when one comes in the same turn, else commits on
// its own; either way its caller hears of it only once it is committed.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import Database from 'better-sqlite3';
import { openDb, type Db } from '../adapters/store/sqlite/db.ts';
import { SqliteOutboxStore } from '../adapters/store/sqlite/outbox.ts';
import type { OutboxEntry } from '../lib/send/ports.ts';

const RATE = { since: 0, max: 1000 };

function entry(n: number): OutboxEntry {
  const now = Date.now();
  return {
    id: `e${n}`.padEnd(32, '0'),
    inboxId: 'ibx_test',
    projectId: 'prj_test',
    actor: 'tok_test',
    draftId: null,
    fingerprint: null,
    state: 'relaying',
    mailFrom: 'a@x.test',
    recipients: 1,
    messageId: `<${n}@x.test>`,
    size: 10,
    attempts: 0,
    claims: 0,
    nextAttemptAt: now,
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

  it('commits on its own when the reservation that carried it failed', async () => {
    await store.reserve(entry(1), [Buffer.from('copy')], RATE);
    const done = store.relayed(entry(1).id, Date.now());
    // The same id again: the reservation's insert fails, its transaction rolls back.
    const failed = await store.reserve(entry(1), [Buffer.from('copy')], RATE).catch((err: unknown) => err);
    expect(failed).to.be.instanceOf(Error);
    expect(committedState(entry(1).id)).to.equal('relaying');
    await done;
    expect(committedState(entry(1).id)).to.equal('filing');
  });
});
