// EventStore on PostgreSQL. Many writers on several connections (and machines) append at once, so
// the one thing SQLite gives for free must be made explicit: readers page and heal by position
// (`after: number`), which is only safe if a position is never made visible before a lower one.
//
// A log that never skips (docs/events.md, "On PostgreSQL: a log that never skips"): the log's one
// row (event_log) holds the last position handed out, and an append takes the next one with
// `UPDATE event_log SET last_position = last_position + 1 … RETURNING` as its last step before
// INSERT and COMMIT. The row lock that UPDATE takes is held to the end of the transaction, and the
// next appender's UPDATE waits for it and then reads the committed value, so:
// - position order is commit order: N+1 can only be taken after the transaction holding N has
//   committed (or rolled back, giving N back), and PostgreSQL makes a transaction visible before
//   it releases its locks, so any snapshot that sees N+1 sees N;
// - positions are gap-free (a rolled back append returns its number with the row), which keeps the
//   live feed's in-order fast path (`position === delivered + 1`).
// The cost is that appends commit one at a time (only the short tail, INSERT and COMMIT, runs under
// the lock: the idempotency claim and the stream counter are taken before it). Chosen over the
// transaction-id scheme (store pg_current_xact_id(), read only below the snapshot's xmin, order by
// (xid, position)) because that needs a composite cursor through lib/events, a live feed that
// tolerates out-of-order positions, and stalls every reader behind the oldest transaction running
// anywhere in the cluster (a long report in another database included); this keeps the port as is
// and is correct by one lock. Throughput measured in docs/events.md.
//
// Lock order in an append is always: idempotency key row, stream counter row, log row: no cycles.
import type { Pool, PoolClient, QueryConfig, QueryResultRow } from 'pg';
import {
  formatSequence,
  type AppendRequest,
  type AppendResult,
  type EventStore,
  type ReadQuery,
  type ReadResult,
  type StoredEventType,
} from '../../../lib/events/store.ts';
import { VISIBILITIES, type DataField, type StoredEvent, type Visibility } from '../../../lib/events/types.ts';

interface EventRow {
  position: string;
  event_id: string;
  project_id: string;
  inbox_id: string | null;
  type: string;
  visibility: Visibility;
  recorded_at: string;
  body: string;
}

interface TypeRow {
  project_id: string;
  name: string;
  version: number;
  description: string;
  fields: string;
  created_at: string;
  updated_at: string;
}

const VISIBILITY_SET: ReadonlySet<string> = new Set(VISIBILITIES);

const COLUMNS = 'position, event_id, project_id, inbox_id, type, visibility, recorded_at, body';

// BIGINT arrives as text from `pg`; positions and times stay far below 2^53.
const toEvent = (r: EventRow): StoredEvent => ({
  position: Number(r.position),
  eventId: r.event_id,
  projectId: r.project_id,
  inboxId: r.inbox_id,
  type: r.type,
  visibility: r.visibility,
  recordedAt: Number(r.recorded_at),
  json: r.body,
});

const toType = (r: TypeRow): StoredEventType => ({
  projectId: r.project_id,
  name: r.name,
  version: r.version,
  description: r.description,
  fields: JSON.parse(r.fields) as DataField[],
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
});

/** A named statement: prepared once per connection by `pg`, on its first use there. */
const stmt = (name: string, text: string) => (values: unknown[]): QueryConfig<unknown[]> => ({ name: `events.${name}`, text, values });

// Who may see what and which types, on top of a scan; lists are array parameters, so one
// statement serves every length. $4 visibilities, $5 inboxes (named or allowed), $6 typed,
// $7 exact types, $8 prefixes of `prefix.*` patterns.
const FILTERS = `visibility = ANY($4::text[])
  AND ($6::boolean IS FALSE OR type = ANY($7::text[]) OR EXISTS (SELECT 1 FROM unnest($8::text[]) p WHERE starts_with(type, p)))`;
const inboxFilter = (named: boolean) => (named ? 'inbox_id = ANY($5::text[])' : '(inbox_id IS NULL OR inbox_id = ANY($5::text[]))');
/** The bounded scan: the project's rows (or the named inboxes', `inboxes`) after $2 up to $3, at most `max`. */
const scan = (named: boolean, cols: string, inboxes: string, max: string) =>
  `SELECT ${cols} FROM events WHERE project_id = $1 ${named ? `AND inbox_id = ANY(${inboxes}::text[])` : ''}
     AND position > $2 AND position <= $3 ORDER BY position LIMIT ${max}`;

