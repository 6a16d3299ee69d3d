// WebhookStore on SQLite.
import type { WebhookEndpointChange, WebhookEndpointRecord, WebhookStore } from '../../../lib/webhooks/store.ts';
import { changeValues, WEBHOOK_CHANGE_COLUMNS, WEBHOOK_COLUMNS, webhookOf, webhookValues, type WebhookRow } from '../rows/webhooks.ts';
import type { Db } from './db.ts';

export class SqliteWebhookStore implements WebhookStore {
  private readonly q;

  constructor(db: Db) {
    this.q = {
      insert: db.prepare(`INSERT INTO webhook_endpoints (${WEBHOOK_COLUMNS.join(', ')}) VALUES (${WEBHOOK_COLUMNS.map(() => '?').join(', ')})`),
      get: db.prepare('SELECT * FROM webhook_endpoints WHERE id = ? AND project_id = ?'),
      list: db.prepare('SELECT * FROM webhook_endpoints WHERE project_id = ? ORDER BY id'),
      update: db.prepare(`UPDATE webhook_endpoints SET ${WEBHOOK_CHANGE_COLUMNS.map((c) => `${c} = ?`).join(', ')} WHERE id = ? AND project_id = ? RETURNING *`),
      setDisabled: db.prepare('UPDATE webhook_endpoints SET disabled_at = ?, disabled_reason = ?, updated_at = ? WHERE id = ? AND project_id = ? RETURNING *'),
      // The right-hand sides read the row as it was: the current secret becomes the previous one.
      rotate: db.prepare(
        'UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, secret_sealed = ?, previous_expires_at = ?, updated_at = ? WHERE id = ? AND project_id = ? RETURNING *',
      ),
      delete: db.prepare('DELETE FROM webhook_endpoints WHERE id = ? AND project_id = ?'),
    };
  }

  async create(e: WebhookEndpointRecord): Promise<void> {
    this.q.insert.run(...webhookValues(e));
  }

  async get(projectId: string, id: string): Promise<WebhookEndpointRecord | null> {
    const row = this.q.get.get(id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async list(projectId: string): Promise<WebhookEndpointRecord[]> {
    return (this.q.list.all(projectId) as WebhookRow[]).map(webhookOf);
  }

  async update(projectId: string, id: string, change: WebhookEndpointChange): Promise<WebhookEndpointRecord | null> {
    const row = this.q.update.get(...changeValues(change), id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async setDisabled(projectId: string, id: string, disabledAt: number | null, reason: string | null, at: number): Promise<WebhookEndpointRecord | null> {
    const row = this.q.setDisabled.get(disabledAt, reason, at, id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async rotateSecret(projectId: string, id: string, secretSealed: Buffer, previousExpiresAt: number, at: number): Promise<WebhookEndpointRecord | null> {
    const row = this.q.rotate.get(secretSealed, previousExpiresAt, at, id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async delete(projectId: string, id: string): Promise<boolean> {
    return this.q.delete.run(id, projectId).changes > 0;
  }
}
