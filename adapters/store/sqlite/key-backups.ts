// KeyBackupStore on SQLite.
import type { KeyBackup, KeyBackupStore } from '../../../lib/crypto/ports.ts';
import type { Db } from './db.ts';

export class SqliteKeyBackupStore implements KeyBackupStore {
  private readonly q;

  constructor(db: Db) {
    this.q = {
      get: db.prepare('SELECT blob, version, updated_at AS updatedAt FROM member_key_blobs WHERE member_id = ?'),
      insert: db.prepare(
        'INSERT INTO member_key_blobs (member_id, blob, version, updated_at) VALUES (?, ?, 1, ?) ON CONFLICT (member_id) DO NOTHING',
      ),
      update: db.prepare('UPDATE member_key_blobs SET blob = ?, version = version + 1, updated_at = ? WHERE member_id = ? AND version = ?'),
    };
  }

  async get(memberId: string): Promise<KeyBackup | null> {
    return (this.q.get.get(memberId) as KeyBackup | undefined) ?? null;
  }

  async put(memberId: string, blob: string, replaces: number, at: number): Promise<number | null> {
    const changed =
      replaces === 0 ? this.q.insert.run(memberId, blob, at).changes : this.q.update.run(blob, at, memberId, replaces).changes;
    return changed > 0 ? replaces + 1 : null;
  }
}
