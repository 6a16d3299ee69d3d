// The store as a portable file, for moving it from one engine to the other (`postern admin export`
// and `import`, docs/deployment.md, "From one machine to several"): JSON lines, a header, one line
// per row ({"table", "row"}, blobs in base64, 0/1 flags as booleans), and a last line with each
// table's row count, so a cut-off file is refused rather than half imported. Both engines have the
// same tables and columns (the PostgreSQL migrations copy SQLite's names), so one list of tables
// serves both; each engine's dump.ts reads and writes its rows through it.
import { closeSync, createReadStream, fstatSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';

export const DUMP_FORMAT = 'postern-store';
export const DUMP_VERSION = 1;

/** How a column travels: as a JSON string, number, boolean (SQLite's 0/1) or base64 string (a blob). */
export type ColumnKind = 'text' | 'int' | 'bool' | 'bytes';

export interface DumpTable {
  name: string;
  /** In the order of the file's rows' keys. */
  columns: Readonly<Record<string, ColumnKind>>;
  /** ORDER BY: a stable order, the primary key's. */
  order: string;
}

const t = (name: string, order: string, columns: Record<string, ColumnKind>): DumpTable => ({ name, order, columns });

/**
 * Every table carried, parents before children (foreign keys hold row by row). `event_log` is the
 * log's one row (its id and cursor secret, so cursors stay valid): an import writes it over the
 * new store's own. `event_idempotency.position` is SQLite's column; PostgreSQL finds it through
 * the event, and its dump and load do so.
 */
export const DUMP_TABLES: readonly DumpTable[] = [
  t('event_log', 'id', { id: 'text', cursor_secret: 'bytes' }),
  t('projects', 'id', { id: 'text', name: 'text', created_at: 'int' }),
  t('members', 'id', { id: 'text', project_id: 'text', email: 'text', created_at: 'int' }),
  t('inboxes', 'id', { id: 'text', project_id: 'text', imap_user: 'text', mode: 'text', created_at: 'int' }),
  t('inbox_addresses', 'address', { address: 'text', inbox_id: 'text', position: 'int' }),
  t('inbox_identities', 'inbox_id, address', {
    inbox_id: 'text',
    address: 'text',
    display_name: 'text',
    signature_text: 'text',
    signature_html: 'text',
    updated_at: 'int',
  }),
  t('grants', 'member_id, inbox_id', { member_id: 'text', inbox_id: 'text', role: 'text', created_at: 'int' }),
  t('tokens', 'id', {
    id: 'text',
    project_id: 'text',
    member_id: 'text',
    scopes: 'text',
    secret_hash: 'bytes',
    created_at: 'int',
    expires_at: 'int',
    revoked_at: 'int',
  }),
  t('token_inboxes', 'token_id, inbox_id', { token_id: 'text', inbox_id: 'text' }),
  t('sessions', 'id', {
    id: 'text',
    member_id: 'text',
    secret_hash: 'bytes',
    created_at: 'int',
    expires_at: 'int',
    revoked_at: 'int',
    passkey_id: 'text',
    device: 'text',
    last_used_at: 'int',
  }),
  t('passkey_invites', 'id', { id: 'text', member_id: 'text', secret_hash: 'bytes', created_at: 'int', expires_at: 'int', used_at: 'int' }),
  t('passkeys', 'id', {
    id: 'text',
    member_id: 'text',
    credential_id: 'text',
    public_key: 'bytes',
    counter: 'int',
    transports: 'text',
    name: 'text',
    backed_up: 'bool',
    created_at: 'int',
    last_used_at: 'int',
    disabled_at: 'int',
  }),
  t('webauthn_challenges', 'challenge', {
    challenge: 'text',
    kind: 'text',
    invite_id: 'text',
    member_id: 'text',
    operation: 'text',
    expires_at: 'int',
  }),
  t('epoch_keys', 'inbox_id, epoch', {
    inbox_id: 'text',
    epoch: 'int',
    public_key: 'bytes',
    fingerprint: 'text',
    sealed_private: 'bytes',
    created_at: 'int',
  }),
  t('member_keys', 'member_id', { member_id: 'text', public_key: 'bytes', fingerprint: 'text', updated_at: 'int' }),
  t('member_key_blobs', 'member_id', { member_id: 'text', blob: 'text', version: 'int', updated_at: 'int' }),
  t('key_handovers', 'id', {
    id: 'text',
    member_id: 'text',
    requester_session: 'text',
    device: 'text',
    requester_key: 'text',
    approver_key: 'text',
    sealed: 'text',
    created_at: 'int',
    expires_at: 'int',
  }),
  t('message_keys', 'inbox_id, msg_guid', { inbox_id: 'text', msg_guid: 'text', epoch: 'int', wrapped_dek: 'bytes', created_at: 'int' }),
  t('event_types', 'project_id, name, version', {
    project_id: 'text',
    name: 'text',
    version: 'int',
    description: 'text',
    fields: 'text',
    created_at: 'int',
    updated_at: 'int',
  }),
  t('events', 'position', {
    position: 'int',
    event_id: 'text',
    project_id: 'text',
    inbox_id: 'text',
    type: 'text',
    visibility: 'text',
    recorded_at: 'int',
    body: 'text',
  }),
  t('event_streams', 'stream', { stream: 'text', seq: 'int' }),
  t('event_idempotency', 'project_id, key', {
    project_id: 'text',
    key: 'text',
    fingerprint: 'text',
    event_id: 'text',
    position: 'int',
    created_at: 'int',
  }),
  t('mail_inboxes', 'inbox_id', {
    inbox_id: 'text',
    seeded: 'bool',
    version: 'int',
    synced_at: 'int',
    removed_at: 'int',
    hinted_at: 'int',
  }),
  t('mail_labels', 'inbox_id, guid', {
    inbox_id: 'text',
    guid: 'text',
    path: 'text',
    special_use: 'text',
    uid_validity: 'int',
    uid_next: 'int',
    highest_modseq: 'int',
    fill_low: 'int',
  }),
  t('mail_messages', 'inbox_id, guid', {
    inbox_id: 'text',
    guid: 'text',
    size: 'int',
    received_at: 'int',
    date: 'text',
    from_text: 'text',
    to_text: 'text',
    cc_text: 'text',
    reply_to_text: 'text',
    subject: 'text',
    message_id: 'text',
    in_reply_to: 'text',
    from_address: 'text',
    sealed: 'bool',
    has_attachment: 'bool',
    thread_guid: 'text',
    preview: 'text',
  }),
  // After mail_messages: PostgreSQL's links name their message (migration 015).
  t('mail_thread_links', 'inbox_id, link, msg_guid', {
    inbox_id: 'text',
    link: 'text',
    msg_guid: 'text',
  }),
  t('mail_locations', 'inbox_id, label_guid, uid', {
    inbox_id: 'text',
    label_guid: 'text',
    uid: 'int',
    msg_guid: 'text',
    modseq: 'int',
    flags: 'text',
    seen: 'bool',
  }),
  t('mail_staged_locations', 'inbox_id, label_guid, uid', {
    inbox_id: 'text',
    label_guid: 'text',
    uid: 'int',
    msg_guid: 'text',
    modseq: 'int',
    flags: 'text',
    seen: 'bool',
  }),
  t('mail_outbox', 'id', {
    id: 'text',
    inbox_id: 'text',
    project_id: 'text',
    actor: 'text',
    draft_id: 'text',
    fingerprint: 'text',
    state: 'text',
    mail_from: 'text',
    recipients: 'int',
    message_id: 'text',
    size: 'int',
    attempts: 'int',
    next_attempt_at: 'int',
    created_at: 'int',
    filed_at: 'int',
    claims: 'int',
    outcome: 'text',
    owner: 'text',
    send_at: 'int',
    hold_until: 'int',
    envelope: 'text',
    sealed: 'text',
    failure: 'text',
  }),
  t('mail_outbox_copies', 'id, part', { id: 'text', part: 'int', bytes: 'bytes' }),
  t('mail_outbox_sealed', 'id, part', { id: 'text', part: 'int', bytes: 'bytes' }),
  t('mail_outbox_owners', 'id', { id: 'text', host: 'text', pid: 'int', pid_start: 'text', seen_at: 'int' }),
  t('mail_send_minutes', 'inbox_id, minute', { inbox_id: 'text', minute: 'int', sends: 'int' }),
  t('reseal_jobs', 'inbox_id, label_guid, uid_validity, uid', {
    inbox_id: 'text',
    label_guid: 'text',
    uid_validity: 'int',
    uid: 'int',
    holder: 'text',
    lease_until: 'int',
    attempts: 'int',
    next_at: 'int',
    last_error: 'text',
    done_at: 'int',
  }),
  t('webhook_endpoints', 'id', {
    id: 'text',
    project_id: 'text',
    token_id: 'text',
    url: 'text',
    types: 'text',
    inboxes: 'text',
    description: 'text',
    secret_sealed: 'bytes',
    previous_secret_sealed: 'bytes',
    previous_expires_at: 'int',
    disabled_at: 'int',
    disabled_reason: 'text',
    disabled_by: 'text',
    position: 'int',
    failing_since: 'int',
    created_at: 'int',
    updated_at: 'int',
  }),
  t('webhook_deliveries', 'endpoint_id, event_id', {
    endpoint_id: 'text',
    event_id: 'text',
    position: 'int',
    project_id: 'text',
    type: 'text',
    state: 'text',
    attempts: 'int',
    next_attempt_at: 'int',
    lease_owner: 'text',
    lease_until: 'int',
    last_attempt_at: 'int',
    last_status: 'int',
    last_error: 'text',
    last_ms: 'int',
    created_at: 'int',
    updated_at: 'int',
  }),
];

/**
 * Columns a table had in earlier files of this version, read and dropped: a webhook delivery's
 * copy of its event (it names the event by position now, and the log has it).
 */
const FORMER_COLUMNS: Readonly<Record<string, readonly string[]>> = { webhook_deliveries: ['event'] };

/**
 * The tables an export leaves out, and why: each engine keeps its own, or a new store makes them
 * afresh. Every other table of either engine must be in DUMP_TABLES (test/store/store-backup.test.ts).
 */
export const DUMP_LEFT_OUT: Readonly<Record<string, string>> = {
  schema_migrations: "each engine's own migrations",
  sqlite_sequence: "SQLite's counters, set again by the rows an import writes",
  inbox_catalog: 'a counter the inboxes an import writes move on',
  mail_watch_leases: 'who watches an inbox now: the processes on the new store take it',
  watch_reports: 'what running servers said of their watch: written again every few seconds',
  // SQLite's text index (migration 027): its triggers rebuild it from the mail_messages an import writes.
  mail_search_docs: "SQLite's text index, rebuilt from mail_messages as they are written",
  mail_search: "SQLite's text index, rebuilt from mail_messages as they are written",
  mail_search_data: "SQLite's text index (FTS5's own table)",
  mail_search_idx: "SQLite's text index (FTS5's own table)",
  mail_search_docsize: "SQLite's text index (FTS5's own table)",
  mail_search_config: "SQLite's text index (FTS5's own table)",
};

const TABLES = new Map(DUMP_TABLES.map((d, i) => [d.name, { ...d, index: i }]));

/** A value as an engine's driver takes it. */
export type DumpValue = string | number | boolean | Buffer | null;
export type DumpRow = Record<string, DumpValue>;

/** What an export, import or backup refuses, said so that staff know what to do; `usage`: the command line is wrong (exit 2). */
export class DumpError extends Error {
  constructor(
    message: string,
    readonly usage = false,
  ) {
    super(message);
    this.name = 'DumpError';
  }
}

export interface DumpHeader {
  format: typeof DUMP_FORMAT;
  version: number;
  /** The engine it came from, and its schema's version there (for people). */
  engine: 'sqlite' | 'postgresql';
  schema: number;
  exportedAt: string;
}

/** Row counts per table, as the last line says them and an import checks them. */
export type DumpCounts = Record<string, number>;

function encodeValue(table: string, column: string, kind: ColumnKind, v: unknown): string | number | boolean | null {
  if (v === null || v === undefined) return null;
  switch (kind) {
    case 'text':
      if (typeof v === 'string') return v;
      break;
    case 'int':
      if (typeof v === 'number' && Number.isSafeInteger(v)) return v;
      if (typeof v === 'bigint' && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)) return Number(v);
      break;
    case 'bool':
      if (typeof v === 'boolean') return v;
      if (v === 0 || v === 1) return v === 1;
      break;
    case 'bytes':
      if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
      break;
  }
  throw new DumpError(`${table}.${column}: a ${typeof v} where the export expects ${kind}`);
}

