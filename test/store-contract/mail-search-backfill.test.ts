// Messages indexed before search existed are searchable after the upgrade: SQLite's migration 027
// indexes the rows already there; PostgreSQL fills a row's vector on its inbox's next search.
// And after the text index was grouped by inbox (SQLite's migration 029, PostgreSQL's 013): rows
// from before are put in the new index on their inbox's first search with words.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type pg from 'pg';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { migrations } from '../../adapters/store/sqlite/migrations/index.ts';
import { SqliteMailIndex } from '../../adapters/store/sqlite/mail-index.ts';
import { PgMailIndex } from '../../adapters/store/postgres/mail-index.ts';
import { migratePg, openPgPool, readPgMigrations } from '../../adapters/store/postgres/db.ts';
import { newId } from '../../lib/ids.ts';
import { indexSearch } from '../../lib/mail/search.ts';
import type { MessageRecord } from '../../lib/mail/types.ts';
import { emptyDatabase, freshDatabase } from './postgres.ts';

const guid = () => randomBytes(16).toString('hex');
const SUBJECTS = ['Quarterly numbers', 'Lunch on Friday', 'Réunion trimestrielle'];
const search = (subject: string) => indexSearch({ limit: 10, subject });

/** The three SUBJECTS, put in `label` of `inbox` through the index's own write. */
async function putSubjects(index: PgMailIndex, inbox: string, label: string): Promise<void> {
  const ms: MessageRecord[] = SUBJECTS.map((subject, i) => ({
    guid: guid(),
    size: 100,
    receivedAt: 1000 + i,
    date: null,
    from: 'Old <old@x.test>',
    to: null,
    cc: null,
    replyTo: null,
    subject,
    messageId: null,
    inReplyTo: null,
    fromAddress: 'old@x.test',
  }));
  await index.apply(
    inbox,
    ms.map((m, i) => ({ op: 'put', message: m, location: { labelGuid: label, uid: i + 1, msgGuid: m.guid, modseq: 1, flags: [] } })),
  );
}

/** The messages of SUBJECTS in one label, written as an older version's SQLite store held them. */
function oldRows(db: Db, inbox: string, label: string): void {
  SUBJECTS.forEach((subject, i) => {
    const g = guid();
    db.prepare('INSERT INTO mail_messages (inbox_id, guid, size, received_at, from_text, subject) VALUES (?, ?, 100, ?, ?, ?)').run(
      inbox,
      g,
      1000 + i,
      'Old <old@x.test>',
      subject,
    );
    db.prepare("INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen) VALUES (?, ?, ?, ?, 1, '[]', 0)").run(
      inbox,
      label,
      i + 1,
      g,
    );
  });
}

/**
 * The messages of SUBJECTS in one label, written as a PostgreSQL store before migration 013 held
 * them: in SQL, because today's adapter writes columns later migrations added (015's threads).
 */
async function oldPgRows(pool: pg.Pool, inbox: string, label: string): Promise<void> {
  for (const [i, subject] of SUBJECTS.entries()) {
    const g = guid();
    await pool.query(
      'INSERT INTO mail_messages (inbox_id, guid, size, received_at, from_text, from_address, subject) VALUES ($1, $2, 100, $3, $4, $5, $6)',
      [inbox, g, 1000 + i, 'Old <old@x.test>', 'old@x.test', subject],
    );
    await pool.query(
      "INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen) VALUES ($1, $2, $3, $4, 1, '[]', false)",
      [inbox, label, i + 1, g],
    );
  }
}

