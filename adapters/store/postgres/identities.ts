// IdentityStore on PostgreSQL: the statements of adapters/store/sqlite/identities.ts.
import type { Pool } from 'pg';
import type { Identity, IdentityStore } from '../../../lib/send/ports.ts';
import { changed, rowsOf, statements } from './sql.ts';

const stmt = statements('identities');

const S = {
  list: stmt(
    'list',
    `SELECT address, display_name AS "displayName", signature_text AS "signatureText", signature_html AS "signatureHtml",
       updated_at AS "updatedAt" FROM inbox_identities WHERE inbox_id = $1 ORDER BY address`,
  ),
  put: stmt(
    'put',
    `INSERT INTO inbox_identities (inbox_id, address, display_name, signature_text, signature_html, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (inbox_id, address) DO UPDATE SET display_name = excluded.display_name,
       signature_text = excluded.signature_text, signature_html = excluded.signature_html, updated_at = excluded.updated_at`,
  ),
};

export class PgIdentityStore implements IdentityStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async list(inboxId: string): Promise<Identity[]> {
    return rowsOf<Identity>(this.pool, S.list([inboxId]));
  }

  async put(inboxId: string, i: Identity & { updatedAt: number }): Promise<void> {
    await changed(this.pool, S.put([inboxId, i.address, i.displayName, i.signatureText, i.signatureHtml, i.updatedAt]));
  }
}
