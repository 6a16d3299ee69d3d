// The event tables' rows as both engines return them (same tables and columns; PostgreSQL's
// BIGINT columns come back as numbers, postgres/db.ts), and their mapping to the domain's records.
import type { StoredEventType } from '../../../lib/events/ports.ts';
import { VISIBILITIES, type DataField, type StoredEvent, type Visibility } from '../../../lib/events/types.ts';

export interface EventRow {
  position: number;
  event_id: string;
  project_id: string;
  inbox_id: string | null;
  type: string;
  visibility: Visibility;
  recorded_at: number;
  body: string;
}

/** An idempotency key and the position of the event it names. */
export interface KeyRow {
  fingerprint: string;
  event_id: string;
  created_at: number;
  position: number;
}

export interface TypeRow {
  project_id: string;
  name: string;
  version: number;
  description: string;
  fields: string;
  created_at: number;
  updated_at: number;
}

export const VISIBILITY_SET: ReadonlySet<string> = new Set(VISIBILITIES);

export const toEvent = (r: EventRow): StoredEvent => ({
  position: r.position,
  eventId: r.event_id,
  projectId: r.project_id,
  inboxId: r.inbox_id,
  type: r.type,
  visibility: r.visibility,
  recordedAt: r.recorded_at,
  json: r.body,
});

export const toType = (r: TypeRow): StoredEventType => ({
  projectId: r.project_id,
  name: r.name,
  version: r.version,
  description: r.description,
  fields: JSON.parse(r.fields) as DataField[],
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/**
 * Every publish reads its type: a row read again unchanged comes back as the same object,
 * parsed once, so what callers derive from it can be found by identity.
 */
export class EventTypeCache {
  private readonly types = new Map<string, StoredEventType>();

  of(row: TypeRow): StoredEventType {
    const signature = `${row.project_id}\n${row.name}\n${row.version}\n${row.created_at}\n${row.updated_at}\n${row.description}\n${row.fields}`;
    let type = this.types.get(signature);
    if (!type) {
      if (this.types.size >= 10_000) this.types.delete(this.types.keys().next().value!);
      type = toType(row);
      this.types.set(signature, type);
    }
    return type;
  }
}