const readShapes = (named: boolean) => ({
  // The fast page: the plain query over at most maxScan positions ($3 already bounded).
  direct: stmt(
    `direct.${named}`,
    `SELECT ${COLUMNS} FROM events WHERE project_id = $1 AND position > $2 AND position <= $3
       AND ${inboxFilter(named)} AND ${FILTERS} ORDER BY position LIMIT $9`,
  ),
  rows: stmt(
    `rows.${named}`,
    `SELECT ${COLUMNS} FROM (${scan(named, COLUMNS, '$5', '$9')}) s WHERE ${named ? '' : `${inboxFilter(false)} AND`} ${FILTERS}
       ORDER BY position LIMIT $10`,
  ),
  // $4 the named inboxes (if named), then the bound: every parameter must be used to be typed.
  scanned: stmt(`scanned.${named}`, `SELECT MAX(position) AS last, COUNT(*)::int AS n FROM (${scan(named, 'position', '$4', named ? '$5' : '$4')}) s`),
});

const S = {
  claimKey: stmt(
    'claimKey',
    `INSERT INTO event_idempotency (project_id, key, fingerprint, event_id, created_at) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (project_id, key) DO UPDATE
       SET fingerprint = excluded.fingerprint, event_id = excluded.event_id, created_at = excluded.created_at
       WHERE event_idempotency.created_at <= $6
     RETURNING 1`,
  ),
  getKey: stmt(
    'getKey',
    `SELECT k.fingerprint, k.event_id, k.created_at, e.position FROM event_idempotency k JOIN events e ON e.event_id = k.event_id
     WHERE k.project_id = $1 AND k.key = $2`,
  ),
  bump: stmt(
    'bump',
    'INSERT INTO event_streams (stream, seq) VALUES ($1, 1) ON CONFLICT (stream) DO UPDATE SET seq = event_streams.seq + 1 RETURNING seq',
  ),
  // The last statement before the INSERT and COMMIT: see the top of this file.
  takePosition: stmt(
    'takePosition',
    `UPDATE event_log SET last_position = last_position + 1, last_recorded_at = GREATEST(last_recorded_at, $1)
     RETURNING last_position, last_recorded_at`,
  ),
  insert: stmt(
    'insert',
    'INSERT INTO events (position, event_id, project_id, inbox_id, type, visibility, recorded_at, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
  ),
  log: stmt('log', 'SELECT id, cursor_secret, last_position FROM event_log'),
  horizon: stmt('horizon', 'SELECT position FROM events WHERE recorded_at <= $1 ORDER BY recorded_at DESC, position DESC LIMIT 1'),
  readAll: stmt('readAll', `SELECT ${COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2`),
  positionOf: stmt('positionOf', 'SELECT position FROM events WHERE project_id = $1 AND event_id = $2'),
  getType: stmt('getType', 'SELECT * FROM event_types WHERE project_id = $1 AND name = $2 AND version = $3'),
  lockType: stmt('lockType', 'SELECT * FROM event_types WHERE project_id = $1 AND name = $2 AND version = $3 FOR UPDATE'),
  typeVersions: stmt(
    'typeVersions',
    'SELECT * FROM event_types WHERE project_id = $1 AND name = $2 AND version < $3 ORDER BY version DESC LIMIT $4',
  ),
  listTypes: stmt('listTypes', 'SELECT * FROM event_types WHERE project_id = $1 ORDER BY name, version'),
  insertType: stmt(
    'insertType',
    `INSERT INTO event_types (project_id, name, version, description, fields, created_at, updated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (project_id, name, version) DO NOTHING RETURNING 1`,
  ),
  updateType: stmt(
    'updateType',
    'UPDATE event_types SET description = $4, fields = $5, updated_at = $6 WHERE project_id = $1 AND name = $2 AND version = $3',
  ),
  purge: stmt('purge', 'DELETE FROM event_idempotency WHERE created_at < $1'),
  named: readShapes(true),
  all: readShapes(false),
};

/** Lost a race for a row another transaction inserted first: roll back and decide again. */
class Raced extends Error {}

