// EventStore on SQLite. Appends run as IMMEDIATE transactions: SQLite has one writer at a time
// (across processes too), so the position AUTOINCREMENT assigns, the stream counter, the recorded
// time and the idempotency key are decided together and commit order is position order.
//
// Appends go through the connection's group commit (group-commit.ts): those of one turn of the
// event loop share a transaction with each other and with the other stores' small writes.
import type { Statement } from 'better-sqlite3';
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
import type { StoredEvent, Visibility } from '../../../lib/events/types.ts';
import { EventTypeCache, toEvent, toType, VISIBILITY_SET, type EventRow, type KeyRow, type TypeRow } from '../rows/events.ts';
import type { Db } from './db.ts';
import { groupCommitOf, type GroupCommit } from './group-commit.ts';

/** The prepared reads of one filter shape: the fast page, the bounded page, and how far a short page looked. */
interface ReadShape {
  direct: Statement<unknown[], EventRow>;
  rows: Statement<unknown[], EventRow>;
  scanned: Statement<unknown[], { last: number | null; n: number }>;
}

const COLUMNS = 'position, event_id, project_id, inbox_id, type, visibility, recorded_at, body';

export class SqliteEventStore implements EventStore {
  private readonly s: {
    getKey: Statement<[string, string], KeyRow>;
    dropKey: Statement<[string, string]>;
    putKey: Statement<[string, string, string, string, number, number]>;
    lastTime: Statement<[], { recorded_at: number }>;
    bump: Statement<[string], { seq: number }>;
    insert: Statement<[string, string, string | null, string, string, number, string]>;
    horizon: Statement<[number], { position: number }>;
    last: Statement<[], { position: number | null }>;
    readAll: Statement<[number, number], EventRow>;
    positionOf: Statement<[string, string], { position: number }>;
    atPositions: Statement<[string, string], EventRow>;
    getType: Statement<[string, string, number], TypeRow>;
    typeVersions: Statement<[string, string, number, number], TypeRow>;
    listTypes: Statement<[string], TypeRow>;
    putType: Statement<[string, string, number, string, string, number, number]>;
    purge: Statement<[number]>;
  };
  private readonly appendOne: (req: AppendRequest) => AppendResult;
  private readonly commits: GroupCommit;
  private readonly types = new EventTypeCache();
  private readonly reads = new Map<string, ReadShape>();
  private readonly upsertTx: (
    projectId: string,
    name: string,
    version: number,
    decide: (existing: StoredEventType | null) => StoredEventType,
  ) => StoredEventType;

