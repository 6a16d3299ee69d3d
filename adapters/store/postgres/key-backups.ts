// KeyBackupStore on PostgreSQL: the statements of adapters/store/sqlite/key-backups.ts. The version
// check is in the UPDATE's WHERE, so of two devices writing over the same version one wins.
import type { Pool } from 'pg';
import type { KeyBackup, KeyBackupStore } from '../../../lib/crypto/ports.ts';
import { changed, rowOf, statements } from './sql.ts';

const stmt = statements('keyBackups');

const S = {
  get: stmt('get', 'SELECT blob, version, updated_at AS "updatedAt" FROM member_key_blobs WHERE member_id = $1'),
  insert: stmt(
    'insert',
    'INSERT INTO member_key_blobs (member_id, blob, version, updated_at) VALUES ($1, $2, 1, $3) ON CONFLICT (member_id) DO NOTHING',
  ),
  update: stmt(
    'update',
    'UPDATE member_key_blobs SET blob = $1, version = version + 1, updated_at = $2 WHERE member_id = $3 AND version = $4',
  ),
};

export class PgKeyBackupStore implements KeyBackupStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async get(memberId: string): Promise<KeyBackup | null> {
    return rowOf<KeyBackup>(this.pool, S.get([memberId]));
  }

  async put(memberId: string, blob: string, replaces: number, at: number): Promise<number | null> {
    const n =
      replaces === 0
        ? await changed(this.pool, S.insert([memberId, blob, at]))
        : await changed(this.pool, S.update([blob, at, memberId, replaces]));
    return n > 0 ? replaces + 1 : null;
  }
}