export class PgEventStore implements EventStore {
  private readonly types = new Map<string, StoredEventType>();
  private head: Promise<{ id: string; secret: Uint8Array }> | null = null;

  constructor(private readonly pool: Pool) {}

  private async rows<R extends QueryResultRow>(q: QueryConfig<unknown[]>, client: Pool | PoolClient = this.pool): Promise<R[]> {
    return (await client.query<R>(q)).rows;
  }

  /** Runs `fn` in a transaction, again from the start if it lost a race (`Raced`). */
  private async transaction<T>(fn: (c: PoolClient) => Promise<T>): Promise<T> {
    const c = await this.pool.connect();
    try {
      for (;;) {
        await c.query('BEGIN');
        try {
          const out = await fn(c);
          await c.query('COMMIT');
          return out;
        } catch (err) {
          await c.query('ROLLBACK');
          if (!(err instanceof Raced)) throw err;
        }
      }
    } finally {
      c.release();
    }
  }

  private logRow(): Promise<{ id: string; secret: Uint8Array }> {
    this.head ??= this.rows<{ id: string; cursor_secret: Buffer }>(S.log([])).then(([r]) => ({ id: r!.id, secret: r!.cursor_secret }));
    return this.head;
  }

  async logId(): Promise<string> {
    return (await this.logRow()).id;
  }

  async cursorSecret(): Promise<Uint8Array> {
    return (await this.logRow()).secret;
  }

  async append(req: AppendRequest): Promise<AppendResult> {
    for (;;) {
      const result = await this.transaction(async (c): Promise<AppendResult | null> => {
        if (req.idempotency) {
          const { key, fingerprint, ttlMs } = req.idempotency;
          // Claims the key, or takes over an expired one; waits for a transaction claiming it now.
          const claimed = await this.rows(S.claimKey([req.projectId, key, fingerprint, req.eventId, req.now, req.now - ttlMs]), c);
          if (claimed.length === 0) return null;
        }
        const [{ seq }] = (await this.rows<{ seq: string }>(S.bump([req.stream]), c)) as [{ seq: string }];
        const [head] = (await this.rows<{ last_position: string; last_recorded_at: string }>(S.takePosition([req.now]), c)) as [
          { last_position: string; last_recorded_at: string },
        ];
        const position = Number(head.last_position);
        const recordedAt = Number(head.last_recorded_at);
        const body = req.build({ sequence: formatSequence(Number(seq)), recordedAt });
        await c.query(S.insert([position, req.eventId, req.projectId, req.inboxId, req.type, req.visibility, recordedAt, body]));
        return {
          kind: 'appended',
          event: {
            position,
            eventId: req.eventId,
            projectId: req.projectId,
            inboxId: req.inboxId,
            type: req.type,
            visibility: req.visibility,
            recordedAt,
            json: body,
          },
        };
      });
      if (result) return result;
      // A live key: its event committed with it (the claim waited for that), so it is there to read.
      const { key, fingerprint, ttlMs } = req.idempotency!;
      const [prior] = await this.rows<{ fingerprint: string; event_id: string; created_at: string; position: string }>(
        S.getKey([req.projectId, key]),
      );
      if (prior && Number(prior.created_at) > req.now - ttlMs) {
        return { kind: 'duplicate', eventId: prior.event_id, position: Number(prior.position), sameRequest: prior.fingerprint === fingerprint };
      }
      // Purged or expired since the claim was refused: claim again.
    }
  }

