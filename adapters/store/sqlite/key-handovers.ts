// KeyHandoverStore on SQLite.
import type { KeyHandover, KeyHandoverStore } from '../../../lib/crypto/ports.ts';
import type { Db } from './db.ts';

const COLUMNS = `id, member_id AS memberId, requester_session AS requesterSession, device, requester_key AS requesterKey,
  approver_key AS approverKey, sealed, created_at AS createdAt, expires_at AS expiresAt`;

export class SqliteKeyHandoverStore implements KeyHandoverStore {
  private readonly q;

  constructor(private readonly db: Db) {
    this.q = {
      prune: db.prepare('DELETE FROM key_handovers WHERE expires_at <= ?'),
      count: db.prepare('SELECT count(*) FROM key_handovers WHERE member_id = ?').pluck(),
      insert: db.prepare(
        `INSERT INTO key_handovers (id, member_id, requester_session, device, requester_key, created_at, expires_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
      ),
      get: db.prepare(`SELECT ${COLUMNS} FROM key_handovers WHERE member_id = ? AND id = ? AND expires_at > ?`),
      pending: db.prepare(
        `SELECT ${COLUMNS} FROM key_handovers WHERE member_id = ? AND expires_at > ? AND sealed IS NULL ORDER BY created_at, id`,
      ),
      approve: db.prepare(
        'UPDATE key_handovers SET approver_key = ?, sealed = ? WHERE member_id = ? AND id = ? AND expires_at > ? AND sealed IS NULL',
      ),
      remove: db.prepare('DELETE FROM key_handovers WHERE member_id = ? AND id = ?'),
    };
  }

  async create(h: KeyHandover, now: number, limit: number): Promise<boolean> {
    return this.db
      .transaction(() => {
        this.q.prune.run(now);
        if ((this.q.count.get(h.memberId) as number) >= limit) return false;
        this.q.insert.run(h.id, h.memberId, h.requesterSession, h.device, h.requesterKey, h.createdAt, h.expiresAt);
        return true;
      })
      .immediate();
  }

  async get(memberId: string, id: string, now: number): Promise<KeyHandover | null> {
    return (this.q.get.get(memberId, id, now) as KeyHandover | undefined) ?? null;
  }

  async listPending(memberId: string, now: number): Promise<KeyHandover[]> {
    return this.q.pending.all(memberId, now) as KeyHandover[];
  }

  async approve(memberId: string, id: string, approverKey: string, sealed: string, now: number): Promise<boolean> {
    return this.q.approve.run(approverKey, sealed, memberId, id, now).changes > 0;
  }

  async remove(memberId: string, id: string): Promise<boolean> {
    return this.q.remove.run(memberId, id).changes > 0;
  }
}
