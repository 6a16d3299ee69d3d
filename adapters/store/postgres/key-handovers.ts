// KeyHandoverStore on PostgreSQL: the statements of adapters/store/sqlite/key-handovers.ts. A
// create locks its member's row, so two creates for one member count in turn (SQLite's immediate
// transaction); other members' creates are not held up.
import type { Pool } from 'pg';
import type { KeyHandover, KeyHandoverStore } from '../../../lib/crypto/ports.ts';
import { changed, inTransaction, rowOf, rowsOf, statements } from './sql.ts';

const stmt = statements('keyHandovers');

const COLUMNS = `id, member_id AS "memberId", requester_session AS "requesterSession", device, requester_key AS "requesterKey",
  approver_key AS "approverKey", sealed, created_at AS "createdAt", expires_at AS "expiresAt"`;

const S = {
  lockMember: stmt('lockMember', 'SELECT id FROM members WHERE id = $1 FOR UPDATE'),
  prune: stmt('prune', 'DELETE FROM key_handovers WHERE expires_at <= $1'),
  count: stmt('count', 'SELECT count(*)::int AS n FROM key_handovers WHERE member_id = $1'),
  insert: stmt(
    'insert',
    `INSERT INTO key_handovers (id, member_id, requester_session, device, requester_key, created_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7)`,
  ),
  get: stmt('get', `SELECT ${COLUMNS} FROM key_handovers WHERE member_id = $1 AND id = $2 AND expires_at > $3`),
  pending: stmt(
    'pending',
    `SELECT ${COLUMNS} FROM key_handovers WHERE member_id = $1 AND expires_at > $2 AND sealed IS NULL ORDER BY created_at, id`,
  ),
  approve: stmt(
    'approve',
    'UPDATE key_handovers SET approver_key = $1, sealed = $2 WHERE member_id = $3 AND id = $4 AND expires_at > $5 AND sealed IS NULL',
  ),
  remove: stmt('remove', 'DELETE FROM key_handovers WHERE member_id = $1 AND id = $2'),
};

export class PgKeyHandoverStore implements KeyHandoverStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async create(h: KeyHandover, now: number, limit: number): Promise<boolean> {
    return inTransaction(this.pool, async (c) => {
      await c.query(S.lockMember([h.memberId]));
      await c.query(S.prune([now]));
      if ((await rowOf<{ n: number }>(c, S.count([h.memberId])))!.n >= limit) return false;
      await c.query(S.insert([h.id, h.memberId, h.requesterSession, h.device, h.requesterKey, h.createdAt, h.expiresAt]));
      return true;
    });
  }

  async get(memberId: string, id: string, now: number): Promise<KeyHandover | null> {
    return rowOf<KeyHandover>(this.pool, S.get([memberId, id, now]));
  }

  async listPending(memberId: string, now: number): Promise<KeyHandover[]> {
    return rowsOf<KeyHandover>(this.pool, S.pending([memberId, now]));
  }

  async approve(memberId: string, id: string, approverKey: string, sealed: string, now: number): Promise<boolean> {
    return (await changed(this.pool, S.approve([approverKey, sealed, memberId, id, now]))) > 0;
  }

  async remove(memberId: string, id: string): Promise<boolean> {
    return (await changed(this.pool, S.remove([memberId, id]))) > 0;
  }
}
