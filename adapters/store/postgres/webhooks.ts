// WebhookStore on PostgreSQL: the statements of adapters/store/sqlite/webhooks.ts.
import type { Pool } from 'pg';
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
  WEBHOOK_CHANGE_COLUMNS,
  WEBHOOK_COLUMNS,
  webhookOf,
  webhookValues,
  type DeliveryRow,
  type WebhookRow,
} from '../rows/webhooks.ts';
import { arrayLiteral, changed, inTransaction, replanned, rowOf, rowsOf, statements } from './sql.ts';

const stmt = statements('webhooks');

// The batch's deliveries (`x`) picked by `which`, once the position has moved; a replay makes one
// already there pending afresh (leased as a new one is). Those leased are added apart, so only
// they are returned (RETURNING every row of a batch of 500 cost more than the rows it saved).
const addDeliveries = (which: string, owner: string, until: string) =>
  `INSERT INTO webhook_deliveries (endpoint_id, event_id, position, project_id, type, next_attempt_at, created_at, updated_at, lease_owner, lease_until)
   SELECT $1, x.e, x.p, m.project_id, x.t, $4, $4, $4, ${owner}, ${until} FROM moved m CROSS JOIN x WHERE ${which}
   ON CONFLICT (endpoint_id, position) DO UPDATE SET state = 'pending', attempts = 0, next_attempt_at = excluded.next_attempt_at,
     lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, updated_at = excluded.updated_at`;
const n = WEBHOOK_CHANGE_COLUMNS.length;

