// WebhookStore on PostgreSQL: the statements of adapters/store/sqlite/webhooks.ts.
import type { Pool } from 'pg';
import type { WebhookEndpointChange, WebhookEndpointRecord, WebhookStore } from '../../../lib/webhooks/store.ts';
import { changeValues, WEBHOOK_CHANGE_COLUMNS, WEBHOOK_COLUMNS, webhookOf, webhookValues, type WebhookRow } from '../rows/webhooks.ts';
import { changed, rowOf, rowsOf, statements } from './sql.ts';

const stmt = statements('webhooks');
const n = WEBHOOK_CHANGE_COLUMNS.length;

const S = {
  insert: stmt('insert', `INSERT INTO webhook_endpoints (${WEBHOOK_COLUMNS.join(', ')}) VALUES (${WEBHOOK_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`),
  get: stmt('get', 'SELECT * FROM webhook_endpoints WHERE id = $1 AND project_id = $2'),
  list: stmt('list', 'SELECT * FROM webhook_endpoints WHERE project_id = $1 ORDER BY id'),
  update: stmt(
    'update',
    `UPDATE webhook_endpoints SET ${WEBHOOK_CHANGE_COLUMNS.map((c, i) => `${c} = $${i + 1}`).join(', ')} WHERE id = $${n + 1} AND project_id = $${n + 2} RETURNING *`,
  ),
  setDisabled: stmt('setDisabled', 'UPDATE webhook_endpoints SET disabled_at = $1, disabled_reason = $2, updated_at = $3 WHERE id = $4 AND project_id = $5 RETURNING *'),
  // The right-hand sides read the row as it was: the current secret becomes the previous one.
  rotate: stmt(
    'rotate',
    'UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, secret_sealed = $1, previous_expires_at = $2, updated_at = $3 WHERE id = $4 AND project_id = $5 RETURNING *',
  ),
  delete: stmt('delete', 'DELETE FROM webhook_endpoints WHERE id = $1 AND project_id = $2'),
};

export class PgWebhookStore implements WebhookStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async create(e: WebhookEndpointRecord): Promise<void> {
    await this.pool.query(S.insert(webhookValues(e)));
  }

  async get(projectId: string, id: string): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.get([id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async list(projectId: string): Promise<WebhookEndpointRecord[]> {
    return (await rowsOf<WebhookRow>(this.pool, S.list([projectId]))).map(webhookOf);
  }

  async update(projectId: string, id: string, change: WebhookEndpointChange): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.update([...changeValues(change), id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async setDisabled(projectId: string, id: string, disabledAt: number | null, reason: string | null, at: number): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.setDisabled([disabledAt, reason, at, id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async rotateSecret(projectId: string, id: string, secretSealed: Buffer, previousExpiresAt: number, at: number): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.rotate([secretSealed, previousExpiresAt, at, id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async delete(projectId: string, id: string): Promise<boolean> {
    return (await changed(this.pool, S.delete([id, projectId]))) > 0;
  }
}
