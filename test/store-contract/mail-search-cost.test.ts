// What one inbox's search costs, whatever other inboxes hold (docs/search.md, "What a search may
// cost"): beside a large other tenant, the text condition the store asks its text index finds
// nothing outside the caller's inbox (the index itself is grouped by inbox), PostgreSQL's plan
// reads no more rows than the caller has, and a search over its time budget is stopped with an
// `unavailable` error, never a 500. Engine-level: each engine's statement is looked at directly.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteMailIndex, searchSql } from '../../adapters/store/sqlite/mail-index.ts';
import { SearchWorkers } from '../../adapters/store/sqlite/search-workers.ts';
import { PgMailIndex, searchStatement } from '../../adapters/store/postgres/mail-index.ts';
import { isDomainError } from '../../lib/errors.ts';
import { newId } from '../../lib/ids.ts';
import { indexSearch, type SearchQuery } from '../../lib/mail/search.ts';
import type { IndexOp, MessageRecord } from '../../lib/mail/types.ts';
import type { MailIndexStore } from '../../lib/mail/ports.ts';
import { freshDatabase, type FreshDatabase } from './postgres.ts';

const guid = () => randomBytes(16).toString('hex');
/** The other tenant's messages: every one has words starting with each letter a caller may type. */
const OTHERS = 3000;
const WORDS = 'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike';

function message(i: number, subject: string): MessageRecord {
  return {
    guid: guid(),
    size: 1000,
    receivedAt: 1_700_000_000_000 + i,
    date: null,
    from: `Sender ${i} <s${i}@alpha.test>`,
    to: 'all@bravo.test',
    cc: null,
    replyTo: null,
    subject,
    messageId: null,
    inReplyTo: null,
    fromAddress: `s${i}@alpha.test`,
  };
}

/** An inbox of `n` messages written through the port, in batches as a fill writes them. */
async function fill(index: MailIndexStore, n: number, subject: (i: number) => string): Promise<string> {
  const inbox = newId('ibx');
  const label = guid();
  for (let start = 0; start < n; start += 500) {
    const ops: IndexOp[] = [];
    for (let i = start; i < Math.min(n, start + 500); i++) {
      const m = message(i, subject(i));
      ops.push({ op: 'put', message: m, location: { labelGuid: label, uid: i + 1, msgGuid: m.guid, modseq: 1, flags: [] } });
    }
    await index.apply(inbox, ops, {
      guid: label,
      path: 'INBOX',
      specialUse: null,
      uidValidity: 1,
      uidNext: n + 1,
      highestModseq: 1,
      fillLow: null,
    });
  }
  return inbox;
}

/** The worst a caller could ask within the bounds: many short prefixes in every field. */
const WORST: Partial<SearchQuery> = { from: 'al s', to: 'al br', subject: 'al br ch de ec fo go ho in' };
const query = (q: Partial<SearchQuery>) => indexSearch({ limit: 50, ...q });

