// WebhookStore on SQLite.
import type {
  ClaimQuery,
  DeliveryOutcome,
  DeliveryRecord,
  EnqueueLease,
  NewDelivery,
  WebhookDisabling,
  WebhookEndpointChange,
  WebhookEndpointRecord,
  WebhookStore,
} from '../../../lib/webhooks/ports.ts';
import {
  changeValues,
  deliveryOf,
  NEW_DELIVERY_COLUMNS,
  newDeliveryValues,
  WEBHOOK_CHANGE_COLUMNS,
  WEBHOOK_COLUMNS,
  webhookOf,
  webhookValues,
  type DeliveryRow,
  type WebhookRow,
} from '../rows/webhooks.ts';
import type { Db } from './db.ts';
import { groupCommitOf, type GroupCommit } from './group-commit.ts';

// A replay makes a delivery already there pending afresh, as if new (leased as a new one is).
const ADD_DELIVERY = `INSERT INTO webhook_deliveries (${NEW_DELIVERY_COLUMNS.join(', ')}) VALUES (${NEW_DELIVERY_COLUMNS.map(() => '?').join(', ')})
  ON CONFLICT (endpoint_id, event_id) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_at = excluded.next_attempt_at,
    lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = excluded.updated_at`;

export class SqliteWebhookStore implements WebhookStore {
  private readonly q;
  /** Enqueues share the connection's group commit (group-commit.ts). */
  private readonly commits: GroupCommit;

