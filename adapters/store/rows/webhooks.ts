// Webhook endpoints' rows as both engines return them (same table and columns), their mapping to
// the domain's records and the values an INSERT or UPDATE binds, in the columns' order.
import type { WebhookEndpointChange, WebhookEndpointRecord } from '../../../lib/webhooks/store.ts';

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
  position: number;
  created_at: number;
  updated_at: number;
}

export const WEBHOOK_COLUMNS = [
  'id', 'project_id', 'token_id', 'url', 'types', 'inboxes', 'description', 'secret_sealed', 'previous_secret_sealed',
  'previous_expires_at', 'disabled_at', 'disabled_reason', 'position', 'created_at', 'updated_at',
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
  position: r.position,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
});

/** An INSERT's values, in WEBHOOK_COLUMNS' order. */
export const webhookValues = (e: WebhookEndpointRecord): unknown[] => [
  e.id, e.projectId, e.tokenId, e.url, text(e.types), text(e.inboxes), e.description, e.secretSealed, e.previousSecretSealed,
  e.previousExpiresAt, e.disabledAt, e.disabledReason, e.position, e.createdAt, e.updatedAt,
];

/** An UPDATE's values, in WEBHOOK_CHANGE_COLUMNS' order. */
export const changeValues = (c: WebhookEndpointChange): unknown[] => [
  c.url, text(c.types), text(c.inboxes), c.description, c.updatedAt,
];
