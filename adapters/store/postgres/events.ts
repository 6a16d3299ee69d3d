// EventStore on PostgreSQL. Many writers on several connections (and machines) append at once, so
// the one thing SQLite gives for free must be made explicit: readers page and heal by position
// (`after: number`), which is only safe if a position is never made visible before a lower one.
//
// A log that never skips (docs/events.md, "On PostgreSQL: a log that never skips"): the log's one
// row (event_log) holds the last position handed out, and an append takes its positions with
// `UPDATE event_log SET last_position = last_position + n … RETURNING` as its last step before
// INSERT and COMMIT. The row lock that UPDATE takes is held to the end of the transaction, and the
// next appender's UPDATE waits for it and then reads the committed value, so:
// - position order is commit order: N+1 can only be taken after the transaction holding N has
//   committed (or rolled back, giving N back), and PostgreSQL makes a transaction visible before
//   it releases its locks, so any snapshot that sees N+1 sees N;
// - positions are gap-free (a rolled back append returns its numbers with the row), which keeps
//   the live feed's in-order fast path (`position === delivered + 1`).
// The cost is that commits of the log are serialized, each one's WAL flush inside the lock. Three
// things keep that cheap: only the tail (the UPDATE, one multi-row INSERT, COMMIT) runs under the
// lock, the idempotency claims and stream counters being taken before it; appends are group
// committed (like SQLite's group-commit.ts): those arriving while a batch commits go together in
// the next, one lock and one flush per batch; and a batch is one statement, append_events()
// (migration 007), so the lock is never held across a round trip to this process. Each body is
// built once, with placeholders the statement fills in (Assigned in lib/events/ports.ts).
// Chosen over the transaction-id scheme (store pg_current_xact_id(), read only below the
// snapshot's xmin, order by (xid, position)) because that needs a composite cursor through
// lib/events and a live feed that tolerates positions arriving out of order, and holds every reader
// behind the oldest writing transaction anywhere in the cluster (another database's included);
// this keeps the port as is and is correct by one lock. If many instances' write rate outgrows
// one flush at a time, that scheme is the way on (docs/events.md).
//
// Lock order in an append is always: idempotency key row, stream counter row, log row: no cycles.
import type { Pool, PoolClient, QueryConfig, QueryResultRow } from 'pg';
import {
  formatSequence,
  type AppendRequest,
  type AppendResult,
  type EventStore,
  type ReadBackQuery,
  type ReadQuery,
  type ReadResult,
  type StoredEventType,
} from '../../../lib/events/ports.ts';
import type { StoredEvent } from '../../../lib/events/types.ts';
import { EventTypeCache, toEvent, toType, VISIBILITY_SET, type EventRow, type KeyRow, type TypeRow } from '../rows/events.ts';
import { KeptReads, type PgChanges } from './changes.ts';
import { arrayLiteral, inTransaction, rowsOf, statements, type Queryable } from './sql.ts';

const COLUMNS = 'position, event_id, project_id, inbox_id, type, visibility, recorded_at, body';

const stmt = statements('events');

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
  scanned: stmt(
    `scanned.${named}`,
    `SELECT MAX(position) AS last, COUNT(*)::int AS n FROM (${scan(named, 'position', '$4', named ? '$5' : '$4')}) s`,
  ),
});

/**
 * readBack's statements: the same bounded scan walking down from $2 (exclusive), at most $3 of
 * the rows; the filters keep their numbers ($4 to $8), $9 the page.
 */
const readBackShapes = (named: boolean) => {
  const scanBack = (cols: string, inboxes: string) =>
    `SELECT ${cols} FROM events WHERE project_id = $1 ${named ? `AND inbox_id = ANY(${inboxes}::text[])` : ''}
       AND position < $2 ORDER BY position DESC LIMIT $3`;
  return {
    rows: stmt(
      `rowsBack.${named}`,
      `SELECT ${COLUMNS} FROM (${scanBack(COLUMNS, '$5')}) s WHERE ${named ? '' : `${inboxFilter(false)} AND`} ${FILTERS}
         ORDER BY position DESC LIMIT $9`,
    ),
    scanned: stmt(`scannedBack.${named}`, `SELECT MIN(position) AS last, COUNT(*)::int AS n FROM (${scanBack('position', '$4')}) s`),
  };
};