const S = {
  insert: stmt(
    'insert',
    `INSERT INTO webhook_endpoints (${WEBHOOK_COLUMNS.join(', ')}) VALUES (${WEBHOOK_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`,
  ),
  get: stmt('get', 'SELECT * FROM webhook_endpoints WHERE id = $1 AND project_id = $2'),
  list: stmt('list', 'SELECT * FROM webhook_endpoints WHERE project_id = $1 ORDER BY id'),
  update: stmt(
    'update',
    `UPDATE webhook_endpoints SET ${WEBHOOK_CHANGE_COLUMNS.map((c, i) => `${c} = $${i + 1}`).join(', ')} WHERE id = $${n + 1} AND project_id = $${n + 2} RETURNING *`,
  ),
  setDisabled: stmt(
    'setDisabled',
    'UPDATE webhook_endpoints SET disabled_at = $1, disabled_by = $2, disabled_reason = $3, updated_at = $4 WHERE id = $5 AND project_id = $6 RETURNING *',
  ),
  // The right-hand sides read the row as it was: the current secret becomes the previous one.
  rotate: stmt(
    'rotate',
    'UPDATE webhook_endpoints SET previous_secret_sealed = secret_sealed, secret_sealed = $1, previous_expires_at = $2, updated_at = $3 WHERE id = $4 AND project_id = $5 RETURNING *',
  ),
  delete: stmt('delete', 'DELETE FROM webhook_endpoints WHERE id = $1 AND project_id = $2'),
  deleteDeliveries: stmt('deleteDeliveries', 'DELETE FROM webhook_deliveries WHERE endpoint_id = $1'),
  all: stmt('all', 'SELECT * FROM webhook_endpoints ORDER BY id'),
  // One statement, one round trip (it was BEGIN, the move, two INSERTs and COMMIT): the position
  // moved from $3 to $2 only if it still stands at $3 (else nothing is written and no row comes
  // back), and the batch's deliveries added, the first $8 leased to $9 until $10. Returns a row
  // per leased delivery, or one of NULLs when it moved and none is leased. Not updated_at: that
  // says when the endpoint was last changed, not how far it has been served.
  enqueue: stmt(
    'enqueue',
    `WITH moved AS (UPDATE webhook_endpoints SET position = $2 WHERE id = $1 AND position = $3 RETURNING project_id),
     x AS (SELECT * FROM unnest($5::text[], $6::bigint[], $7::text[]) WITH ORDINALITY AS x(e, p, t, n)),
     leased AS (${addDeliveries('x.n <= $8', '$9::text', '$10::bigint')} RETURNING *),
     rest AS (${addDeliveries('x.n > $8', 'NULL', 'NULL')})
     SELECT l.* FROM moved LEFT JOIN leased l ON true`,
  ),
  rewind: stmt(
    'rewind',
    'UPDATE webhook_endpoints SET position = least(position, $1), updated_at = $2 WHERE id = $3 AND project_id = $4 RETURNING *',
  ),
  // Each named enabled endpoint's due rows through its index (LATERAL), locked SKIP LOCKED: a
  // row another process is claiming is passed over, and one it claimed since is re-checked
  // (no longer free) before it is locked. Cheap however long other endpoints' queues are.
  // Planned at each claim (a quarter of a millisecond, for up to a batch of rows): a cached plan
  // made while the table was empty (a quiet spell, purged) sorted a scan of the whole table and
  // joined it in a nested loop once a backlog filled it, 50-120 ms a claim until the next ANALYZE.
  claim: replanned(
    `WITH picked AS (
       SELECT d.endpoint_id, d.position
       FROM unnest($3::text[], $4::int[]) AS e(id, n)
       JOIN webhook_endpoints we ON we.id = e.id AND we.disabled_at IS NULL
       CROSS JOIN LATERAL (
         SELECT endpoint_id, position FROM webhook_deliveries
         WHERE endpoint_id = e.id AND state = 'pending' AND next_attempt_at <= $5 AND (lease_until IS NULL OR lease_until <= $5)
         ORDER BY next_attempt_at, position LIMIT e.n
         FOR UPDATE SKIP LOCKED) d)
     UPDATE webhook_deliveries w SET lease_owner = $1, lease_until = $2
     FROM picked WHERE w.endpoint_id = picked.endpoint_id AND w.position = picked.position
     RETURNING w.*`,
  ),
  // One statement, one round trip: the outcomes written (those whose lease the owner still
  // holds), then per endpoint what the written ones say of its receiver, in outcome order (any
  // success, and the first failure after the last one), and its failing_since written only when
  // that changes it (the endpoint's row is not rewritten at every batch). Returns each such
  // endpoint's failing_since after the write.
  // Each outcome's row is found by one probe of the key (OFFSET 0 keeps the LATERAL a probe) and
  // updated by its ctid: joined on the key, plans made for a batch of some dozens hashed it
  // against a scan of the whole table (a fifth of the flushes in a run of the throughput
  // benchmark). A row changed since (a claim after the lease lapsed, a replay) is not the one
  // this lease settles, and is left as it is.
  finish: stmt(
    'finish',
    `WITH o AS (
       SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::int[], $8::text[], $9::int[], $10::text[])
         WITH ORDINALITY AS o(endpoint_id, position, owner, state, next_at, at, status, error, ms, receiver, i)),
     found AS (SELECT o.*, r.tid FROM o CROSS JOIN LATERAL (SELECT ctid AS tid FROM webhook_deliveries WHERE endpoint_id = o.endpoint_id AND position = o.position OFFSET 0) r),
     written AS (
       UPDATE webhook_deliveries w SET state = o.state, attempts = w.attempts + CASE WHEN o.receiver IS NULL THEN 0 ELSE 1 END, next_attempt_at = o.next_at,
         last_attempt_at = CASE WHEN o.receiver IS NULL THEN w.last_attempt_at ELSE o.at END, last_status = o.status, last_error = o.error, last_ms = o.ms,
         lease_owner = NULL, lease_until = NULL, updated_at = o.at
       FROM found o WHERE w.ctid = ANY (ARRAY(SELECT tid FROM found)) AND w.ctid = o.tid AND w.lease_owner = o.owner
       RETURNING w.endpoint_id, w.position),
     said AS (SELECT o.endpoint_id, o.receiver, o.at, o.i FROM o JOIN written USING (endpoint_id, position) WHERE o.receiver IS NOT NULL),
     verdict AS (
       SELECT l.endpoint_id AS id, l.last_up IS NOT NULL AS up,
         (SELECT s.at FROM said s WHERE s.endpoint_id = l.endpoint_id AND s.receiver = 'down' AND s.i > coalesce(l.last_up, 0) ORDER BY s.i LIMIT 1) AS since
       FROM (SELECT endpoint_id, max(i) FILTER (WHERE receiver = 'up') AS last_up FROM said GROUP BY endpoint_id) l),
     moved AS (
       UPDATE webhook_endpoints e SET failing_since = CASE WHEN v.up THEN v.since ELSE coalesce(e.failing_since, v.since) END
       FROM verdict v WHERE e.id = v.id AND e.failing_since IS DISTINCT FROM (CASE WHEN v.up THEN v.since ELSE coalesce(e.failing_since, v.since) END)
       RETURNING e.id, e.failing_since)
     SELECT v.id, CASE WHEN m.id IS NULL THEN e.failing_since ELSE m.failing_since END AS failing_since
     FROM verdict v JOIN webhook_endpoints e ON e.id = v.id LEFT JOIN moved m ON m.id = v.id`,
  ),
  deliveries: stmt(
    'deliveries',
    `SELECT d.* FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
     WHERE d.endpoint_id = $1 AND e.project_id = $2 AND d.position < $3 ORDER BY d.position DESC LIMIT $4`,
  ),
  purge: stmt('purge', "DELETE FROM webhook_deliveries WHERE state <> 'pending' AND updated_at < $1"),
  // Per enabled endpoint, the first entry of its due index: one probe each, whatever the queue's length.
  oldestDue: stmt(
    'oldestDue',
    `SELECT min(d.due) AS due FROM webhook_endpoints e
     CROSS JOIN LATERAL (SELECT next_attempt_at AS due FROM webhook_deliveries WHERE endpoint_id = e.id AND state = 'pending' ORDER BY next_attempt_at LIMIT 1) d
     WHERE e.disabled_at IS NULL`,
  ),
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

  async setDisabled(projectId: string, id: string, disabled: WebhookDisabling | null, at: number): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(
      this.pool,
      S.setDisabled([disabled?.at ?? null, disabled?.by ?? null, disabled?.reason ?? null, at, id, projectId]),
    );
    return row ? webhookOf(row) : null;
  }

  async rotateSecret(
    projectId: string,
    id: string,
    secretSealed: Buffer,
    previousExpiresAt: number,
    at: number,
  ): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.rotate([secretSealed, previousExpiresAt, at, id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async delete(projectId: string, id: string): Promise<boolean> {
    return inTransaction(this.pool, async (c) => {
      if ((await changed(c, S.delete([id, projectId]))) === 0) return false;
      await c.query(S.deleteDeliveries([id]));
      return true;
    });
  }

  async all(): Promise<WebhookEndpointRecord[]> {
    return (await rowsOf<WebhookRow>(this.pool, S.all([]))).map(webhookOf);
  }

  async enqueue(
    endpointId: string,
    from: number,
    to: number,
    deliveries: readonly NewDelivery[],
    at: number,
    lease?: EnqueueLease,
  ): Promise<DeliveryRecord[] | null> {
    const count = lease ? Math.min(lease.count, deliveries.length) : 0;
    const rows = await rowsOf<DeliveryRow | { [K in keyof DeliveryRow]: null }>(
      this.pool,
      S.enqueue([
        endpointId,
        to,
        from,
        at,
        arrayLiteral(deliveries.map((d) => d.eventId)),
        arrayLiteral(deliveries.map((d) => d.position)),
        arrayLiteral(deliveries.map((d) => d.type)),
        count,
        lease?.owner ?? null,
        lease?.until ?? null,
      ]),
    );
    if (rows.length === 0) return null;
    const leased: DeliveryRecord[] = [];
    for (const r of rows) if (r.endpoint_id !== null) leased.push(deliveryOf(r));
    return leased.sort((a, b) => a.position - b.position);
  }

  async rewind(projectId: string, id: string, position: number, at: number): Promise<WebhookEndpointRecord | null> {
    const row = await rowOf<WebhookRow>(this.pool, S.rewind([position, at, id, projectId]));
    return row ? webhookOf(row) : null;
  }

  async claim(q: ClaimQuery): Promise<DeliveryRecord[]> {
    const wanted = q.endpoints.filter((e) => e.limit > 0);
    if (wanted.length === 0) return [];
    const rows = await rowsOf<DeliveryRow>(
      this.pool,
      S.claim([q.owner, q.leaseUntil, arrayLiteral(wanted.map((e) => e.id)), arrayLiteral(wanted.map((e) => e.limit)), q.now]),
    );
    return rows.map(deliveryOf).sort((a, b) => a.nextAttemptAt - b.nextAttemptAt || a.position - b.position);
  }

  async finish(outcomes: readonly DeliveryOutcome[]): Promise<Map<string, number | null>> {
    if (outcomes.length === 0) return new Map();
    const rows = await rowsOf<{ id: string; failing_since: number | null }>(
      this.pool,
      S.finish([
        arrayLiteral(outcomes.map((o) => o.endpointId)),
        arrayLiteral(outcomes.map((o) => o.position)),
        arrayLiteral(outcomes.map((o) => o.owner)),
        arrayLiteral(outcomes.map((o) => o.state)),
        arrayLiteral(outcomes.map((o) => o.nextAttemptAt)),
        arrayLiteral(outcomes.map((o) => o.at)),
        arrayLiteral(outcomes.map((o) => o.status)),
        arrayLiteral(outcomes.map((o) => o.error)),
        arrayLiteral(outcomes.map((o) => o.ms)),
        arrayLiteral(outcomes.map((o) => o.receiver)),
      ]),
    );
    return new Map(rows.map((r) => [r.id, r.failing_since]));
  }

  async deliveries(projectId: string, id: string, beforePosition: number | null, limit: number): Promise<DeliveryRecord[]> {
    return (await rowsOf<DeliveryRow>(this.pool, S.deliveries([id, projectId, beforePosition ?? Number.MAX_SAFE_INTEGER, limit]))).map(
      deliveryOf,
    );
  }

  async purgeDeliveries(olderThan: number): Promise<number> {
    return changed(this.pool, S.purge([olderThan]));
  }

  async oldestDue(): Promise<number | null> {
    const [row] = await rowsOf<{ due: number | null }>(this.pool, S.oldestDue([]));
    return row?.due ?? null;
  }
}