describe('search cost beside a large other tenant', function () {
  this.timeout(120_000);

  describe('SQLite', () => {
    let dir: string;
    let db: Db;
    let index: SqliteMailIndex;
    let other: string;

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'postern-search-cost-'));
      db = openDb(join(dir, 'postern.db'));
      index = new SqliteMailIndex(db);
      other = await fill(index, OTHERS, (i) => `${WORDS} ${i}`);
    });
    after(() => {
      db?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('a search in a worker finds what the serving connection finds', async () => {
      const workers = new SearchWorkers(join(dir, 'postern.db'));
      try {
        const inWorker = new SqliteMailIndex(db, workers);
        for (const q of [WORST, { subject: 'alpha' }, { subject: 'al 2999' }, {}]) {
          const search = { ...query(q), budgetMs: 10_000 };
          expect(await inWorker.search(other, search, null, 20), JSON.stringify(q)).to.deep.equal(
            await index.search(other, query(q), null, 20),
          );
        }
      } finally {
        await workers.close();
      }
    });

    it('a search over its time budget is stopped: unavailable, with a time to retry, the event loop free meanwhile', async () => {
      const workers = new SearchWorkers(join(dir, 'postern.db'), { size: 1, maxAbandoned: 1 });
      try {
        const inWorker = new SqliteMailIndex(db, workers);
        // The worker held as a native call would hold it: longer than the budget.
        workers.stallMs = 2000;
        let ticks = 0;
        const ticker = setInterval(() => ticks++, 5);
        const started = Date.now();
        const err = await inWorker.search(other, { ...query({ subject: 'alpha bravo' }), budgetMs: 100 }, null, 100).then(
          () => null,
          (e: unknown) => e,
        );
        clearInterval(ticker);
        expect(isDomainError(err) && err.kind, String(err)).to.equal('unavailable');
        expect(isDomainError(err) && err.retryAfterSeconds).to.be.a('number');
        expect(Date.now() - started).to.be.below(1500);
        // The serving thread ran its timers while the worker was held.
        expect(ticks).to.be.above(3);
        // A fresh worker serves the next search (the stuck one was terminated).
        workers.stallMs = 0;
        expect(await inWorker.search(other, { ...query({ subject: 'alpha' }), budgetMs: 10_000 }, null, 5)).to.have.length(5);
      } finally {
        await workers.close();
      }
    });

    it("the caller's MATCH finds nothing in the text index outside the caller's inbox", async () => {
      for (const [name, q] of [
        ['worst', WORST],
        ['one word', { subject: 'alpha' }],
        ['a phrase', { from: 's1@alpha.test' }],
      ] as const) {
        const caller = newId('ibx');
        const { params } = searchSql(caller, query(q), null, 51);
        // Without the inbox condition: what the text index itself reads for this MATCH.
        const found = db.prepare('SELECT count(*) FROM mail_search WHERE mail_search MATCH ?').pluck().get(params.match) as number;
        expect(found, name).to.equal(0);
        expect(await index.search(caller, query(q), null, 51), name).to.deep.equal([]);
      }
      // The other tenant still finds its own.
      expect(await index.search(other, query({ subject: 'alpha' }), null, 10)).to.have.length(10);
      expect(await index.search(other, query({ subject: 'al 2999' }), null, 10)).to.have.length(1);
    });
  });

  describe('PostgreSQL', () => {
    let fresh: FreshDatabase;
    let index: PgMailIndex;
    let other: string;
    let caller: string;
    const CALLER = 40;

    before(async () => {
      fresh = await freshDatabase(4);
      index = new PgMailIndex(fresh.pool);
      other = await fill(index, OTHERS, (i) => `${WORDS} ${i}`);
      // A caller with a few messages of its own, none with the other tenant's words.
      caller = await fill(index, CALLER, (i) => `zulu ${i}`);
      await fresh.pool.query('ANALYZE mail_messages');
    });
    after(async () => {
      await fresh?.drop();
    });

    it("the caller's tsquery finds nothing in the text index outside the caller's inbox", async () => {
      for (const [name, q] of [
        ['worst', WORST],
        ['one word', { subject: 'alpha' }],
        ['a phrase', { from: 's1@alpha.test' }],
      ] as const) {
        const empty = newId('ibx');
        const { values } = searchStatement(empty, query(q), null, 51);
        const { rows } = await fresh.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM mail_messages WHERE search @@ $1::tsquery', [
          values[1],
        ]);
        expect(rows[0]!.n, name).to.equal(0);
        expect(await index.search(empty, query(q), null, 51), name).to.deep.equal([]);
      }
      expect(await index.search(other, query({ subject: 'alpha' }), null, 10)).to.have.length(10);
    });

    it("whatever plan it takes, the caller's search reads no more rows than the caller's inbox holds", async () => {
      type Plan = {
        'Node Type': string;
        'Relation Name'?: string;
        'Index Name'?: string;
        'Actual Rows': number;
        'Actual Loops': number;
        'Rows Removed by Filter'?: number;
        'Rows Removed by Index Recheck'?: number;
        Plans?: Plan[];
      };
      const nodes = (p: Plan): Plan[] => [p, ...(p.Plans ?? []).flatMap(nodes)];
      // The planner's own choice, then with each of its index paths taken away in turn.
      for (const settings of [[], ['enable_bitmapscan'], ['enable_indexscan', 'enable_indexonlyscan']]) {
        const { text, values } = searchStatement(caller, query({ subject: 'al' }), null, 51);
        const c = await fresh.pool.connect();
        try {
          await c.query('BEGIN');
          for (const s of settings) await c.query(`SET LOCAL ${s} = off`);
          const { rows } = await c.query<{ 'QUERY PLAN': Array<{ Plan: Plan }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${text}`, values);
          await c.query('ROLLBACK');
          for (const n of nodes(rows[0]!['QUERY PLAN'][0]!.Plan)) {
            if (n['Relation Name'] !== 'mail_messages' && !n['Index Name']?.startsWith('mail_messages')) continue;
            const read =
              n['Actual Rows'] * n['Actual Loops'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0);
            expect(read, `${settings.join(',') || 'planner'}: ${n['Node Type']} ${n['Index Name'] ?? n['Relation Name']}`).to.be.at.most(
              CALLER,
            );
          }
        } finally {
          c.release();
        }
      }
    });

    it('a search over its time budget is stopped: unavailable, with a time to retry', async () => {
      // The other tenant's broadest search, given a millisecond: it cannot finish in it.
      const err = await index.search(other, { ...query({ subject: 'alpha bravo' }), budgetMs: 1 }, null, 100).then(
        () => null,
        (e: unknown) => e,
      );
      expect(isDomainError(err) && err.kind, String(err)).to.equal('unavailable');
      expect(isDomainError(err) && err.retryAfterSeconds).to.be.a('number');
      // The budget held for that statement only: the pool's connections keep their own timeout.
      const { rows } = await fresh.pool.query<{ statement_timeout: string }>('SHOW statement_timeout');
      expect(rows[0]!.statement_timeout).to.equal('30s');
      expect(await index.search(other, { ...query({ subject: 'alpha' }), budgetMs: 10_000 }, null, 5)).to.have.length(5);
    });
  });
});
