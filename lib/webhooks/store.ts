// The port webhook endpoints are kept through (adapters/store/{sqlite,postgres}/webhooks.ts). An
// endpoint belongs to a project and to the token that created it: what it may receive is what
// that token may read, checked again at each delivery (lib/webhooks/endpoints.ts, docs/webhooks.md).

export interface WebhookEndpointRecord {
  /** whk_… */
  id: string;
  projectId: string;
  /** The creating token (tok_…). */
  tokenId: string;
  url: string;
  /** GET /events' `types` filter, parsed (names and `prefix.*`); null: every type the token may read. */
  types: string[] | null;
  /** Only events of these inboxes; null: every inbox the token may use, and project-level events. */
  inboxes: string[] | null;
  description: string | null;
  /** The signing secret's bytes, sealed with the service master key (never stored in the clear). */
  secretSealed: Buffer;
  /** The secret a rotation replaced, sealed; it still signs until `previousExpiresAt`. */
  previousSecretSealed: Buffer | null;
  previousExpiresAt: number | null;
  /** Set while the endpoint is disabled (by its owner, or by the dispatcher after failing). */
  disabledAt: number | null;
  disabledReason: string | null;
  /** The event log position delivered up to (the dispatcher's); the log's head at creation. */
  position: number;
  createdAt: number;
  updatedAt: number;
}

/**
 * What an update changes; the rest (id, project, token, secrets, position) stays, and so does
 * whether it is disabled (setDisabled), so an edit never undoes the dispatcher disabling it.
 */
export type WebhookEndpointChange = Pick<WebhookEndpointRecord, 'url' | 'types' | 'inboxes' | 'description' | 'updatedAt'>;

export interface WebhookStore {
  create(endpoint: WebhookEndpointRecord): Promise<void>;
  /** The project's endpoint, or null (none, or another project's). */
  get(projectId: string, id: string): Promise<WebhookEndpointRecord | null>;
  /** The project's endpoints, oldest first. */
  list(projectId: string): Promise<WebhookEndpointRecord[]>;
  /** The changed endpoint, or null when the project has no such endpoint. */
  update(projectId: string, id: string, change: WebhookEndpointChange): Promise<WebhookEndpointRecord | null>;
  /** Disables (`disabledAt` set, with why) or enables (null, null) it. Null: no such endpoint. */
  setDisabled(projectId: string, id: string, disabledAt: number | null, reason: string | null, at: number): Promise<WebhookEndpointRecord | null>;
  /** Puts a new secret in place, the current one becoming the previous (signing until `previousExpiresAt`). Null: no such endpoint. */
  rotateSecret(projectId: string, id: string, secretSealed: Buffer, previousExpiresAt: number, at: number): Promise<WebhookEndpointRecord | null>;
  /** False when the project had no such endpoint. */
  delete(projectId: string, id: string): Promise<boolean>;
}
