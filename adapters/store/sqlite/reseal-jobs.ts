// ResealJobs on SQLite (lib/mail/resealing.ts). What is left to seal is read from the index (the
// messages whose `sealed` is not 1, at their places); a job row exists once a process has worked
// on a place, and its conditional upsert decides between processes.
import type { ResealJobs, ResealLocation, SealingStatus } from '../../../lib/mail/resealing.ts';
import type { Db } from './db.ts';

interface ResealLocationRow {
  label_guid: string;
  uid_validity: number;
  uid: number;
  msg_guid: string;
}

export class SqliteResealJobs implements ResealJobs {
  private readonly q;

  constructor(db: Db) {
    // From the partial index on unsealed messages (an inbox all sealed costs nothing to sweep),
    // and no ORDER BY: the scan stops at the limit, whatever the number left.
    const key = 'inbox_id = @inboxId AND label_guid = @labelGuid AND uid_validity = @uidValidity AND uid = @uid';
    this.q = {
      due: db.prepare(`SELECT l.label_guid, lb.uid_validity, l.uid, l.msg_guid
        FROM mail_messages m INDEXED BY mail_messages_unsealed
        CROSS JOIN mail_locations l ON l.inbox_id = m.inbox_id AND l.msg_guid = m.guid
        JOIN mail_labels lb ON lb.inbox_id = l.inbox_id AND lb.guid = l.label_guid
        LEFT JOIN reseal_jobs j ON j.inbox_id = l.inbox_id AND j.label_guid = l.label_guid AND j.uid_validity = lb.uid_validity AND j.uid = l.uid
        WHERE m.inbox_id = @inboxId AND m.sealed IS NOT 1
          AND (j.inbox_id IS NULL OR (j.done_at IS NULL AND j.next_at <= @now AND (j.lease_until <= @now OR j.holder = @holder)))
        LIMIT @limit`),
      // Free, lapsed or already ours, not done, not backing off: taken, and one attempt more.
      claim: db.prepare(`INSERT INTO reseal_jobs (inbox_id, label_guid, uid_validity, uid, holder, lease_until, attempts)
        VALUES (@inboxId, @labelGuid, @uidValidity, @uid, @holder, @until, 1)
        ON CONFLICT (inbox_id, label_guid, uid_validity, uid) DO UPDATE SET holder = excluded.holder, lease_until = excluded.lease_until, attempts = attempts + 1
        WHERE done_at IS NULL AND next_at <= @now AND (lease_until <= @now OR holder = excluded.holder)
        RETURNING attempts`),
      renew: db.prepare(`UPDATE reseal_jobs SET lease_until = @until WHERE ${key} AND holder = @holder AND done_at IS NULL`),
      done: db.prepare(
        `UPDATE reseal_jobs SET done_at = @now, holder = NULL, lease_until = 0, last_error = NULL WHERE ${key} AND holder = @holder`,
      ),
      failed: db.prepare(
        `UPDATE reseal_jobs SET holder = NULL, lease_until = 0, next_at = @retryAt, last_error = @error WHERE ${key} AND holder = @holder`,
      ),
      markSealed: db.prepare('UPDATE mail_messages SET sealed = 1 WHERE inbox_id = ? AND guid = ?'),
      prune: db.prepare('DELETE FROM reseal_jobs WHERE done_at IS NOT NULL AND done_at < ?'),
      unsealed: db
        .prepare('SELECT count(*) FROM mail_messages INDEXED BY mail_messages_unsealed WHERE inbox_id = ? AND sealed IS NOT 1')
        .pluck(),
      unsealedIn: db
        .prepare(
          'SELECT count(*) FROM mail_messages INDEXED BY mail_messages_unsealed WHERE inbox_id IN (SELECT value FROM json_each(?)) AND sealed IS NOT 1',
        )
        .pluck(),
      retrying: db.prepare(
        'SELECT count(*) AS n, max(last_error) AS lastError FROM reseal_jobs WHERE inbox_id = ? AND done_at IS NULL AND last_error IS NOT NULL',
      ),
    };
  }

  async due(inboxId: string, holder: string, now: number, limit: number): Promise<ResealLocation[]> {
    const rows = this.q.due.all({ inboxId, holder, now, limit }) as ResealLocationRow[];
    return rows.map((r) => ({ labelGuid: r.label_guid, uidValidity: r.uid_validity, uid: r.uid, msgGuid: r.msg_guid }));
  }

  async claim(inboxId: string, p: ResealLocation, holder: string, now: number, leaseMs: number): Promise<number | null> {
    const row = this.q.claim.get({
      inboxId,
      labelGuid: p.labelGuid,
      uidValidity: p.uidValidity,
      uid: p.uid,
      holder,
      until: now + leaseMs,
      now,
    }) as { attempts: number } | undefined;
    return row ? row.attempts : null;
  }

  async renew(inboxId: string, p: ResealLocation, holder: string, until: number): Promise<boolean> {
    return this.q.renew.run({ inboxId, labelGuid: p.labelGuid, uidValidity: p.uidValidity, uid: p.uid, holder, until }).changes === 1;
  }

  async done(inboxId: string, p: ResealLocation, holder: string, now: number): Promise<void> {
    this.q.done.run({ inboxId, labelGuid: p.labelGuid, uidValidity: p.uidValidity, uid: p.uid, holder, now });
  }

  async failed(inboxId: string, p: ResealLocation, holder: string, retryAt: number, error: string): Promise<void> {
    this.q.failed.run({
      inboxId,
      labelGuid: p.labelGuid,
      uidValidity: p.uidValidity,
      uid: p.uid,
      holder,
      retryAt,
      error: error.slice(0, 500),
    });
  }

  async markSealed(inboxId: string, msgGuid: string): Promise<void> {
    this.q.markSealed.run(inboxId, msgGuid);
  }

  async prune(before: number): Promise<void> {
    this.q.prune.run(before);
  }

  async unsealedCount(inboxIds: readonly string[]): Promise<number> {
    if (inboxIds.length === 0) return 0;
    return this.q.unsealedIn.get(JSON.stringify(inboxIds)) as number;
  }

  async status(inboxId: string): Promise<SealingStatus> {
    const r = this.q.retrying.get(inboxId) as { n: number; lastError: string | null };
    return { unsealed: this.q.unsealed.get(inboxId) as number, retrying: r.n, lastError: r.lastError };
  }
}