  constructor(private readonly db: Db) {
    this.s = {
      getKey: db.prepare('SELECT fingerprint, event_id, position, created_at FROM event_idempotency WHERE project_id = ? AND key = ?'),
      dropKey: db.prepare('DELETE FROM event_idempotency WHERE project_id = ? AND key = ?'),
      putKey: db.prepare(
        'INSERT INTO event_idempotency (project_id, key, fingerprint, event_id, position, created_at) VALUES (?, ?, ?, ?, ?, ?)',
      ),
      lastTime: db.prepare('SELECT recorded_at FROM events ORDER BY position DESC LIMIT 1'),
      bump: db.prepare(
        'INSERT INTO event_streams (stream, seq) VALUES (?, 1) ON CONFLICT (stream) DO UPDATE SET seq = seq + 1 RETURNING seq',
      ),
      insert: db.prepare(
        'INSERT INTO events (event_id, project_id, inbox_id, type, visibility, recorded_at, body) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      horizon: db.prepare('SELECT position FROM events WHERE recorded_at <= ? ORDER BY recorded_at DESC, position DESC LIMIT 1'),
      last: db.prepare('SELECT MAX(position) AS position FROM events'),
      readAll: db.prepare(`SELECT ${COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?`),
      positionOf: db.prepare('SELECT position FROM events WHERE project_id = ? AND event_id = ?'),
      // The positions as one JSON array: one statement whatever their number.
      atPositions: db.prepare(
        `SELECT ${COLUMNS} FROM events WHERE project_id = ? AND position IN (SELECT value FROM json_each(?)) ORDER BY position`,
      ),
      getType: db.prepare('SELECT * FROM event_types WHERE project_id = ? AND name = ? AND version = ?'),
      typeVersions: db.prepare('SELECT * FROM event_types WHERE project_id = ? AND name = ? AND version < ? ORDER BY version DESC LIMIT ?'),
      listTypes: db.prepare('SELECT * FROM event_types WHERE project_id = ? ORDER BY name, version'),
      putType: db.prepare(`INSERT INTO event_types (project_id, name, version, description, fields, created_at, updated_at)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (project_id, name, version) DO UPDATE SET
          description = excluded.description, fields = excluded.fields, updated_at = excluded.updated_at`),
      purge: db.prepare('DELETE FROM event_idempotency WHERE created_at < ?'),
    };

    this.commits = groupCommitOf(db);
    // The recorded time of the transaction's last append: read once per transaction, not once per append.
    let lastRecorded: number | null = null;
    let lastRecordedIn = -1;
    const append = (req: AppendRequest): AppendResult => {
      const s = this.s;
      if (lastRecordedIn !== this.commits.transaction) {
        lastRecorded = null;
        lastRecordedIn = this.commits.transaction;
      }
      if (req.idempotency) {
        const { key, fingerprint, ttlMs } = req.idempotency;
        const prior = s.getKey.get(req.projectId, key);
        if (prior && prior.created_at > req.now - ttlMs) {
          return { kind: 'duplicate', eventId: prior.event_id, position: prior.position, sameRequest: prior.fingerprint === fingerprint };
        }
        // An expired key is free again.
        if (prior) s.dropKey.run(req.projectId, key);
      }
      const previous = lastRecorded ?? s.lastTime.get()?.recorded_at ?? 0;
      const recordedAt = Math.max(req.now, previous);
      const seq = s.bump.get(req.stream)!.seq;
      const body = req.build({ sequence: formatSequence(seq), time: new Date(recordedAt).toISOString() });
      const info = s.insert.run(req.eventId, req.projectId, req.inboxId, req.type, req.visibility, recordedAt, body);
      const position = Number(info.lastInsertRowid);
      if (req.idempotency) {
        s.putKey.run(req.projectId, req.idempotency.key, req.idempotency.fingerprint, req.eventId, position, req.now);
      }
      lastRecorded = recordedAt;
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
    };
    // In an IMMEDIATE transaction (the group commit's): the write lock is taken before the key
    // and the counters are read, so two processes cannot both decide on the same ones.
    this.appendOne = append;

    const upsert = db.transaction(
      (projectId: string, name: string, version: number, decide: (existing: StoredEventType | null) => StoredEventType) => {
        const row = this.s.getType.get(projectId, name, version);
        const next = decide(row ? toType(row) : null);
        this.s.putType.run(projectId, name, version, next.description, JSON.stringify(next.fields), next.createdAt, next.updatedAt);
        return next;
      },
    );
    this.upsertTx = (projectId, name, version, decide) => upsert.immediate(projectId, name, version, decide);
  }

  async logId(): Promise<string> {
    return (this.db.prepare('SELECT id FROM event_log').get() as { id: string }).id;
  }

  async cursorSecret(): Promise<Uint8Array> {
    return (this.db.prepare('SELECT cursor_secret FROM event_log').get() as { cursor_secret: Buffer }).cursor_secret;
  }

  append(req: AppendRequest): Promise<AppendResult> {
    return this.commits.run(() => this.appendOne(req));
  }

  async read(q: ReadQuery): Promise<ReadResult> {
    const upTo = q.recordedBefore !== null ? (this.s.horizon.get(q.recordedBefore)?.position ?? 0) : (this.s.last.get()?.position ?? 0);
    if (upTo <= q.after) return { events: [], scannedTo: q.after, complete: true };
    const exact = q.types ? q.types.filter((t) => !t.endsWith('*')) : [];
    const globs = q.types ? q.types.filter((t) => t.endsWith('*')) : [];
    const shape = this.readShape(
      q.visibilities,
      q.inboxes?.length ?? null,
      q.allowedInboxes.length,
      q.types !== null,
      exact.length,
      globs.length,
      false,
    );
    const filters = [...(q.inboxes ?? q.allowedInboxes), ...exact, ...globs, q.limit];
    // Fast path, the plain query: within maxScan positions there are at most maxScan of the
    // project's rows, so a full page here is exactly the full page of the bounded scan below.
    const quick = shape.direct.all(q.projectId, q.after, Math.min(upTo, q.after + q.maxScan), ...filters);
    if (quick.length === q.limit) return { events: quick.map(toEvent), scannedTo: quick[quick.length - 1]!.position, complete: false };
    const scan = q.inboxes
      ? [...q.inboxes.flatMap((inbox) => [inbox, q.projectId, q.after, upTo]), q.maxScan]
      : [q.projectId, q.after, upTo, q.maxScan];
    const rows = shape.rows.all(...scan, ...(q.inboxes === null ? q.allowedInboxes : []), ...exact, ...globs, q.limit);
    if (rows.length === q.limit) return { events: rows.map(toEvent), scannedTo: rows[rows.length - 1]!.position, complete: false };
    // A short page: the cursor moves to the last row the scan looked at, the project's (or its
    // named inboxes'), so it never moves with other projects' events (docs/events.md, "Cursors").
    const seen = shape.scanned.get(...scan)!;
    return { events: rows.map(toEvent), scannedTo: seen.last ?? q.after, complete: seen.n < q.maxScan };
  }

  async readBack(q: ReadBackQuery): Promise<ReadResult> {
    const upTo = q.recordedBefore !== null ? (this.s.horizon.get(q.recordedBefore)?.position ?? 0) : (this.s.last.get()?.position ?? 0);
    const below = q.before === null ? upTo + 1 : Math.min(q.before, upTo + 1);
    const from = q.before ?? 0;
    if (below <= 1) return { events: [], scannedTo: from, complete: true };
    const exact = q.types ? q.types.filter((t) => !t.endsWith('*')) : [];
    const globs = q.types ? q.types.filter((t) => t.endsWith('*')) : [];
    const shape = this.readShape(
      q.visibilities,
      q.inboxes?.length ?? null,
      q.allowedInboxes.length,
      q.types !== null,
      exact.length,
      globs.length,
      true,
    );
    // The same bounded scan as read(), walking the index downwards from `below`.
    const scan = q.inboxes ? [...q.inboxes.flatMap((inbox) => [inbox, q.projectId, below]), q.maxScan] : [q.projectId, below, q.maxScan];
    const rows = shape.rows.all(...scan, ...(q.inboxes === null ? q.allowedInboxes : []), ...exact, ...globs, q.limit);
    if (rows.length === q.limit) return { events: rows.map(toEvent), scannedTo: rows[rows.length - 1]!.position, complete: false };
    const seen = shape.scanned.get(...scan)!;
    return { events: rows.map(toEvent), scannedTo: seen.last ?? from, complete: seen.n < q.maxScan };
  }

  /**
   * The SELECTs for one shape of filter, prepared once: lists become placeholders (never JSON
   * unpacked per row), visibilities are literals from the closed enum. The inner scan walks an
   * index in position order, over the project's rows or each named inbox's (merged), and stops
   * after `maxScan` rows, so a sparse filter costs a bounded read; who may see what and the types
   * are filtered on top.
   */
  private readShape(
    visibilities: readonly Visibility[],
    named: number | null,
    allowed: number,
    typed: boolean,
    exact: number,
    globs: number,
    /** Newest first, below a position (readBack) rather than after one. */
    desc: boolean,
  ): ReadShape {
    const vis = visibilities.filter((v) => VISIBILITY_SET.has(v));
    const key = `${vis.join(',')}|${named}|${allowed}|${typed}|${exact}|${globs}|${desc}`;
    const order = desc ? 'ORDER BY position DESC' : 'ORDER BY position';
    const range = desc ? 'position < ?' : 'position > ? AND position <= ?';
    let shape = this.reads.get(key);
    if (!shape) {
      const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');
      // Named inboxes (each one the caller may use: the route checked): one ordered index scan
      // each, merged by SQLite as it goes (a compound ORDER BY), never sorted whole.
      const scan = (cols: string) =>
        named === null
          ? `SELECT ${cols} FROM events WHERE project_id = ? AND ${range} ${order} LIMIT ?`
          : `${Array.from({ length: named }, () => `SELECT ${cols} FROM events WHERE inbox_id = ? AND project_id = ? AND ${range}`).join(' UNION ALL ')}
            ${order} LIMIT ?`;
      const visCond = `visibility IN (${vis.length ? vis.map((v) => `'${v}'`).join(', ') : "''"})`;
      const inboxCond =
        named !== null
          ? `inbox_id IN (${marks(named)})`
          : allowed > 0
            ? `(inbox_id IS NULL OR inbox_id IN (${marks(allowed)}))`
            : 'inbox_id IS NULL';
      const typeParts = [...(exact > 0 ? [`type IN (${marks(exact)})`] : []), ...Array.from({ length: globs }, () => 'type GLOB ?')];
      const typeConds = typed ? [`(${typeParts.length ? typeParts.join(' OR ') : '0'})`] : [];
      // On top of the bounded scan; the named inboxes are the scan itself.
      const conds = [visCond, ...(named === null ? [inboxCond] : []), ...typeConds];
      shape = {
        direct: this.db.prepare(`SELECT ${COLUMNS} FROM events
          WHERE project_id = ? AND position > ? AND position <= ? AND ${[visCond, inboxCond, ...typeConds].join(' AND ')}
          ORDER BY position LIMIT ?`),
        rows: this.db.prepare(`SELECT ${COLUMNS} FROM (${scan(COLUMNS)}) WHERE ${conds.join(' AND ')} ${order} LIMIT ?`),
        // `last`: the furthest row the scan looked at, in its direction.
        scanned: this.db.prepare(`SELECT ${desc ? 'MIN' : 'MAX'}(position) AS last, COUNT(*) AS n FROM (${scan('position')})`),
      };
      // Bounded: shapes vary with the number of inboxes; the oldest shape goes first.
      if (this.reads.size >= 256) this.reads.delete(this.reads.keys().next().value!);
      this.reads.set(key, shape);
    }
    return shape;
  }

  async readAll(after: number, limit: number): Promise<StoredEvent[]> {
    return this.s.readAll.all(after, limit).map(toEvent);
  }

  async lastPosition(): Promise<number> {
    return this.s.last.get()?.position ?? 0;
  }

  async positionOf(projectId: string, eventId: string): Promise<number | null> {
    return this.s.positionOf.get(projectId, eventId)?.position ?? null;
  }

  async atPositions(projectId: string, positions: readonly number[]): Promise<StoredEvent[]> {
    if (positions.length === 0) return [];
    return this.s.atPositions.all(projectId, JSON.stringify(positions)).map(toEvent);
  }

  async upsertType(
    projectId: string,
    name: string,
    version: number,
    decide: (existing: StoredEventType | null) => StoredEventType,
  ): Promise<StoredEventType> {
    return this.upsertTx(projectId, name, version, decide);
  }

  async getType(projectId: string, name: string, version: number): Promise<StoredEventType | null> {
    const row = this.s.getType.get(projectId, name, version);
    return row ? this.types.of(row) : null;
  }

  async typeVersions(projectId: string, name: string, below: number | null, limit: number): Promise<StoredEventType[]> {
    return this.s.typeVersions.all(projectId, name, below ?? Number.MAX_SAFE_INTEGER, limit).map((r) => this.types.of(r));
  }

  async listTypes(projectId: string): Promise<StoredEventType[]> {
    return this.s.listTypes.all(projectId).map((r) => this.types.of(r));
  }

  async keyedEvent(projectId: string, key: string, since: number): Promise<{ eventId: string; position: number } | null> {
    const prior = this.s.getKey.get(projectId, key);
    return prior && prior.created_at > since ? { eventId: prior.event_id, position: prior.position } : null;
  }

  async purgeIdempotency(olderThan: number): Promise<number> {
    return this.s.purge.run(olderThan).changes;
  }
}
