// The project event log: the one way any part of Postern records an event, the catalog, and the
// project's own (`ext.*`) types. Storage is behind EventStore, fan-out behind Bus.
//
// ── How to record an event (for every part of Postern) ──────────────────────────────────────
//
//   const stored = await postern.events.record({
//     type: 'access.content.read',       // a built-in type from catalog.ts (add new ones there)
//     projectId: inbox.projectId,        // prj_…
//     inboxId: inbox.id,                 // ibx_…: the inbox it concerns, if any
//     actor: principal.actor,            // tok_… / mem_… who acted, or SYSTEM_ACTOR
//     subject: msgId,                    // optional, ≤ 256 characters: what it is about
//     data: { msgId, part: 'content' },  // must match the type's data schema
//     causationId, correlationId,        // optional, ≤ 256 characters each
//     dedupeKey,                         // optional: what makes this happening one, see below
//   });
//   stored.eventId    // evt_…
//   stored.cursor     // where a reader resumes after it
//
// Contract:
// - Resolves once the event is committed: it has its place in the log (position, per-stream
//   sequence, recorded time) and will be seen by every paged read after the settle delay and by
//   every live stream at once (this instance and, with Redis, the others).
// - With a `dedupeKey`, the event is recorded at most once per project and key within 24 hours,
//   across every process sharing the store: the key is checked and stored in the event's own
//   write transaction. When the key was already recorded, record() resolves with null and
//   stores nothing. Derive the key from what the happening is (the mail sync uses label,
//   UIDVALIDITY, UID and MODSEQ), never from when or by whom it was seen. Reusing a key for
//   another event (another type, inbox, subject or data) is a bug: EventLogError.
//   Without a key, record() never resolves with null (its type says so).
// - Rejects with an EventLogError (a bug in the caller, served as 500) when the type is unknown
//   or the data does not match its schema; nothing is stored then.
// - Visibility, class and source come from the type: callers never choose who can read it.
// - Never call it inside another store transaction; it opens its own.
import { hash } from 'node:crypto';
import type { Bus } from '../bus.ts';
import { invalid, unprocessable } from '../errors.ts';
import { isId, newId } from '../ids.ts';
import { BUILTIN_TYPES, builtinType, EXT_NAME, extSchemaId, extSource, schemaForFields } from './catalog.ts';
import { Cursors } from './cursor.ts';
import { eventsChannel, LiveFeed } from './live.ts';
import type { EventFilter } from './query.ts';
import { checkData } from './schemas.ts';
import type { EventStore, ReadResult, StoredEventType } from './ports.ts';
import { newestMatching } from './versions.ts';
import type { CloudEvent, DataField, EventData, EventType, StoredEvent, Visibility } from './types.ts';
import type { WarnLog } from '../warn-log.ts';
import { NO_METRICS, type EventMetrics } from '../metrics.ts';

/** The service itself as an actor (a sync, a watcher, the sending outbox). */
export const SYSTEM_ACTOR = 'sys_postern';

export const MAX_DATA_BYTES = 4096;
export const MAX_SUBJECT = 256;
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;
/** One page looks at most at this many of the project's events past its cursor, so a sparse filter stays cheap. */
export const MAX_SCAN = 50_000;
/** Registered versions read at a time when choosing the one an event matches. */
const VERSION_BATCH = 16;

export interface RecordInput {
  type: string;
  projectId: string;
  inboxId?: string | null;
  actor: string;
  subject?: string;
  data?: EventData;
  causationId?: string;
  correlationId?: string;
  /** Records the event at most once per project and key (24 h). See the contract above. */
  dedupeKey?: string;
}

export interface Recorded extends StoredEvent {
  cursor: string;
}

/** A bug in a caller of record(): it is not the client's fault, so it becomes a 500. */
export class EventLogError extends Error {
  override name = 'EventLogError';
}

/** A request to publish an `ext.*` event (POST /events), already checked for shape. */
export interface PublishInput {
  projectId: string;
  actor: string;
  type: string;
  subject?: string;
  inboxId?: string;
  data?: EventData;
  idempotencyKey?: string;
}

export type PublishResult = { duplicate: false; id: string; cursor: string } | { duplicate: true; id: string };

/** NewEventType (docs/api.md, "NewEventType"), already checked for shape. */
export interface NewEventType {
  name: string;
  description: string;
  version?: number;
  data?: DataField[];
}

export interface Page {
  events: StoredEvent[];
  cursor: string;
}

export interface EventLogOptions {
  now?: () => number;
  /** Paged reads return only events at least this old (ms). */
  settleMs: number;
  log?: WarnLog;
  /** Appends and reads (lib/metrics.ts). */
  metrics?: EventMetrics;
}

