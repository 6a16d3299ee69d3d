// The port the event log needs from storage. Asynchronous so a PostgreSQL adapter can implement
// it later; the SQLite adapter (adapters/store/sqlite/events.ts) answers synchronously beneath.
import type { DataField, StoredEvent, Visibility } from './types.ts';

/** A stream's counter as `sequence`: zero-padded so it also sorts as text. */
export const formatSequence = (n: number): string => String(n).padStart(20, '0');

/**
 * What the store assigns inside the write transaction, handed to `build`. An engine may instead
 * call `build` once with placeholders and put the values in their places itself, in the database
 * (PostgreSQL does: adapters/store/postgres/events.ts), so `build` must write each as given, as a
 * JSON string, before anything a caller wrote.
 */
export interface Assigned {
  /** Per-stream counter value, already zero-padded. */
  sequence: string;
  /** Recorded time as toISOString() writes it (the event's recordedAt, never earlier than the previous row's). */
  time: string;
}

export interface AppendRequest {
  eventId: string;
  projectId: string;
  inboxId: string | null;
  type: string;
  visibility: Visibility;
  /** The counter bumped for `sequence`: the inbox id for inbox events, the project id otherwise. */
  stream: string;
  now: number;
  /** Serializes the event with its sequence and time (see Assigned: they may be placeholders). */
  build(assigned: Assigned): string;
  /** Store the key with the event, in the same transaction; an existing live key wins. */
  idempotency?: { key: string; fingerprint: string; ttlMs: number };
}

export type AppendResult =
  | { kind: 'appended'; event: StoredEvent }
  /** The key was used within its lifetime: the first event, and whether the request matched it. */
  | { kind: 'duplicate'; eventId: string; position: number; sameRequest: boolean };

/** One page of a read: which rows, and how far the scan got (the next cursor). */
export interface ReadQuery {
  projectId: string;
  /** Only positions after this one. */
  after: number;
  limit: number;
  /** Only events recorded at or before this time (the settle delay); null: no bound. */
  recordedBefore: number | null;
  /** null: events of any inbox and none; otherwise only events of these inboxes (none without one). */
  inboxes: readonly string[] | null;
  /** Inboxes the caller may use: events naming any other inbox are never returned. */
  allowedInboxes: readonly string[];
  visibilities: readonly Visibility[];
  /** null: every type; otherwise exact names and `prefix.*` patterns. */
  types: readonly string[] | null;
  /** Look at no more than this many of the project's rows (of the named inboxes') past `after`. */
  maxScan: number;
}

/** One page read backwards: the newest events first, below a position (docs/events.md, "Reading backwards"). */
export interface ReadBackQuery extends Omit<ReadQuery, 'after'> {
  /** Only positions below this one; null: from the newest (settled) event. */
  before: number | null;
}

export interface ReadResult {
  events: StoredEvent[];
  /**
   * Where the next read starts: the last of the project's rows the read looked at, or `after`.
   * Never another project's position: a cursor made from it must not move with the rest of the
   * log (docs/events.md, "Cursors").
   */
  scannedTo: number;
  /** True when the read looked at everything up to the end (or the settle horizon). */
  complete: boolean;
}

export interface StoredEventType {
  projectId: string;
  name: string;
  version: number;
  description: string;
  fields: DataField[];
  createdAt: number;
  updatedAt: number;
}

export interface EventStore {
  /** A random id fixed when the log was created: instances sharing this store share it. */
  logId(): Promise<string>;
  /** A random secret (32 bytes) fixed with the log: cursors are encrypted under keys derived from it. */
  cursorSecret(): Promise<Uint8Array>;
  append(req: AppendRequest): Promise<AppendResult>;
  read(q: ReadQuery): Promise<ReadResult>;
  /**
   * The same read newest first: `events` in descending position, `scannedTo` the lowest of the
   * project's (or named inboxes') rows looked at, or `before` (0 when null) when none was.
   */
  readBack(q: ReadBackQuery): Promise<ReadResult>;
  /** Every project's events after a position, in order: heals gaps in the live feed. */
  readAll(after: number, limit: number): Promise<StoredEvent[]>;
  /** The last position written (0 for an empty log). */
  lastPosition(): Promise<number>;
  /** The position of one of the project's events, by its id. */
  positionOf(projectId: string, eventId: string): Promise<number | null>;
  /** The project's events at these positions, in order (a position not the project's, or not written, is left out). */
  atPositions(projectId: string, positions: readonly number[]): Promise<StoredEvent[]>;

  /**
   * Registers or updates one version of a type in one transaction: `decide` sees the stored
   * row (or null) and returns what to store, or throws to refuse; so two registrations racing
   * cannot slip an incompatible change past each other.
   */
  upsertType(
    projectId: string,
    name: string,
    version: number,
    decide: (existing: StoredEventType | null) => StoredEventType,
  ): Promise<StoredEventType>;
  // The type reads may return the same (frozen in practice: never mutated) object for a row read
  // again unchanged; callers cache what they derive from it by identity.
  getType(projectId: string, name: string, version: number): Promise<StoredEventType | null>;
  /** Registered versions of a name, newest first: at most `limit`, each below `below` (null: any). */
  typeVersions(projectId: string, name: string, below: number | null, limit: number): Promise<StoredEventType[]>;
  listTypes(projectId: string): Promise<StoredEventType[]>;

  /**
   * The event a live idempotency key (recorded after `since`) names, if any: a request repeating
   * the key that would be refused is answered from it (docs/api.md, "Events"); `append` answers the others.
   */
  keyedEvent(projectId: string, key: string, since: number): Promise<{ eventId: string; position: number } | null>;

  /** Forgets idempotency keys older than the cutoff; returns how many. */
  purgeIdempotency(olderThan: number): Promise<number>;
}
