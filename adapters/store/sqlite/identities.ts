// IdentityStore on SQLite.
import type { Identity, IdentityStore } from '../../../lib/send/ports.ts';
import type { Db } from './db.ts';

const COLUMNS =
  'address, display_name AS displayName, signature_text AS signatureText, signature_html AS signatureHtml, updated_at AS updatedAt';

export class SqliteIdentityStore implements IdentityStore {
  private readonly q;

  constructor(db: Db) {
    this.q = {
      list: db.prepare<[string], Identity>(`SELECT ${COLUMNS} FROM inbox_identities WHERE inbox_id = ? ORDER BY address`),
      put: db.prepare(
        `INSERT INTO inbox_identities (inbox_id, address, display_name, signature_text, signature_html, updated_at)
         VALUES (@inboxId, @address, @displayName, @signatureText, @signatureHtml, @updatedAt)
         ON CONFLICT (inbox_id, address) DO UPDATE SET display_name = excluded.display_name,
           signature_text = excluded.signature_text, signature_html = excluded.signature_html, updated_at = excluded.updated_at`,
      ),
    };
  }

  async list(inboxId: string): Promise<Identity[]> {
    return this.q.list.all(inboxId);
  }

  async put(inboxId: string, identity: Identity & { updatedAt: number }): Promise<void> {
    this.q.put.run({ inboxId, ...identity });
  }
}
