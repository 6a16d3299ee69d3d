// The shapes of the project event log (docs/api.md, "EventType", "NewEventType", "Event"). Decisions the contract leaves
// open (classes, visibilities, cursor form) are explained in docs/events.md.

/**
 * Who may read an event (docs/api.md, "Events"):
 * - `inbox`:   an inbox's own events; anyone with `events:read` (or a web session) who may use it
 * - `project`: project-level events (sending, access, domains); also needs `project:read`
 * - `audit`:   audit-only events (who read what); needs `audit:read` and `audit=true`
 * An event that names an inbox (`containerid`) is only ever shown to callers who may use that
 * inbox, whatever its visibility.
 */
export const VISIBILITIES = ['inbox', 'project', 'audit'] as const;
export type Visibility = (typeof VISIBILITIES)[number];

/**
 * What kind of happening an event records:
 * - `mail`:     a message arrived, moved or changed in an inbox
 * - `delivery`: the outcome of sending
 * - `access`:   someone read protected content, or gained a way to (a member's key or passkey)
 * - `ext`:      a project's own registered type
 */
export const EVENT_CLASSES = ['mail', 'delivery', 'access', 'ext'] as const;
export type EventClass = (typeof EVENT_CLASSES)[number];

export const TYPE_STATUSES = ['experimental', 'stable', 'deprecated'] as const;
export type TypeStatus = (typeof TYPE_STATUSES)[number];

/** The data field kinds a registered type may declare (docs/api.md, "NewEventType"). */
export const FIELD_TYPES = ['string', 'integer', 'boolean', 'string[]'] as const;
export type FieldType = (typeof FIELD_TYPES)[number];

/** One data field, as NewEventType declares it and as the catalog lists it (built-ins too). */
export interface DataField {
  name: string;
  type: FieldType;
  description?: string;
  required?: boolean;
}

export type JsonSchemaObject = Record<string, unknown>;

/** An entry of the catalog (docs/api.md, "EventType"). */
export interface EventType {
  name: string;
  version: number;
  description: string;
  source: string;
  class: EventClass;
  visibility: Visibility;
  status: TypeStatus;
  data: DataField[];
  dataSchema: JsonSchemaObject;
  subject?: string;
}

/** A JSON value as stored in `data`. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
export type EventData = { [key: string]: JsonValue };

/** The event as it is stored and served: CloudEvents 1.0 JSON with the service attributes (docs/api.md, "Event"). */
export interface CloudEvent {
  specversion: '1.0';
  id: string;
  type: string;
  source: string;
  time: string;
  scope: string;
  sequence: string;
  actor: string;
  class: EventClass;
  visibility: Visibility;
  containerid?: string;
  subject?: string;
  causationid?: string;
  correlationid?: string;
  datacontenttype?: 'application/json';
  dataschema?: string;
  data?: EventData;
}

/** A row of the log: the event's JSON text and the columns reads filter on. */
export interface StoredEvent {
  /** Global append order; the cursor encodes it. Never shown to clients as a number. */
  position: number;
  eventId: string;
  projectId: string;
  inboxId: string | null;
  type: string;
  visibility: Visibility;
  /** Milliseconds since the epoch; never earlier than the previous row's. */
  recordedAt: number;
  /** The CloudEvent, serialized once at write time; served as is. */
  json: string;
}