const ACTOR = /^(?:(?:mem|tok)_[0-9A-Z]{26}|sys_[A-Za-z0-9_-]{1,64})$/;

/**
 * Clients' Idempotency-Keys (POST /events) and record()'s dedupe keys share event_idempotency:
 * one index, one 24 h lifetime, one purge, no migration. They cannot meet: a client key is 1-255
 * visible ASCII characters (checked by the route, and again by publish()), while every internal
 * key is stored behind this prefix, U+2699, which is not ASCII. Node even decodes header bytes as
 * Latin-1 (U+0000-U+00FF), so no request could carry it were the check ever loosened.
 */
const INTERNAL_KEY_PREFIX = '\u2699';
/** What publish() accepts as a client's key (the route answers 400 for anything else). */
const CLIENT_KEY = /^[\x21-\x7e]{1,255}$/;
const MAX_DEDUPE_KEY = 512;

/** JSON with object keys sorted, so the same request always has the same fingerprint. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    return `{${Object.keys(obj)
      .sort()
      .filter((k) => obj[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonical(obj[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** SHA-256 of the canonical JSON of what an event says: the same request, the same fingerprint. */
function fingerprint(request: {
  type: string;
  subject: string | undefined;
  inbox: string | null | undefined;
  data: EventData | undefined;
}): string {
  return hash('sha256', canonical(request), 'base64url');
}

// Registered types as EventTypes. The store hands back the same StoredEventType for a row read
// again unchanged, so publish finds its EventType (and through its schema object, the compiled
// validator) by identity; a changed row is a new object, and a new EventType.
const extTypes = new WeakMap<StoredEventType, EventType>();

function extType(t: StoredEventType): EventType {
  let type = extTypes.get(t);
  if (!type) extTypes.set(t, (type = buildExtType(t)));
  return type;
}

function buildExtType(t: StoredEventType): EventType {
  return {
    name: t.name,
    version: t.version,
    description: t.description,
    source: extSource(t.projectId),
    class: 'ext',
    // Listed as project-level; an event published with an `inbox` is an inbox event (docs/events.md).
    visibility: 'project',
    status: 'stable',
    data: t.fields,
    dataSchema: { $id: extSchemaId(t.projectId, t.name, t.version), ...schemaForFields(t.fields) },
  };
}

export class EventLog {
  readonly live: LiveFeed;
  private readonly now: () => number;
  private purgeTimer: NodeJS.Timeout | null = null;
  /** The project-keyed cursor codec, once its secret was read from the store. */
  private codec: Cursors | null = null;
  private loadingCodec: Promise<Cursors> | null = null;
  private readonly metrics: EventMetrics;

  constructor(
    private readonly store: EventStore,
    private readonly bus: Bus,
    private readonly options: EventLogOptions,
    live?: LiveFeed,
  ) {
    this.now = options.now ?? Date.now;
    this.metrics = options.metrics ?? NO_METRICS.events;
    this.live = live ?? new LiveFeed(store, bus, options.log ? { log: options.log } : {});
  }

