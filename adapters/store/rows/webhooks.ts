// Webhook endpoints' rows as both engines return them (same table and columns), their mapping to
// the domain's records and the values an INSERT or UPDATE binds, in the columns' order.
import type {
  DeliveryRecord,
  DeliveryState,
  NewDelivery,
  WebhookDisabler,
  WebhookEndpointChange,
  WebhookEndpointRecord,
} from '../../../lib/webhooks/ports.ts';

export interface WebhookRow {
  id: string;
  project_id: string;
  token_id: string;
  url: string;
  types: string | null;
  inboxes: string | null;
  description: string | null;
  secret_sealed: Buffer;
  previous_secret_sealed: Buffer | null;
  previous_expires_at: number | null;
  disabled_at: number | null;
  disabled_reason: string | null;
  disabled_by: string | null;
  position: number;
  failing_since: number | null;
  created_at: number;
  updated_at: number;
}

export const WEBHOOK_COLUMNS = [
  'id',
  'project_id',
  'token_id',
  'url',
  'types',
  'inboxes',
  'description',
  'secret_sealed',
  'previous_secret_sealed',
  'previous_expires_at',
  'disabled_at',
  'disabled_reason',
  'disabled_by',
  'position',
  'failing_since',
  'created_at',
  'updated_at',
] as const;

/** The columns an update writes, in the order `changeValues` binds them. */
export const WEBHOOK_CHANGE_COLUMNS = ['url', 'types', 'inboxes', 'description', 'updated_at'] as const;

const list = (text: string | null): string[] | null => (text === null ? null : (JSON.parse(text) as string[]));
const text = (items: readonly string[] | null): string | null => (items === null ? null : JSON.stringify(items));

export const webhookOf = (r: WebhookRow): WebhookEndpointRecord => ({
  id: r.id,
  projectId: r.project_id,
  tokenId: r.token_id,
  url: r.url,
  types: list(r.types),
  inboxes: list(r.inboxes),
  description: r.description,
  secretSealed: Buffer.from(r.secret_sealed),
  previousSecretSealed: r.previous_secret_sealed === null ? null : Buffer.from(r.previous_secret_sealed),
  previousExpiresAt: r.previous_expires_at,
  disabledAt: r.disabled_at,
  disabledReason: r.disabled_reason,
  disabledBy: r.disabled_by as WebhookDisabler | null,
  position: r.position,
  failingSince: r.failing_since,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/** An INSERT's values, in WEBHOOK_COLUMNS' order. */
export const webhookValues = (e: WebhookEndpointRecord): unknown[] => [
  e.id,
  e.projectId,
  e.tokenId,
  e.url,
  text(e.types),
  text(e.inboxes),
  e.description,
  e.secretSealed,
  e.previousSecretSealed,
  e.previousExpiresAt,
  e.disabledAt,
  e.disabledReason,
  e.disabledBy,
  e.position,
  e.failingSince,
  e.createdAt,
  e.updatedAt,
];

/** An UPDATE's values, in WEBHOOK_CHANGE_COLUMNS' order. */
export const changeValues = (c: WebhookEndpointChange): unknown[] => [c.url, text(c.types), text(c.inboxes), c.description, c.updatedAt];

export interface DeliveryRow {
  endpoint_id: string;
  event_id: string;
  position: number;
  project_id: string;
  type: string;
  state: string;
  attempts: number;
  next_attempt_at: number;
  lease_owner: string | null;
  lease_until: number | null;
  last_attempt_at: number | null;
  last_status: number | null;
  last_error: string | null;
  last_ms: number | null;
  created_at: number;
  updated_at: number;
}

export const deliveryOf = (r: DeliveryRow): DeliveryRecord => ({
  endpointId: r.endpoint_id,
  eventId: r.event_id,
  position: r.position,
  projectId: r.project_id,
  type: r.type,
  state: r.state as DeliveryState,
  attempts: r.attempts,
  nextAttemptAt: r.next_attempt_at,
  lastAttemptAt: r.last_attempt_at,
  lastStatus: r.last_status,
  lastError: r.last_error,
  lastMs: r.last_ms,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/** The columns a new delivery binds (the rest take their defaults), in `newDeliveryValues`' order. */
export const NEW_DELIVERY_COLUMNS = [
  'endpoint_id',
  'event_id',
  'position',
  'project_id',
  'type',
  'next_attempt_at',
  'created_at',
  'updated_at',
  'lease_owner',
  'lease_until',
] as const;

/** The lease is null for a delivery left for a claim. */
export const newDeliveryValues = (
  endpointId: string,
  projectId: string,
  d: NewDelivery,
  at: number,
  lease: { owner: string; until: number } | null,
): unknown[] => [endpointId, d.eventId, d.position, projectId, d.type, at, at, at, lease?.owner ?? null, lease?.until ?? null];