function decodeValue(table: string, column: string, kind: ColumnKind, v: unknown): DumpValue {
  if (v === null) return null;
  switch (kind) {
    case 'text':
      if (typeof v === 'string') return v;
      break;
    case 'int':
      if (typeof v === 'number' && Number.isSafeInteger(v)) return v;
      break;
    case 'bool':
      if (typeof v === 'boolean') return v;
      break;
    case 'bytes':
      if (typeof v === 'string' && /^[A-Za-z0-9+/]*={0,2}$/.test(v)) return Buffer.from(v, 'base64');
      break;
  }
  throw new DumpError(`${table}.${column}: ${JSON.stringify(v)?.slice(0, 40)} is not ${kind}`);
}

/**
 * Writes an export file, created here (never over an existing file). Writes are synchronous and
 * buffered: an engine's rows stream through without the whole store in memory, and the event
 * loop has nothing else to do in a staff command.
 */
export class DumpWriter {
  private readonly fd: number;
  private chunks: string[] = [];
  private buffered = 0;
  private readonly counts: DumpCounts = {};
  private done = false;

  constructor(
    readonly file: string,
    header: Omit<DumpHeader, 'format' | 'version' | 'exportedAt'>,
  ) {
    this.fd = createExclusive(file);
    const full: DumpHeader = { format: DUMP_FORMAT, version: DUMP_VERSION, ...header, exportedAt: new Date().toISOString() };
    this.line(JSON.stringify(full));
  }

