// ResealJobs on PostgreSQL (lib/mail/resealing.ts), the SQLite adapter's semantics
// (adapters/store/sqlite/reseal-jobs.ts): what is left to seal is read from the index (messages
// whose `sealed` is not true, at their places); a job row exists once a process has worked on a
// place, and its conditional upsert decides between processes. That upsert is one statement: a
// second claimer of the same place waits for the first's row lock, then re-checks the condition
// against the row as the first left it, so a lease has one holder on any number of instances.
import type { Pool } from 'pg';
import type { ResealJobs, ResealLocation, SealingStatus } from '../../../lib/mail/resealing.ts';
import { changed, rowsOf, statements } from './sql.ts';

interface ResealLocationRow {
  label_guid: string;
  uid_validity: number;
  uid: number;
  msg_guid: string;
}

const KEY = 'inbox_id = $1 AND label_guid = $2 AND uid_validity = $3 AND uid = $4';
const stmt = statements('reseal');
const S = {
  // From the partial index on unsealed messages (an inbox all sealed costs nothing to sweep).
  due: stmt(
    'due',
    `SELECT l.label_guid, lb.uid_validity, l.uid, l.msg_guid
     FROM mail_messages m
     JOIN mail_locations l ON l.inbox_id = m.inbox_id AND l.msg_guid = m.guid
     JOIN mail_labels lb ON lb.inbox_id = l.inbox_id AND lb.guid = l.label_guid
     LEFT JOIN reseal_jobs j ON j.inbox_id = l.inbox_id AND j.label_guid = l.label_guid AND j.uid_validity = lb.uid_validity AND j.uid = l.uid
     WHERE m.inbox_id = $1 AND m.sealed IS NOT TRUE
       AND (j.inbox_id IS NULL OR (j.done_at IS NULL AND j.next_at <= $3 AND (j.lease_until <= $3 OR j.holder = $2)))
     LIMIT $4`,
  ),
  // Free, lapsed or already ours, not done, not backing off: taken, and one attempt more.
  claim: stmt(
    'claim',
    `INSERT INTO reseal_jobs (inbox_id, label_guid, uid_validity, uid, holder, lease_until, attempts)
     VALUES ($1, $2, $3, $4, $5, $6, 1)
     ON CONFLICT (inbox_id, label_guid, uid_validity, uid) DO UPDATE
       SET holder = excluded.holder, lease_until = excluded.lease_until, attempts = reseal_jobs.attempts + 1
       WHERE reseal_jobs.done_at IS NULL AND reseal_jobs.next_at <= $7 AND (reseal_jobs.lease_until <= $7 OR reseal_jobs.holder = excluded.holder)
     RETURNING attempts`,
  ),
  renew: stmt('renew', `UPDATE reseal_jobs SET lease_until = $6 WHERE ${KEY} AND holder = $5 AND done_at IS NULL`),
  done: stmt('done', `UPDATE reseal_jobs SET done_at = $6, holder = NULL, lease_until = 0, last_error = NULL WHERE ${KEY} AND holder = $5`),
  failed: stmt(
    'failed',
    `UPDATE reseal_jobs SET holder = NULL, lease_until = 0, next_at = $6, last_error = $7 WHERE ${KEY} AND holder = $5`,
  ),
  markSealed: stmt('markSealed', 'UPDATE mail_messages SET sealed = true WHERE inbox_id = $1 AND guid = $2'),
  prune: stmt('prune', 'DELETE FROM reseal_jobs WHERE done_at IS NOT NULL AND done_at < $1'),
  unsealed: stmt('unsealed', 'SELECT count(*) AS n FROM mail_messages WHERE inbox_id = $1 AND sealed IS NOT TRUE'),
  unsealedIn: stmt('unsealedIn', 'SELECT count(*) AS n FROM mail_messages WHERE inbox_id = ANY($1::text[]) AND sealed IS NOT TRUE'),
  retrying: stmt(
    'retrying',
    'SELECT count(*) AS n, max(last_error) AS last_error FROM reseal_jobs WHERE inbox_id = $1 AND done_at IS NULL AND last_error IS NOT NULL',
  ),
};

const key = (inboxId: string, p: ResealLocation) => [inboxId, p.labelGuid, p.uidValidity, p.uid];

export class PgResealJobs implements ResealJobs {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async due(inboxId: string, holder: string, now: number, limit: number): Promise<ResealLocation[]> {
    const found = await rowsOf<ResealLocationRow>(this.pool, S.due([inboxId, holder, now, limit]));
    return found.map((r) => ({ labelGuid: r.label_guid, uidValidity: r.uid_validity, uid: r.uid, msgGuid: r.msg_guid }));
  }

  async claim(inboxId: string, p: ResealLocation, holder: string, now: number, leaseMs: number): Promise<number | null> {
    const [row] = await rowsOf<{ attempts: number }>(this.pool, S.claim([...key(inboxId, p), holder, now + leaseMs, now]));
    return row ? row.attempts : null;
  }

  async renew(inboxId: string, p: ResealLocation, holder: string, until: number): Promise<boolean> {
    return (await changed(this.pool, S.renew([...key(inboxId, p), holder, until]))) === 1;
  }

  async done(inboxId: string, p: ResealLocation, holder: string, now: number): Promise<void> {
    await this.pool.query(S.done([...key(inboxId, p), holder, now]));
  }

  async failed(inboxId: string, p: ResealLocation, holder: string, retryAt: number, error: string): Promise<void> {
    await this.pool.query(S.failed([...key(inboxId, p), holder, retryAt, error.slice(0, 500)]));
  }

  async markSealed(inboxId: string, msgGuid: string): Promise<void> {
    await this.pool.query(S.markSealed([inboxId, msgGuid]));
  }

  async prune(before: number): Promise<void> {
    await this.pool.query(S.prune([before]));
  }

  async unsealedCount(inboxIds: readonly string[]): Promise<number> {
    if (inboxIds.length === 0) return 0;
    const [row] = await rowsOf<{ n: number }>(this.pool, S.unsealedIn([[...inboxIds]]));
    return row?.n ?? 0;
  }

  async status(inboxId: string): Promise<SealingStatus> {
    const [u] = await rowsOf<{ n: number }>(this.pool, S.unsealed([inboxId]));
    const [r] = await rowsOf<{ n: number; last_error: string | null }>(this.pool, S.retrying([inboxId]));
    return { unsealed: u?.n ?? 0, retrying: r?.n ?? 0, lastError: r?.last_error ?? null };
  }
}