  /** Records one built-in event. See the contract at the top of this file. */
  record(input: RecordInput & { dedupeKey?: undefined }): Promise<Recorded>;
  /** With a dedupeKey: null when the key was already recorded (nothing is stored then). */
  record(input: RecordInput): Promise<Recorded | null>;
  async record(input: RecordInput): Promise<Recorded | null> {
    const type = builtinType(input.type);
    if (!type) throw new EventLogError(`record(): unknown event type ${input.type}; add it to lib/events/catalog.ts`);
    if (!isId('prj', input.projectId)) throw new EventLogError(`record(): projectId must be a prj_ id, got ${input.projectId}`);
    const inboxId = input.inboxId ?? null;
    if (inboxId !== null && !isId('ibx', inboxId)) throw new EventLogError(`record(): inboxId must be an ibx_ id, got ${inboxId}`);
    if (!ACTOR.test(input.actor)) throw new EventLogError(`record(): actor must be a mem_, tok_ or sys_ id, got ${input.actor}`);
    for (const [name, v] of [
      ['subject', input.subject],
      ['causationId', input.causationId],
      ['correlationId', input.correlationId],
    ] as const) {
      if (v !== undefined && (typeof v !== 'string' || v.length > MAX_SUBJECT)) {
        throw new EventLogError(`record(): ${name} must be a string of at most ${MAX_SUBJECT} characters`);
      }
    }
    const data = input.data ?? {};
    const wrong = checkData(type.dataSchema, data);
    if (wrong) throw new EventLogError(`record(): ${input.type}: ${wrong}`);
    const key = input.dedupeKey;
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > MAX_DEDUPE_KEY)) {
      throw new EventLogError(`record(): dedupeKey must be a string of 1 to ${MAX_DEDUPE_KEY} characters`);
    }
    const result = await this.append({
      type,
      projectId: input.projectId,
      inboxId,
      visibility: type.visibility,
      actor: input.actor,
      subject: input.subject,
      data: input.data,
      causationId: input.causationId,
      correlationId: input.correlationId,
      ...(key !== undefined
        ? {
            idempotency: {
              key: INTERNAL_KEY_PREFIX + key,
              fingerprint: fingerprint({ type: input.type, subject: input.subject, inbox: inboxId, data: input.data }),
            },
          }
        : {}),
    });
    if (!result.duplicate) return result.stored;
    if (key === undefined) throw new EventLogError('record(): unexpected duplicate');
    if (!result.sameRequest)
      throw new EventLogError(`record(): dedupeKey ${key} was already recorded for another event (${result.eventId})`);
    return null;
  }

  /**
   * The first event of a client's Idempotency-Key used within its 24 hours, if any. docs/api.md, "Events": the
   * same key returns the first event whatever the new request holds, so a request about to be
   * refused asks this first (publishKeyed); one that is stored learns it from the append.
   */
  async keyed(projectId: string, key: string): Promise<{ id: string } | null> {
    if (!CLIENT_KEY.test(key)) throw invalid('Idempotency-Key must be 1 to 255 visible ASCII characters');
    const prior = await this.store.keyedEvent(projectId, key, this.now() - IDEMPOTENCY_TTL_MS);
    return prior && { id: prior.eventId };
  }

  /**
   * The data of the event record() stored under `dedupeKey` within its 24 hours, if any: a
   * repeated bulk change answers from it (lib/mail/bulk-journal.ts).
   */
  async recordedUnder(projectId: string, dedupeKey: string): Promise<EventData | null> {
    const prior = await this.store.keyedEvent(projectId, INTERNAL_KEY_PREFIX + dedupeKey, this.now() - IDEMPOTENCY_TTL_MS);
    if (!prior) return null;
    const [event] = await this.store.atPositions(projectId, [prior.position]);
    return event ? ((JSON.parse(event.json) as { data?: EventData }).data ?? {}) : null;
  }

  /**
   * POST /events: one event of a registered `ext.*` type. 422 for an unregistered type or data
   * that does not match; a valid request with a key used in the last 24 hours is a duplicate.
   * The caller has checked the inbox (404) and the data size (413).
   */
  async publish(input: PublishInput): Promise<PublishResult> {
    if (!EXT_NAME.test(input.type)) throw unprocessable(`type ${input.type} is not a registered ext.* type`);
    const type = await this.versionFor(input.projectId, input.type, input.data ?? {});
    // The route checks this too; here it keeps clients out of record()'s keys whoever calls.
    if (input.idempotencyKey !== undefined && !CLIENT_KEY.test(input.idempotencyKey)) {
      throw invalid('Idempotency-Key must be 1 to 255 visible ASCII characters');
    }
    const result = await this.append({
      type,
      projectId: input.projectId,
      inboxId: input.inboxId ?? null,
      visibility: input.inboxId ? 'inbox' : 'project',
      actor: input.actor,
      subject: input.subject,
      data: input.data,
      ...(input.idempotencyKey
        ? {
            idempotency: {
              key: input.idempotencyKey,
              fingerprint: fingerprint({ type: input.type, subject: input.subject, inbox: input.inboxId, data: input.data }),
            },
          }
        : {}),
    });
    if (!result.duplicate) return { duplicate: false, id: result.stored.eventId, cursor: result.stored.cursor };
    // docs/api.md, "Events": the same key within 24 hours returns the first event, whatever this body holds.
    return { duplicate: true, id: result.eventId };
  }

  /**
   * The version an event is recorded as: the newest non-deprecated one its data matches, so a
   * new version never breaks producers of an older one. Versions are read newest first, a few at
   * a time: the newest almost always matches. 422 when none does, with what the newest wants.
   */
  private async versionFor(projectId: string, name: string, data: EventData): Promise<EventType> {
    let newest: EventType | null = null;
    let below: number | null = null;
    for (;;) {
      const batch: EventType[] = (await this.store.typeVersions(projectId, name, below, VERSION_BATCH)).map(extType);
      if (below === null && batch.length === 0) throw unprocessable(`type ${name} is not registered: register it with POST /event-types`);
      newest ??= batch.find((t) => t.status !== 'deprecated') ?? null;
      const match = newestMatching(batch, data);
      if (match) return match;
      if (batch.length < VERSION_BATCH) break;
      below = batch[batch.length - 1]!.version;
    }
    if (!newest) throw unprocessable(`${name}: every version is deprecated`);
    throw unprocessable(`${name} v${newest.version}: ${checkData(newest.dataSchema, data)}`);
  }

  private async append(e: {
    type: EventType;
    projectId: string;
    inboxId: string | null;
    visibility: Visibility;
    actor: string;
    subject?: string | undefined;
    data?: EventData | undefined;
    causationId?: string | undefined;
    correlationId?: string | undefined;
    idempotency?: { key: string; fingerprint: string };
  }): Promise<{ duplicate: false; stored: Recorded } | { duplicate: true; eventId: string; sameRequest: boolean }> {
    const now = this.now();
    const eventId = newId('evt', now);
    const result = await this.store.append({
      eventId,
      projectId: e.projectId,
      inboxId: e.inboxId,
      type: e.type.name,
      visibility: e.visibility,
      stream: e.inboxId ?? e.projectId,
      now,
      ...(e.idempotency ? { idempotency: { ...e.idempotency, ttlMs: IDEMPOTENCY_TTL_MS } } : {}),
      build: ({ sequence, time }) => {
        // Key order is fixed: `actor` comes before anything a caller wrote (see redactActor).
        const event: CloudEvent = {
          specversion: '1.0',
          id: eventId,
          type: e.type.name,
          source: e.type.source,
          time,
          scope: e.projectId,
          sequence,
          actor: e.actor,
          class: e.type.class,
          visibility: e.visibility,
          ...(e.inboxId ? { containerid: e.inboxId } : {}),
          ...(e.subject !== undefined ? { subject: e.subject } : {}),
          ...(e.causationId !== undefined ? { causationid: e.causationId } : {}),
          ...(e.correlationId !== undefined ? { correlationid: e.correlationId } : {}),
          datacontenttype: 'application/json',
          dataschema: String(e.type.dataSchema.$id),
          ...(e.data !== undefined ? { data: e.data } : {}),
        };
        return JSON.stringify(event);
      },
    });
    const origin = e.type.name.startsWith('ext.') ? 'ext' : 'builtin';
    if (result.kind === 'duplicate') {
      this.metrics.appended(origin, 'duplicate');
      return { duplicate: true, eventId: result.eventId, sameRequest: result.sameRequest };
    }
    this.metrics.appended(origin, 'appended');
    // Deliver here at once, and publish for the other instances. A lost message is healed by
    // every receiver from the store.
    this.live.local(result.event);
    if (this.bus.spansProcesses) {
      const channel = this.live.channel ?? eventsChannel(await this.store.logId());
      this.bus.publish(channel, LiveFeed.message(result.event)).catch(() => this.live.heal());
    }
    const cursors = this.codec ?? (await this.cursors());
    return { duplicate: false, stored: { ...result.event, cursor: cursors.encode(result.event.projectId, result.event.position) } };
  }

  /** The catalog: built-in types, and the project's own types when `projectId` is given. */
  async catalog(projectId: string | null): Promise<EventType[]> {
    if (projectId === null) return [...BUILTIN_TYPES];
    const own = await this.store.listTypes(projectId);
    return [...BUILTIN_TYPES, ...own.map(extType)];
  }

  /**
   * POST /event-types: registers a version of a project type, or updates it compatibly:
   * within one version, fields may only be added, and only as optional. Descriptions may change.
   */
  async registerType(projectId: string, input: NewEventType): Promise<EventType> {
    if (!EXT_NAME.test(input.name)) {
      throw unprocessable('name must be ext.<thing>.<past-tense verb>: lowercase letters, digits and _');
    }
    const version = input.version ?? 1;
    const fields: DataField[] = (input.data ?? []).map((f) => ({
      name: f.name,
      type: f.type,
      ...(f.description !== undefined ? { description: f.description } : {}),
      required: f.required === true,
    }));
    const seen = new Set<string>();
    for (const f of fields) {
      if (seen.has(f.name)) throw unprocessable(`data field ${f.name} is declared twice`);
      seen.add(f.name);
    }
    const now = this.now();
    const stored = await this.store.upsertType(projectId, input.name, version, (existing) => {
      if (!existing)
        return { projectId, name: input.name, version, description: input.description, fields, createdAt: now, updatedAt: now };
      const next = new Map(fields.map((f) => [f.name, f]));
      for (const old of existing.fields) {
        const f = next.get(old.name);
        if (!f)
          throw unprocessable(
            `${input.name} v${version}: data field ${old.name} cannot be removed within a version; register version ${version + 1}`,
          );
        if (f.type !== old.type || (f.required === true) !== (old.required === true)) {
          throw unprocessable(
            `${input.name} v${version}: data field ${old.name} cannot change its type or whether it is required within a version; register version ${version + 1}`,
          );
        }
      }
      const known = new Set(existing.fields.map((f) => f.name));
      for (const f of fields) {
        if (!known.has(f.name) && f.required) {
          throw unprocessable(
            `${input.name} v${version}: a field added within a version must be optional (${f.name}); register version ${version + 1}`,
          );
        }
      }
      // Existing fields keep their place; new ones follow, so the schema only ever grows.
      const merged = [...existing.fields.map((f) => next.get(f.name)!), ...fields.filter((f) => !known.has(f.name))];
      return { ...existing, description: input.description, fields: merged, updatedAt: now };
    });
    return extType(stored);
  }

  /** One page of a paged read: events older than the settle delay, after `after`. */
  async page(filter: EventFilter, after: number, limit: number): Promise<Page> {
    this.metrics.read('page');
    const { events, scannedTo } = await this.store.read({
      projectId: filter.projectId,
      after,
      limit,
      recordedBefore: this.now() - this.options.settleMs,
      inboxes: filter.inboxes,
      allowedInboxes: filter.allowedInboxes,
      visibilities: filter.visibilities,
      types: filter.types,
      maxScan: MAX_SCAN,
    });
    return { events, cursor: (this.codec ?? (await this.cursors())).encode(filter.projectId, scannedTo) };
  }

  /**
   * One page read newest first, below `before` (null: from the newest settled event); the cursor
   * is the lowest of the project's positions looked at, for the next (older) page's `before`.
   */
  async pageBack(filter: EventFilter, before: number | null, limit: number): Promise<Page> {
    this.metrics.read('page');
    const { events, scannedTo } = await this.store.readBack({
      projectId: filter.projectId,
      before,
      limit,
      recordedBefore: this.now() - this.options.settleMs,
      inboxes: filter.inboxes,
      allowedInboxes: filter.allowedInboxes,
      visibilities: filter.visibilities,
      types: filter.types,
      maxScan: MAX_SCAN,
    });
    return { events, cursor: (this.codec ?? (await this.cursors())).encode(filter.projectId, scannedTo) };
  }

  /** Events for a live stream's backfill: no settle delay, since live streams may repeat. */
  async backfill(filter: EventFilter, after: number, limit: number): Promise<ReadResult> {
    this.metrics.read('backfill');
    return this.store.read({
      projectId: filter.projectId,
      after,
      limit,
      recordedBefore: null,
      inboxes: filter.inboxes,
      allowedInboxes: filter.allowedInboxes,
      visibilities: filter.visibilities,
      types: filter.types,
      maxScan: MAX_SCAN,
    });
  }

  /** Mints and reads this log's cursors (the secret comes from the store, read once). */
  cursors(): Promise<Cursors> {
    if (this.codec) return Promise.resolve(this.codec);
    this.loadingCodec ??= this.store.cursorSecret().then(
      (secret) => (this.codec = new Cursors(secret)),
      (err: unknown) => {
        this.loadingCodec = null;
        throw err;
      },
    );
    return this.loadingCodec;
  }

  lastPosition(): Promise<number> {
    return this.store.lastPosition();
  }

  positionOf(projectId: string, eventId: string): Promise<number | null> {
    return this.store.positionOf(projectId, eventId);
  }

  /** The project's events at these positions, as GET /events serves them (the webhook dispatcher reads its deliveries' bodies so). */
  atPositions(projectId: string, positions: readonly number[]): Promise<StoredEvent[]> {
    return this.store.atPositions(projectId, positions);
  }

  /** Forgets idempotency keys past their 24 hours. */
  purgeIdempotency(): Promise<number> {
    return this.store.purgeIdempotency(this.now() - IDEMPOTENCY_TTL_MS);
  }

  /** Starts the live feed, and forgets expired idempotency keys once an hour. */
  async start(): Promise<void> {
    await this.cursors();
    await this.live.start();
    this.purgeTimer = setInterval(
      () => {
        this.purgeIdempotency().catch((err: unknown) => this.options.log?.warn({ err }, 'idempotency purge failed'));
      },
      60 * 60 * 1000,
    );
    this.purgeTimer.unref();
  }

  close(): Promise<void> {
    if (this.purgeTimer) clearInterval(this.purgeTimer);
    return this.live.close();
  }
}