  constructor(db: Db) {
    this.commits = groupCommitOf(db);
    this.q = {
      insert: db.prepare(
        `INSERT INTO webhook_endpoints (${WEBHOOK_COLUMNS.join(', ')}) VALUES (${WEBHOOK_COLUMNS.map(() => '?').join(', ')})`,
      ),
      get: db.prepare('SELECT * FROM webhook_endpoints WHERE id = ? AND project_id = ?'),
      list: db.prepare('SELECT * FROM webhook_endpoints WHERE project_id = ? ORDER BY id'),
      update: db.prepare(
        `UPDATE webhook_endpoints SET ${WEBHOOK_CHANGE_COLUMNS.map((c) => `${c} = ?`).join(', ')} WHERE id = ? AND project_id = ? RETURNING *`,
      ),
      setDisabled: db.prepare(
        'UPDATE webhook_endpoints SET disabled_at = ?, disabled_by = ?, disabled_reason = ?, updated_at = ? WHERE id = ? AND project_id = ? RETURNING *',
      ),
      // The right-hand sides read the row as it was: the current secret becomes the previous one.
      rotate: db.prepare(
        'UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, secret_sealed = ?, previous_expires_at = ?, updated_at = ? WHERE id = ? AND project_id = ? RETURNING *',
      ),
      delete: db.prepare('DELETE FROM webhook_endpoints WHERE id = ? AND project_id = ?'),
      deleteDeliveries: db.prepare('DELETE FROM webhook_deliveries WHERE endpoint_id = ?'),
      all: db.prepare('SELECT * FROM webhook_endpoints ORDER BY id'),
      // Not updated_at: that says when the endpoint was last changed, not how far it has been served.
      move: db.prepare('UPDATE webhook_endpoints SET position = ? WHERE id = ? AND position = ?'),
      addDelivery: db.prepare(`${ADD_DELIVERY}`),
      addLeased: db.prepare(`${ADD_DELIVERY} RETURNING *`),
      rewind: db.prepare(
        'UPDATE webhook_endpoints SET position = min(position, ?), updated_at = ? WHERE id = ? AND project_id = ? RETURNING *',
      ),
      // One endpoint's due rows, through its index: cheap however long the other endpoints' queues are.
      claim: db.prepare(
        `UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ?
         WHERE rowid IN (
           SELECT rowid FROM webhook_deliveries
           WHERE endpoint_id = ? AND state = 'pending' AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
           ORDER BY next_attempt_at, position LIMIT ?)
         RETURNING *`,
      ),
      enabled: db.prepare('SELECT 1 FROM webhook_endpoints WHERE id = ? AND disabled_at IS NULL'),
      finish: db.prepare(
        `UPDATE webhook_deliveries SET state = ?, attempts = attempts + ?, next_attempt_at = ?, last_attempt_at = coalesce(?, last_attempt_at), last_status = ?, last_error = ?,
           last_ms = ?, lease_owner = NULL, lease_until = NULL, updated_at = ?
         WHERE endpoint_id = ? AND event_id = ? AND lease_owner = ?`,
      ),
      setFailing: db.prepare('UPDATE webhook_endpoints SET failing_since = ? WHERE id = ?'),
      down: db.prepare('UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, ?) WHERE id = ?'),
      failingSince: db.prepare('SELECT failing_since FROM webhook_endpoints WHERE id = ?'),
      projectOf: db.prepare('SELECT project_id FROM webhook_endpoints WHERE id = ?'),
      deliveries: db.prepare(
        'SELECT d.* FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.endpoint_id = ? AND e.project_id = ? AND d.position < ? ORDER BY d.position DESC LIMIT ?',
      ),
      purge: db.prepare("DELETE FROM webhook_deliveries WHERE state <> 'pending' AND updated_at < ?"),
      // Per enabled endpoint, the first entry of its due index: one probe each, whatever the queue's length.
      oldestDue: db
        .prepare(
          `SELECT min((SELECT min(d.next_attempt_at) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.state = 'pending'))
           FROM webhook_endpoints e WHERE e.disabled_at IS NULL`,
        )
        .pluck(),
    };
    this.enqueueTx = db.transaction(
      (
        endpointId: string,
        from: number,
        to: number,
        deliveries: readonly NewDelivery[],
        at: number,
        lease?: EnqueueLease,
      ): DeliveryRecord[] | null => {
        const row = this.q.projectOf.get(endpointId) as { project_id: string } | undefined;
        if (!row || this.q.move.run(to, endpointId, from).changes === 0) return null;
        const leased: DeliveryRecord[] = [];
        deliveries.forEach((d, i) => {
          if (lease && i < lease.count)
            leased.push(deliveryOf(this.q.addLeased.get(...newDeliveryValues(endpointId, row.project_id, d, at, lease)) as DeliveryRow));
          else this.q.addDelivery.run(...newDeliveryValues(endpointId, row.project_id, d, at, null));
        });
        return leased;
      },
    );
    this.finishTx = db.transaction((outcomes: readonly DeliveryOutcome[]): Map<string, number | null> => {
      // Per endpoint, what the batch says of its receiver, in order: whether it answered at all,
      // and when the failing that stands at the end began (the first failure after the last success).
      const said = new Map<string, { up: boolean; downSince: number | null }>();
      for (const o of outcomes) {
        const written = this.q.finish.run(
          o.state,
          o.receiver === null ? 0 : 1,
          o.nextAttemptAt,
          o.receiver === null ? null : o.at,
          o.status,
          o.error,
          o.ms,
          o.at,
          o.endpointId,
          o.eventId,
          o.owner,
        ).changes;
        if (written === 0 || o.receiver === null) continue;
        const s = said.get(o.endpointId) ?? { up: false, downSince: null };
        if (o.receiver === 'up') said.set(o.endpointId, { up: true, downSince: null });
        else said.set(o.endpointId, { up: s.up, downSince: s.downSince ?? o.at });
      }
      const out = new Map<string, number | null>();
      for (const [id, s] of said) {
        // One write per endpoint per batch: a success in it clears what came before.
        if (s.up) this.q.setFailing.run(s.downSince, id);
        else this.q.down.run(s.downSince, id);
        out.set(id, (this.q.failingSince.get(id) as { failing_since: number | null } | undefined)?.failing_since ?? null);
      }
      return out;
    });
    this.claimTx = db.transaction((c: ClaimQuery): DeliveryRecord[] => {
      const rows: DeliveryRow[] = [];
      for (const e of c.endpoints) {
        if (e.limit <= 0 || !this.q.enabled.get(e.id)) continue;
        rows.push(...(this.q.claim.all(c.owner, c.leaseUntil, e.id, c.now, c.now, e.limit) as DeliveryRow[]));
      }
      return rows.map(deliveryOf).sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || a.position - b.position);
    });
    this.deleteTx = db.transaction((projectId: string, id: string): boolean => {
      if (this.q.delete.run(id, projectId).changes === 0) return false;
      this.q.deleteDeliveries.run(id);
      return true;
    });
  }

  private readonly enqueueTx: (
    endpointId: string,
    from: number,
    to: number,
    deliveries: readonly NewDelivery[],
    at: number,
    lease?: EnqueueLease,
  ) => DeliveryRecord[] | null;
  private readonly finishTx: (outcomes: readonly DeliveryOutcome[]) => Map<string, number | null>;
  private readonly deleteTx: (projectId: string, id: string) => boolean;
  private readonly claimTx: (c: ClaimQuery) => DeliveryRecord[];

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

  async setDisabled(projectId: string, id: string, disabled: WebhookDisabling | null, at: number): Promise<WebhookEndpointRecord | null> {
    const row = this.q.setDisabled.get(disabled?.at ?? null, disabled?.by ?? null, disabled?.reason ?? null, at, id, projectId) as
      | WebhookRow
      | undefined;
    return row ? webhookOf(row) : null;
  }

  async rotateSecret(
    projectId: string,
    id: string,
    secretSealed: Buffer,
    previousExpiresAt: number,
    at: number,
  ): Promise<WebhookEndpointRecord | null> {
    const row = this.q.rotate.get(secretSealed, previousExpiresAt, at, id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async delete(projectId: string, id: string): Promise<boolean> {
    return this.deleteTx(projectId, id);
  }

  async all(): Promise<WebhookEndpointRecord[]> {
    return (this.q.all.all() as WebhookRow[]).map(webhookOf);
  }

  async enqueue(
    endpointId: string,
    from: number,
    to: number,
    deliveries: readonly NewDelivery[],
    at: number,
    lease?: EnqueueLease,
  ): Promise<DeliveryRecord[] | null> {
    // In the group commit: a project's endpoints woken by the same events enqueue in one
    // transaction, not one commit each (a hundred endpoints cost a hundred commits a wake).
    return this.commits.run(() => this.enqueueTx(endpointId, from, to, deliveries, at, lease));
  }

  async rewind(projectId: string, id: string, position: number, at: number): Promise<WebhookEndpointRecord | null> {
    const row = this.q.rewind.get(position, at, id, projectId) as WebhookRow | undefined;
    return row ? webhookOf(row) : null;
  }

  async claim(c: ClaimQuery): Promise<DeliveryRecord[]> {
    return this.claimTx(c);
  }

  async finish(outcomes: readonly DeliveryOutcome[]): Promise<Map<string, number | null>> {
    return this.finishTx(outcomes);
  }

  async deliveries(projectId: string, id: string, beforePosition: number | null, limit: number): Promise<DeliveryRecord[]> {
    return (this.q.deliveries.all(id, projectId, beforePosition ?? Number.MAX_SAFE_INTEGER, limit) as DeliveryRow[]).map(deliveryOf);
  }

  async purgeDeliveries(olderThan: number): Promise<number> {
    return this.q.purge.run(olderThan).changes;
  }

  async oldestDue(): Promise<number | null> {
    return (this.q.oldestDue.get() as number | null) ?? null;
  }
}