const S = {
  // A batch of appends in one statement (migration 007): arrays of one element per append.
  appendEvents: stmt(
    'appendEvents',
    `SELECT * FROM append_events($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
       $8::text[], $9::text[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::boolean[])`,
  ),
  getKey: stmt(
    'getKey',
    `SELECT k.fingerprint, k.event_id, k.created_at, e.position FROM event_idempotency k JOIN events e ON e.event_id = k.event_id
     WHERE k.project_id = $1 AND k.key = $2`,
  ),
  log: stmt('log', 'SELECT id, cursor_secret, last_position FROM event_log'),
  horizon: stmt('horizon', 'SELECT position FROM events WHERE recorded_at <= $1 ORDER BY recorded_at DESC, position DESC LIMIT 1'),
  readAll: stmt('readAll', `SELECT ${COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2`),
  positionOf: stmt('positionOf', 'SELECT position FROM events WHERE project_id = $1 AND event_id = $2'),
  atPositions: stmt(
    'atPositions',
    `SELECT ${COLUMNS} FROM events WHERE project_id = $1 AND position = ANY($2::bigint[]) ORDER BY position`,
  ),
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
  namedBack: readBackShapes(true),
  allBack: readBackShapes(false),
};

/** Lost a race for a row another transaction inserted first: roll back and retry. */
class Raced extends Error {}

/** A row of append_events(): see migration 007. */
interface AppendRow {
  r_index: number;
  r_kind: 'appended' | 'duplicate' | 'retry';
  r_event_id: string | null;
  r_position: number | null;
  r_recorded_at: number | null;
  r_seq: number | null;
  r_fingerprint: string | null;
}

/** An event's JSON around its recorded time and its sequence (in either order), which the statement fills in. */
interface Body {
  head: string;
  middle: string;
  tail: string;
  timeFirst: boolean;
}

// The placeholders `build` is given (lib/events/ports.ts, Assigned): each lands in the JSON as a
// string exactly as given, before anything a caller wrote, so the first occurrence is the field.
const TIME_MARK = '"postern:time"';
const SEQUENCE_MARK = '"postern:sequence"';

function bodyPieces(req: AppendRequest): Body {
  const json = req.build({ sequence: JSON.parse(SEQUENCE_MARK) as string, time: JSON.parse(TIME_MARK) as string });
  const t = json.indexOf(TIME_MARK);
  const q = json.indexOf(SEQUENCE_MARK);
  if (t < 0 || q < 0) throw new Error('append: the event JSON must hold its sequence and time as given');
  const [a, aLength, b, bLength] = t < q ? [t, TIME_MARK.length, q, SEQUENCE_MARK.length] : [q, SEQUENCE_MARK.length, t, TIME_MARK.length];
  // The quotes stay in the pieces: the statement puts in the bare values.
  return { head: json.slice(0, a + 1), middle: json.slice(a + aLength - 1, b + 1), tail: json.slice(b + bLength - 1), timeFirst: t < q };
}

interface Pending {
  req: AppendRequest;
  resolve(result: AppendResult): void;
  reject(err: unknown): void;
}

/** Appends in one transaction at most: bounds the statement's arrays and the time the log is held. */
const MAX_BATCH = 256;

export class PgEventStore implements EventStore {
  private readonly types = new EventTypeCache();
  private readonly queue: Pending[] = [];
  private pumping = false;
  private head: Promise<{ id: string; secret: Uint8Array }> | null = null;

