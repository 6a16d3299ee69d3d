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
  /** Who disabled it (null while enabled): an endpoint staff disabled stays so for its owner. */
  disabledBy: WebhookDisabler | null;
  /** The event log position delivered up to (the dispatcher's); the log's head at creation. */
  position: number;
  /** Since when every attempt has failed (null: the last one worked); long enough disables it. */
  failingSince: number | null;
  createdAt: number;
  updatedAt: number;
}

/** Who disabled an endpoint: its owner (the API), the dispatcher (failing, 410, token) or staff. */
export type WebhookDisabler = 'owner' | 'dispatcher' | 'staff';

/** Why an endpoint is disabled, when, and by whom (WebhookStore.setDisabled). */
export interface WebhookDisabling {
  at: number;
  by: WebhookDisabler;
  reason: string;
}

/**
 * What an update changes; the rest (id, project, token, secrets, position) stays, and so does
 * whether it is disabled (setDisabled), so an edit never undoes the dispatcher disabling it.
 */
export type WebhookEndpointChange = Pick<WebhookEndpointRecord, 'url' | 'types' | 'inboxes' | 'description' | 'updatedAt'>;

/** `pending`: to be attempted (again) at `nextAttemptAt`; `delivered`: a 2xx; `failed`: given up. */
export type DeliveryState = 'pending' | 'delivered' | 'failed';

/**
 * One event to send to one endpoint: made when the dispatcher reads past the endpoint's position.
 * It names the event by its log position; the body is read from the log when it is sent.
 */
export interface NewDelivery {
  eventId: string;
  /** The event's log position. */
  position: number;
  type: string;
}

export interface DeliveryRecord extends NewDelivery {
  endpointId: string;
  projectId: string;
  state: DeliveryState;
  attempts: number;
  nextAttemptAt: number;
  lastAttemptAt: number | null;
  /** The receiver's HTTP status of the last attempt; null: none, or no answer. */
  lastStatus: number | null;
  /** Why the last attempt failed (no answer, refused address, a non-2xx status). */
  lastError: string | null;
  lastMs: number | null;
  createdAt: number;
  updatedAt: number;
}

/** Deliveries leased as they are made, to the process making them (it sends them without a claim). */
export interface EnqueueLease {
  owner: string;
  until: number;
  /** How many of the new deliveries, the first ones (oldest events), are leased. */
  count: number;
}

export interface ClaimQuery {
  /** The claiming process (its lease), and until when the claim holds. */
  owner: string;
  now: number;
  leaseUntil: number;
  /** How many each endpoint may have (what this process has room for); disabled ones get none. */
  endpoints: ReadonlyArray<{ id: string; limit: number }>;
}

/** What one attempt came to, written if the attempt's claim is still the owner's. */
export interface DeliveryOutcome {
  endpointId: string;
  eventId: string;
  /** The event's log position: as unique as its id within an endpoint (PostgreSQL keys deliveries by it). */
  position: number;
  owner: string;
  state: DeliveryState;
  nextAttemptAt: number;
  at: number;
  status: number | null;
  error: string | null;
  ms: number | null;
  /** What it says of the receiver: it answered 2xx, it failed, or nothing (never called). */
  receiver: 'up' | 'down' | null;
}

export interface WebhookStore {
  create(endpoint: WebhookEndpointRecord): Promise<void>;
  /** The project's endpoint, or null (none, or another project's). */
  get(projectId: string, id: string): Promise<WebhookEndpointRecord | null>;
  /** The project's endpoints, oldest first. */
  list(projectId: string): Promise<WebhookEndpointRecord[]>;
  /** The changed endpoint, or null when the project has no such endpoint. */
  update(projectId: string, id: string, change: WebhookEndpointChange): Promise<WebhookEndpointRecord | null>;
  /** Disables it (when, by whom, why) or, with null, enables it. Null: no such endpoint. */
  setDisabled(projectId: string, id: string, disabled: WebhookDisabling | null, at: number): Promise<WebhookEndpointRecord | null>;
  /** Puts a new secret in place, the current one becoming the previous (signing until `previousExpiresAt`). Null: no such endpoint. */
  rotateSecret(
    projectId: string,
    id: string,
    secretSealed: Buffer,
    previousExpiresAt: number,
    at: number,
  ): Promise<WebhookEndpointRecord | null>;
  /** False when the project had no such endpoint. Its deliveries go with it. */
  delete(projectId: string, id: string): Promise<boolean>;

  /** Every endpoint of every project, oldest first (the dispatcher, staff). */
  all(): Promise<WebhookEndpointRecord[]>;
  /**
   * Moves an endpoint's position from `from` to `to` and adds its deliveries, in one transaction;
   * null (nothing written) when the position is no longer `from` (another process moved it, or
   * a replay rewound it). A delivery already there is made pending afresh (a replay). With a
   * lease, the first `lease.count` deliveries are leased to its owner as they are made, and come
   * back (as a claim's would); without one, none are and the answer is empty.
   */
  enqueue(
    endpointId: string,
    from: number,
    to: number,
    deliveries: readonly NewDelivery[],
    at: number,
    lease?: EnqueueLease,
  ): Promise<DeliveryRecord[] | null>;
  /** Sets the position back to `position` if it is further on (a replay). Null: no such endpoint. */
  rewind(projectId: string, id: string, position: number, at: number): Promise<WebhookEndpointRecord | null>;
  /** Due pending deliveries of the endpoints named (enabled ones), oldest due first, leased to `owner` until `leaseUntil`. */
  claim(q: ClaimQuery): Promise<DeliveryRecord[]>;
  /**
   * Writes attempts' outcomes (those whose lease the owner still holds), and each endpoint's
   * failingSince (cleared by a delivery, set by the first failure). Returns the endpoints'
   * failingSince after the writes.
   */
  finish(outcomes: readonly DeliveryOutcome[]): Promise<Map<string, number | null>>;
  /** An endpoint's deliveries, newest event first, those before `beforePosition` (null: from the newest). */
  deliveries(projectId: string, id: string, beforePosition: number | null, limit: number): Promise<DeliveryRecord[]>;
  /** Forgets delivered and failed deliveries last changed before the cutoff; returns how many. */
  purgeDeliveries(olderThan: number): Promise<number>;
  /** When the longest-due pending delivery of an enabled endpoint was due; null: none pending (the metrics' queue age). */
  oldestDue(): Promise<number | null>;
}

/** What one POST to a receiver came to (adapters/webhooks/client.ts postWebhook, bound to its settings). */
export type PostResult =
  | { ok: true; status: number; retryAfterSeconds: number | null; ms: number }
  /** `cancelled`: abandoned through the signal (shutting down), which says nothing of the receiver. */
  | { ok: false; error: string; ms: number; cancelled?: boolean };
/**
 * How the dispatcher and test sends reach a receiver (adapters/webhooks/client.ts webhookPoster).
 * `project`: whose attempt it is (its share of DNS lookups, adapters/webhooks/dns.ts).
 */
export type Poster = (
  url: string,
  headers: Record<string, string>,
  body: string,
  signal?: AbortSignal,
  project?: string,
) => Promise<PostResult>;