describe('search over messages indexed before it', () => {
  it('SQLite: migration 027 puts every row already there in the text index', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'postern-search-upgrade-'));
    const file = join(dir, 'postern.db');
    const inbox = newId('ibx');
    const label = guid();
    try {
      const before = openDb(
        file,
        migrations.filter((m) => m.version < 27),
      );
      oldRows(before, inbox, label);
      before.close();
      const db = openDb(file);
      try {
        const index = new SqliteMailIndex(db);
        expect((await index.search(inbox, search('reunion'), null, 10)).map((r) => r.message.subject)).to.deep.equal([
          'Réunion trimestrielle',
        ]);
        expect(await index.search(inbox, indexSearch({ limit: 10, from: 'old@x' }), null, 10)).to.have.length(3);
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('PostgreSQL: a row without its vector gets it on the first search that needs it', async () => {
    const fresh = await freshDatabase(2);
    try {
      const index = new PgMailIndex(fresh.pool);
      const inbox = newId('ibx');
      const label = guid();
      await putSubjects(index, inbox, label);
      // As migration 006 leaves the rows indexed before it.
      await fresh.pool.query('UPDATE mail_messages SET search = NULL WHERE inbox_id = $1', [inbox]);
      expect((await index.search(inbox, search('reunion'), null, 10)).map((r) => r.message.subject)).to.deep.equal([
        'Réunion trimestrielle',
      ]);
      const { rows } = await fresh.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM mail_messages WHERE inbox_id = $1 AND search IS NULL',
        [inbox],
      );
      expect(rows[0]!.n).to.equal(0);
      expect(await index.search(inbox, indexSearch({ limit: 10, from: 'old@x' }), null, 10)).to.have.length(3);
    } finally {
      await fresh.drop();
    }
  });

  it('SQLite: a store migrated from before migration 029 still finds its messages, each inbox on its first search', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'postern-search-marked-'));
    const file = join(dir, 'postern.db');
    const [inbox, other] = [newId('ibx'), newId('ibx')];
    const label = guid();
    try {
      const before = openDb(
        file,
        migrations.filter((m) => m.version < 29),
      );
      for (const box of [inbox, other]) oldRows(before, box, label);
      before.close();
      const db = openDb(file);
      try {
        const index = new SqliteMailIndex(db);
        const unmarked = (box: string) =>
          db.prepare('SELECT count(*) FROM mail_search_docs WHERE inbox_id = ? AND marked = 0').pluck().get(box);
        expect(unmarked(inbox)).to.equal(3);
        expect((await index.search(inbox, search('reunion'), null, 10)).map((r) => r.message.subject)).to.deep.equal([
          'Réunion trimestrielle',
        ]);
        expect(await index.search(inbox, indexSearch({ limit: 10, from: 'old@x' }), null, 10)).to.have.length(3);
        expect(unmarked(inbox), 'the searched inbox is in the new index').to.equal(0);
        expect(unmarked(other), 'another inbox waits for its own first search').to.equal(3);
        // A message from before, removed before its inbox's first search, leaves nothing behind.
        db.prepare('DELETE FROM mail_messages WHERE inbox_id = ? AND subject = ?').run(other, 'Lunch on Friday');
        expect((await index.search(other, search('quarterly'), null, 10)).map((r) => r.message.subject)).to.deep.equal([
          'Quarterly numbers',
        ]);
        expect(await index.search(other, search('lunch'), null, 10)).to.deep.equal([]);
        expect(unmarked(other)).to.equal(0);
      } finally {
        db.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('PostgreSQL: a database migrated from before migration 013 still finds its messages', async () => {
    const empty = await emptyDatabase();
    const pool = openPgPool(empty.url, { max: 2 });
    try {
      await migratePg(
        pool,
        readPgMigrations().filter((m) => m.version < 13),
      );
      const inbox = newId('ibx');
      const label = guid();
      await oldPgRows(pool, inbox, label);
      await migratePg(pool);
      const after = new PgMailIndex(pool);
      expect((await after.search(inbox, search('reunion'), null, 10)).map((r) => r.message.subject)).to.deep.equal([
        'Réunion trimestrielle',
      ]);
      expect(await after.search(inbox, indexSearch({ limit: 10, from: 'old@x' }), null, 10)).to.have.length(3);
    } finally {
      await pool.end();
      await empty.drop();
    }
  });
});