  /**
   * A type's versions as read for each POST /events, kept (one round trip each otherwise) and
   * dropped when any process changes the project's types (changes.ts); none without `changes`.
   */
  private readonly versions: KeptReads<StoredEventType[]> | null;

  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(
    private readonly pool: Pool,
    changes: PgChanges | null = null,
    keepMs = 0,
  ) {
    this.versions = changes && keepMs > 0 ? new KeptReads<StoredEventType[]>(changes, keepMs) : null;
    changes?.on('postern_event_types', (projectId) =>
      projectId === null ? this.versions?.drop(null) : this.versions?.dropPrefix(`${projectId}\n`),
    );
  }

  private rows<R extends QueryResultRow>(q: QueryConfig<unknown[]>, client: Queryable = this.pool): Promise<R[]> {
    return rowsOf<R>(client, q);
  }

  /** Runs `fn` in a transaction (sql.ts), again from the start if it lost a race (`Raced`), `beforeRetry` first. */
  private async transaction<T>(fn: (c: PoolClient) => Promise<T>, beforeRetry?: () => void): Promise<T> {
    for (;;) {
      try {
        return await inTransaction(this.pool, fn);
      } catch (err) {
        if (!(err instanceof Raced)) throw err;
        beforeRetry?.();
      }
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

  append(req: AppendRequest): Promise<AppendResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ req, resolve, reject });
      void this.pump();
    });
  }

  /**
   * Group commit: the appends that arrive while a batch commits go together in the next one, so
   * the log's lock (held to COMMIT, its WAL flush included) is taken once per batch, not per event.
   */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, MAX_BATCH);
        try {
          await this.commitBatch(batch);
        } catch {
          // One bad append (a taken event id, a missing project) fails the batch: each alone, so it fails alone.
          for (const one of batch) await this.commitBatch([one]).catch((err: unknown) => one.reject(err));
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Appends a batch in one statement and settles each of its appends; throws (settling none) if it failed. */
  private async commitBatch(batch: Pending[]): Promise<void> {
    // Keys: the first request of a key in the batch claims it; the others repeat it.
    const writing: Array<{ pending: Pending; body: Body }> = [];
    const sameAs: Array<[Pending, Pending]> = [];
    const byKey = new Map<string, Pending>();
    for (const p of batch) {
      const k = p.req.idempotency && `${p.req.projectId}\n${p.req.idempotency.key}`;
      const first = k ? byKey.get(k) : undefined;
      if (first) {
        sameAs.push([p, first]);
        continue;
      }
      let body: Body;
      try {
        body = bodyPieces(p.req);
      } catch (err) {
        // Refused before the statement: no position or sequence is taken for it.
        p.reject(err);
        continue;
      }
      if (k) byKey.set(k, p);
      writing.push({ pending: p, body });
    }
    if (writing.length === 0) {
      for (const [p] of sameAs) this.requeue(p);
      return;
    }
    const col = <T>(f: (r: AppendRequest, b: Body) => T) => writing.map((w) => f(w.pending.req, w.body));
    const rows = await this.rows<AppendRow>(
      S.appendEvents([
        col((r) => r.projectId),
        col((r) => r.eventId),
        col((r) => r.inboxId),
        col((r) => r.type),
        col((r) => r.visibility),
        col((r) => r.stream),
        col((r) => r.now),
        col((r) => r.idempotency?.key ?? null),
        col((r) => r.idempotency?.fingerprint ?? null),
        col((r) => (r.idempotency ? r.now - r.idempotency.ttlMs : null)),
        col((_, b) => b.head),
        col((_, b) => b.middle),
        col((_, b) => b.tail),
        col((_, b) => b.timeFirst),
      ]),
    );
    const results = new Map<Pending, AppendResult>();
    // The fingerprint a duplicate's first event was stored with.
    const stored = new Map<Pending, string>();
    for (const row of rows) {
      const { pending, body } = writing[row.r_index - 1]!;
      const { req } = pending;
      if (row.r_kind === 'appended') {
        const recordedAt = row.r_recorded_at!;
        // The body as the statement stored it.
        const [time, sequence] = [new Date(recordedAt).toISOString(), formatSequence(row.r_seq!)];
        const json = body.timeFirst
          ? body.head + time + body.middle + sequence + body.tail
          : body.head + sequence + body.middle + time + body.tail;
        const event = {
          position: row.r_position!,
          eventId: req.eventId,
          projectId: req.projectId,
          inboxId: req.inboxId,
          type: req.type,
          visibility: req.visibility,
          recordedAt,
          json,
        };
        results.set(pending, { kind: 'appended', event });
      } else if (row.r_kind === 'duplicate') {
        stored.set(pending, row.r_fingerprint!);
        results.set(pending, {
          kind: 'duplicate',
          eventId: row.r_event_id!,
          position: row.r_position!,
          sameRequest: row.r_fingerprint === req.idempotency!.fingerprint,
        });
      }
    }
    for (const { pending } of writing) {
      const result = results.get(pending);
      // No result ('retry'): the key's event was purged or expired since the claim was refused.
      if (result) pending.resolve(result);
      else this.requeue(pending);
    }
    for (const [p, first] of sameAs) {
      const result = results.get(first);
      if (result?.kind === 'appended') {
        p.resolve({
          kind: 'duplicate',
          eventId: result.event.eventId,
          position: result.event.position,
          sameRequest: first.req.idempotency!.fingerprint === p.req.idempotency!.fingerprint,
        });
      } else if (result?.kind === 'duplicate') {
        p.resolve({ ...result, sameRequest: stored.get(first) === p.req.idempotency!.fingerprint });
      } else this.requeue(p);
    }
  }

  private requeue(p: Pending): void {
    this.queue.push(p);
    void this.pump();
  }

  async read(q: ReadQuery): Promise<ReadResult> {
    const upTo =
      q.recordedBefore !== null
        ? ((await this.rows<{ position: number }>(S.horizon([q.recordedBefore])))[0]?.position ?? 0)
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
    if (quick.length === q.limit) return { events: quick.map(toEvent), scannedTo: quick[quick.length - 1]!.position, complete: false };
    const rows = await this.rows<EventRow>(shape.rows([q.projectId, q.after, upTo, ...filters, q.maxScan, q.limit]));
    if (rows.length === q.limit) return { events: rows.map(toEvent), scannedTo: rows[rows.length - 1]!.position, complete: false };
    // A short page: the cursor moves to the last row the scan looked at, the project's (or its
    // named inboxes'), so it never moves with other projects' events (docs/events.md, "Cursors").
    // The scan's rows below upTo are all committed (position order is commit order), so this
    // statement's snapshot sees the same ones the previous one did.
    const [seen] = await this.rows<{ last: number | null; n: number }>(
      shape.scanned([q.projectId, q.after, upTo, ...(q.inboxes ? [q.inboxes] : []), q.maxScan]),
    );
    return { events: rows.map(toEvent), scannedTo: seen?.last ?? q.after, complete: (seen?.n ?? 0) < q.maxScan };
  }

  async readBack(q: ReadBackQuery): Promise<ReadResult> {
    const upTo =
      q.recordedBefore !== null
        ? ((await this.rows<{ position: number }>(S.horizon([q.recordedBefore])))[0]?.position ?? 0)
        : await this.lastPosition();
    const below = q.before === null ? upTo + 1 : Math.min(q.before, upTo + 1);
    const from = q.before ?? 0;
    if (below <= 1) return { events: [], scannedTo: from, complete: true };
    const exact = q.types ? q.types.filter((t) => !t.endsWith('*')) : [];
    const prefixes = q.types ? q.types.filter((t) => t.endsWith('*')).map((t) => t.slice(0, -1)) : [];
    const vis = q.visibilities.filter((v) => VISIBILITY_SET.has(v));
    const shape = q.inboxes ? S.namedBack : S.allBack;
    const rows = await this.rows<EventRow>(
      shape.rows([q.projectId, below, q.maxScan, vis, q.inboxes ?? q.allowedInboxes, q.types !== null, exact, prefixes, q.limit]),
    );
    if (rows.length === q.limit) return { events: rows.map(toEvent), scannedTo: rows[rows.length - 1]!.position, complete: false };
    const [seen] = await this.rows<{ last: number | null; n: number }>(
      shape.scanned([q.projectId, below, q.maxScan, ...(q.inboxes ? [q.inboxes] : [])]),
    );
    return { events: rows.map(toEvent), scannedTo: seen?.last ?? from, complete: (seen?.n ?? 0) < q.maxScan };
  }

  async readAll(after: number, limit: number): Promise<StoredEvent[]> {
    return (await this.rows<EventRow>(S.readAll([after, limit]))).map(toEvent);
  }

  async lastPosition(): Promise<number> {
    // The head row moves in the same transaction as the event it numbers.
    return (await this.rows<{ last_position: number }>(S.log([])))[0]!.last_position;
  }

  async atPositions(projectId: string, positions: readonly number[]): Promise<StoredEvent[]> {
    if (positions.length === 0) return [];
    return (await this.rows<EventRow>(S.atPositions([projectId, arrayLiteral(positions)]))).map(toEvent);
  }

  async positionOf(projectId: string, eventId: string): Promise<number | null> {
    const [row] = await this.rows<{ position: number }>(S.positionOf([projectId, eventId]));
    return row?.position ?? null;
  }

  async upsertType(
    projectId: string,
    name: string,
    version: number,
    decide: (existing: StoredEventType | null) => StoredEventType,
  ): Promise<StoredEventType> {
    // The row is locked while `decide` runs; a first registration that races another finds the
    // row taken at its INSERT and decides again, now seeing what the other stored.
    const stored = await this.transaction(async (c) => {
      const [row] = await this.rows<TypeRow>(S.lockType([projectId, name, version]), c);
      const next = decide(row ? toType(row) : null);
      const fields = JSON.stringify(next.fields);
      if (row) await c.query(S.updateType([projectId, name, version, next.description, fields, next.updatedAt]));
      else if (
        (await this.rows(S.insertType([projectId, name, version, next.description, fields, next.createdAt, next.updatedAt]), c)).length ===
        0
      ) {
        throw new Raced();
      }
      return next;
    });
    // This process's next read sees it at once, before its notice arrives.
    this.versions?.dropPrefix(`${projectId}\n`);
    return stored;
  }

  async getType(projectId: string, name: string, version: number): Promise<StoredEventType | null> {
    const [row] = await this.rows<TypeRow>(S.getType([projectId, name, version]));
    return row ? this.types.of(row) : null;
  }

  async typeVersions(projectId: string, name: string, below: number | null, limit: number): Promise<StoredEventType[]> {
    const read = async () =>
      (await this.rows<TypeRow>(S.typeVersions([projectId, name, below ?? 2 ** 31 - 1, limit]))).map((r) => this.types.of(r));
    if (!this.versions) return read();
    return (await this.versions.get(`${projectId}\n${name}\n${below}\n${limit}`, read))!;
  }

  async listTypes(projectId: string): Promise<StoredEventType[]> {
    return (await this.rows<TypeRow>(S.listTypes([projectId]))).map((r) => this.types.of(r));
  }

  async keyedEvent(projectId: string, key: string, since: number): Promise<{ eventId: string; position: number } | null> {
    const [prior] = await this.rows<KeyRow>(S.getKey([projectId, key]));
    return prior && prior.created_at > since ? { eventId: prior.event_id, position: prior.position } : null;
  }

  async purgeIdempotency(olderThan: number): Promise<number> {
    return (await this.pool.query(S.purge([olderThan]))).rowCount ?? 0;
  }
}