  async read(q: ReadQuery): Promise<ReadResult> {
    const upTo =
      q.recordedBefore !== null
        ? Number((await this.rows<{ position: string }>(S.horizon([q.recordedBefore])))[0]?.position ?? 0)
        : await this.lastPosition();
    if (upTo <= q.after) return { events: [], scannedTo: q.after, complete: true };
    const exact = q.types ? q.types.filter((t) => !t.endsWith('*')) : [];
    const prefixes = q.types ? q.types.filter((t) => t.endsWith('*')).map((t) => t.slice(0, -1)) : [];
    const vis = q.visibilities.filter((v) => VISIBILITY_SET.has(v));
    const shape = q.inboxes ? S.named : S.all;
    const filters = [vis, q.inboxes ?? q.allowedInboxes, q.types !== null, exact, prefixes];
    // Fast path, the plain query: within maxScan positions there are at most maxScan of the
    // project's rows, so a full page here is exactly the full page of the bounded scan below.
    const quick = await this.rows<EventRow>(shape.direct([q.projectId, q.after, Math.min(upTo, q.after + q.maxScan), ...filters, q.limit]));
    if (quick.length === q.limit) return { events: quick.map(toEvent), scannedTo: Number(quick[quick.length - 1]!.position), complete: false };
    const rows = await this.rows<EventRow>(shape.rows([q.projectId, q.after, upTo, ...filters, q.maxScan, q.limit]));
    if (rows.length === q.limit) return { events: rows.map(toEvent), scannedTo: Number(rows[rows.length - 1]!.position), complete: false };
    // A short page: the cursor moves to the last row the scan looked at, the project's (or its
    // named inboxes'), so it never moves with other projects' events (docs/events.md, "Cursors").
    // The scan's rows below upTo are all committed (position order is commit order), so this
    // statement's snapshot sees the same ones the previous one did.
    const [seen] = await this.rows<{ last: string | null; n: number }>(
      shape.scanned([q.projectId, q.after, upTo, ...(q.inboxes ? [q.inboxes] : []), q.maxScan]),
    );
    return { events: rows.map(toEvent), scannedTo: seen?.last != null ? Number(seen.last) : q.after, complete: (seen?.n ?? 0) < q.maxScan };
  }

  async readAll(after: number, limit: number): Promise<StoredEvent[]> {
    return (await this.rows<EventRow>(S.readAll([after, limit]))).map(toEvent);
  }

  async lastPosition(): Promise<number> {
    // The head row moves in the same transaction as the event it numbers.
    return Number((await this.rows<{ last_position: string }>(S.log([])))[0]!.last_position);
  }

  async positionOf(projectId: string, eventId: string): Promise<number | null> {
    const [row] = await this.rows<{ position: string }>(S.positionOf([projectId, eventId]));
    return row ? Number(row.position) : null;
  }

  async upsertType(
    projectId: string,
    name: string,
    version: number,
    decide: (existing: StoredEventType | null) => StoredEventType,
  ): Promise<StoredEventType> {
    // The row is locked while `decide` runs; a first registration that races another finds the
    // row taken at its INSERT and decides again, now seeing what the other stored.
    return this.transaction(async (c) => {
      const [row] = await this.rows<TypeRow>(S.lockType([projectId, name, version]), c);
      const next = decide(row ? toType(row) : null);
      const fields = JSON.stringify(next.fields);
      if (row) await c.query(S.updateType([projectId, name, version, next.description, fields, next.updatedAt]));
      else if ((await this.rows(S.insertType([projectId, name, version, next.description, fields, next.createdAt, next.updatedAt]), c)).length === 0) {
        throw new Raced();
      }
      return next;
    });
  }

  async getType(projectId: string, name: string, version: number): Promise<StoredEventType | null> {
    const [row] = await this.rows<TypeRow>(S.getType([projectId, name, version]));
    return row ? this.typeOf(row) : null;
  }

  async typeVersions(projectId: string, name: string, below: number | null, limit: number): Promise<StoredEventType[]> {
    return (await this.rows<TypeRow>(S.typeVersions([projectId, name, below ?? 2 ** 31 - 1, limit]))).map((r) => this.typeOf(r));
  }

  async listTypes(projectId: string): Promise<StoredEventType[]> {
    return (await this.rows<TypeRow>(S.listTypes([projectId]))).map((r) => this.typeOf(r));
  }

  /**
   * Every publish reads its type: a row read again unchanged comes back as the same object,
   * parsed once, so what callers derive from it can be found by identity.
   */
  private typeOf(row: TypeRow): StoredEventType {
    const signature = `${row.project_id}\n${row.name}\n${row.version}\n${row.created_at}\n${row.updated_at}\n${row.description}\n${row.fields}`;
    let type = this.types.get(signature);
    if (!type) {
      if (this.types.size >= 10_000) this.types.delete(this.types.keys().next().value!);
      type = toType(row);
      this.types.set(signature, type);
    }
    return type;
  }

  async purgeIdempotency(olderThan: number): Promise<number> {
    return (await this.pool.query(S.purge([olderThan]))).rowCount ?? 0;
  }
}