  /** One row of `table`, as the engine's driver returned it (blobs as Buffers, flags as 0/1 or booleans). */
  row(table: DumpTable, row: Readonly<Record<string, unknown>>): void {
    const out: Record<string, string | number | boolean | null> = {};
    for (const [column, kind] of Object.entries(table.columns)) out[column] = encodeValue(table.name, column, kind, row[column]);
    this.counts[table.name] = (this.counts[table.name] ?? 0) + 1;
    this.line(JSON.stringify({ table: table.name, row: out }));
  }

  /** Marks the table as exported even when it had no rows, so the last line names every table. */
  table(table: DumpTable): void {
    this.counts[table.name] ??= 0;
  }

  /** Writes the last line and closes the file; its counts and size. */
  finish(): { rows: DumpCounts; bytes: number } {
    this.line(JSON.stringify({ end: true, rows: this.counts }));
    this.flush();
    const bytes = fstatSync(this.fd).size;
    closeSync(this.fd);
    this.done = true;
    return { rows: this.counts, bytes };
  }

  /** After a failure: closes and removes the partial file. */
  abandon(): void {
    if (this.done) return;
    this.done = true;
    try {
      closeSync(this.fd);
    } finally {
      unlinkSync(this.file);
    }
  }

  private line(text: string): void {
    this.chunks.push(text, '\n');
    this.buffered += text.length + 1;
    if (this.buffered >= 1 << 20) this.flush();
  }

  private flush(): void {
    if (this.chunks.length === 0) return;
    const data = Buffer.from(this.chunks.join(''), 'utf8');
    this.chunks = [];
    this.buffered = 0;
    for (let off = 0; off < data.length; ) off += writeSync(this.fd, data, off);
  }
}

/** Creates `file` for writing, refusing one that exists (a backup or export never overwrites). */
export function createExclusive(file: string): number {
  try {
    return openSync(file, 'wx', 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new DumpError(`${file} exists: choose a new file (nothing is overwritten)`, true);
    throw new DumpError(`cannot create ${file}: ${(err as Error).message}`, true);
  }
}

/**
 * The header of an export file, checked before a store is opened for an import: a path that is
 * wrong, or names something else, then changes nothing (not even making an empty store there).
 */
export function dumpHeader(file: string): DumpHeader {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (err) {
    throw new DumpError(`cannot read ${file}: ${(err as Error).message}`, true);
  }
  const head = Buffer.alloc(4096);
  let n: number;
  try {
    n = readSync(fd, head, 0, head.length, 0);
  } finally {
    closeSync(fd);
  }
  const text = head.subarray(0, n).toString('utf8');
  let obj: Partial<DumpHeader> | null = null;
  try {
    obj = JSON.parse(text.slice(0, text.indexOf('\n'))) as Partial<DumpHeader>;
  } catch {
    // Not JSON: refused below like any other file.
  }
  return checkHeader(file, obj);
}

function checkHeader(file: string, obj: Partial<DumpHeader> | null): DumpHeader {
  if (obj?.format !== DUMP_FORMAT) throw new DumpError(`${file} is not a Postern store export (postern admin export)`, true);
  if (obj.version !== DUMP_VERSION)
    throw new DumpError(`${file} is an export of version ${String(obj.version)}; this Postern reads version ${DUMP_VERSION}`);
  return obj as DumpHeader;
}

export type DumpItem = { kind: 'row'; table: DumpTable; row: DumpRow } | { kind: 'end'; rows: DumpCounts };

/**
 * Reads an export file line by line: the header first (refused unless it is this format and
 * version), then its rows decoded for the engines' drivers, tables in DUMP_TABLES's order (so
 * parents come first), and the last line, whose counts must match what came. Anything else, a
 * file cut short included, throws DumpError; the caller's transaction then leaves nothing behind.
 */
export async function* readDump(file: string): AsyncGenerator<DumpItem, DumpHeader> {
  let stream;
  try {
    stream = createReadStream(file);
    await new Promise<void>((resolve, reject) => {
      stream!.once('open', () => resolve());
      stream!.once('error', reject);
    });
  } catch (err) {
    throw new DumpError(`cannot read ${file}: ${(err as Error).message}`, true);
  }
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let header: DumpHeader | null = null;
  let current = -1;
  let n = 0;
  const counts: DumpCounts = {};
  let ended = false;
  try {
    for await (const text of lines) {
      n++;
      if (ended) throw new DumpError(`${file}, line ${n}: more after the last line`);
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        throw new DumpError(`${file}, line ${n}: not JSON`);
      }
      const obj = parsed as Record<string, unknown>;
      if (header === null) {
        header = checkHeader(file, obj);
        continue;
      }
      if (obj?.end === true) {
        const said = (obj.rows ?? {}) as DumpCounts;
        for (const name of new Set([...Object.keys(said), ...Object.keys(counts)])) {
          if ((said[name] ?? 0) !== (counts[name] ?? 0))
            throw new DumpError(`${file}: ${name} has ${counts[name] ?? 0} rows, its last line says ${said[name] ?? 0}`);
        }
        ended = true;
        yield { kind: 'end', rows: said };
        continue;
      }
      const table = typeof obj?.table === 'string' ? TABLES.get(obj.table) : undefined;
      if (!table) throw new DumpError(`${file}, line ${n}: unknown table ${JSON.stringify(obj?.table)}`);
      if (table.index < current) throw new DumpError(`${file}, line ${n}: ${table.name} after a later table`);
      current = table.index;
      const raw = obj.row as Record<string, unknown> | undefined;
      if (!raw || typeof raw !== 'object') throw new DumpError(`${file}, line ${n}: no row`);
      const extra = Object.keys(raw).find((c) => !(c in table.columns) && !FORMER_COLUMNS[table.name]?.includes(c));
      if (extra) throw new DumpError(`${file}, line ${n}: ${table.name} has no column ${extra} here`);
      const row: DumpRow = {};
      for (const [column, kind] of Object.entries(table.columns)) {
        if (!(column in raw)) throw new DumpError(`${file}, line ${n}: ${table.name}.${column} is missing`);
        row[column] = decodeValue(table.name, column, kind, raw[column]);
      }
      counts[table.name] = (counts[table.name] ?? 0) + 1;
      yield { kind: 'row', table, row };
    }
  } finally {
    lines.close();
    stream.destroy();
  }
  if (header === null) throw new DumpError(`${file} is empty`, true);
  if (!ended) throw new DumpError(`${file} ends before its last line: cut short, nothing was imported`);
  return header;
}
