// The API's wire shapes as TypeScript: what the server sends and the web app reads (docs/api.md, and
// the JSON Schemas beside this file, which the server validates against and the OpenAPI document
// is built from). Types only, and no imports: lib/ and web/ both `import type` from here, so the
// contract is written once and nothing of the server reaches the browser bundle.
// test/http/wire.test.ts checks each interface's keys (required and optional) and enums against its
// schema, so the two cannot drift apart.

/** docs/api.md, "Flag and WebFlag" (common.json Flag). */
export type Flag = 'seen' | 'answered' | 'flagged' | 'draft' | 'forwarded' | 'junk' | 'not_junk';

/** docs/api.md, "Flag and WebFlag": the flags the API may change (common.json WebFlag). */
export type WebFlag = 'seen' | 'flagged' | 'answered';

/** docs/api.md, "Label": the special-use attributes, as IMAP spells them (RFC 6154). */
export type SpecialUse = '\\Sent' | '\\Drafts' | '\\Trash' | '\\Junk' | '\\Archive';

/** docs/api.md, "InboxGrant" (common.json InboxGrant). */
export interface InboxGrant {
  inboxId: string;
  role: string;
  label?: string;
  /** An extension of version 1 (docs/encryption.md). */
  mode?: 'compatible' | 'zero-access';
}

/** GET /inboxes (common.json InboxList). */
export interface InboxList {
  inboxes: InboxGrant[];
}

/** docs/api.md, "Label" (mail.json Label). */
export interface Label {
  id: string;
  name: string;
  total: number;
  unread: number;
  specialUse?: SpecialUse;
}

/** GET /inboxes/{inbox}/labels (mail.json LabelList). */
export interface LabelList {
  labels: Label[];
}

/** docs/api.md, "MessageSummary" (mail.json MessageSummary). */
export interface MessageSummary {
  id: string;
  uid: number;
  receivedAt: string;
  flags: Flag[];
  size: number;
  date?: string;
  from?: string;
  to?: string;
  subject?: string;
  keywords?: string[];
  direction?: 'in' | 'out';
  /** An extension (docs/threads.md): the message's thread (mail.json ThreadId). */
  threadId?: string;
  /** An extension: in a collapsed page, the row's thread (mail.json ThreadCounts). */
  thread?: ThreadCounts;
  /** An extension (docs/threads.md, "Previews"): asked with preview=true, by a caller that may read content. */
  preview?: string;
}

/** docs/threads.md (mail.json ThreadCounts). */
export interface ThreadCounts {
  messages: number;
  unread: number;
  participants: string[];
}

/** GET /inboxes/{inbox}/threads/{thread} (mail.json Thread). */
export interface Thread {
  id: string;
  messages: MessageSummary[];
  more?: boolean;
}

/** A page of a label's messages, newest first (mail.json MessageList). */
export interface MessageList {
  messages: MessageSummary[];
  /** The cursor of the next page; absent on the last. */
  before?: number;
}

/** A page of search results, newest first (mail.json MessageSearchPage; docs/search.md). */
export interface MessageSearchPage {
  messages: MessageSummary[];
  /** The next page's cursor, opaque; absent on the last. */
  cursor?: string;
}

/** docs/api.md, "Message detail": GET /inboxes/{inbox}/messages/{msg} (mail.json MessageDetail). */
export interface MessageDetail {
  message: MessageSummary;
  keyEpoch: number;
  /** Base64 of the PKESK packet(s) sealing the message's session key to the epoch key. */
  wrappedDek: string;
  cc?: string;
  replyTo?: string;
  messageId?: string;
  inReplyTo?: string;
}

/** POST /inboxes/{inbox}/messages/{msg}/flags (mail.json FlagChange). */
export interface FlagChange {
  add?: WebFlag[];
  remove?: WebFlag[];
}

/** Its answer: the message's flags now (mail.json FlagsResponse). */
export interface FlagsResponse {
  flags: Flag[];
}

/**
 * POST /inboxes/{inbox}/messages/{msg}/labels (mail.json LabelChange), an extension of version 1:
 * docs/organize.md, "Labels".
 */
export interface LabelChange {
  add?: string[];
  remove?: string[];
}

/** POST /inboxes/{inbox}/messages/{msg}/move (mail.json MessageMove), an extension of version 1: docs/organize.md, "Move". */
export interface MessageMove {
  /** inbox, archive, trash, junk, or a label id (mail.json MoveTarget). */
  to: string;
}

/** POST /inboxes/{inbox}/messages/{msg}/keywords (mail.json KeywordChange), an extension of version 1: docs/organize.md, "Keywords". */
export interface KeywordChange {
  add?: string[];
  remove?: string[];
}

/** Its answer: the message's custom keywords now (mail.json KeywordsResponse). */
export interface KeywordsResponse {
  keywords: string[];
}

/** The answer of both: the labels the message is in now, in label order, and its flags (mail.json MessagePlacement). */
export interface MessagePlacement {
  labels: string[];
  flags: Flag[];
}

/**
 * POST /inboxes/{inbox}/messages/bulk (mail.json BulkChange), an extension of version 1:
 * docs/organize.md, "Bulk". `ids` and exactly one of the four changes.
 */
export interface BulkChange {
  ids: string[];
  labels?: LabelChange;
  flags?: BulkFlagChange;
  keywords?: KeywordChange;
  move?: MessageMove;
  destroy?: BulkDestroy;
}

/** A bulk call's delete forever (docs/organize.md, "Delete forever"); needs messages:destroy. */
export interface BulkDestroy {
  confirm?: boolean;
}

/** A bulk call's flags to add and remove, as POST …/flags takes them. */
export interface BulkFlagChange {
  add?: WebFlag[];
  remove?: WebFlag[];
}

/** What a bulk change did to one id. */
export interface BulkOutcome {
  id: string;
  status: 'changed' | 'unchanged' | 'not_found' | 'refused';
  error?: string;
}

/** Its answer, per id (mail.json BulkResult). */
export interface BulkResult {
  results: BulkOutcome[];
  changed: number;
  unchanged: number;
  notFound: number;
  refused: number;
  replayed?: boolean;
}

/**
 * An extension of version 1 (docs/organize.md, "Folders"): a label created, renamed or deleted, on
 * the inbox stream beside LiveChange (mail.json LabelLiveChange).
 */
export interface LabelLiveChange {
  type: 'label.created' | 'label.renamed' | 'label.deleted';
  labelId: string;
  /** The label's name (path) now; for label.deleted, the name it had. */
  name: string;
  /** label.renamed only: the name before. */
  previousName?: string;
}

/** POST /inboxes/{inbox}/labels (mail.json LabelCreate) and PATCH …/labels/{label} (mail.json LabelRename): extensions of version 1. */
export interface LabelName {
  name: string;
}

/** docs/api.md, "LiveChange": the data of each inbox stream event (mail.json LiveChange). */
export interface LiveChange {
  /** message.labels and message.keywords are extensions of version 1 (docs/organize.md, "Events"). */
  type: 'message.added' | 'message.removed' | 'message.flags' | 'message.labels' | 'message.keywords';
  msgId: string;
  /** The label a message was added to or removed from; on message.flags too (flags are per label in IMAP). */
  labelId?: string;
  uid?: number;
  flags?: Flag[];
  /** message.labels: every label the message is in now. */
  labelIds?: string[];
  /** message.keywords: its keywords in that label now. */
  keywords?: string[];
}

/** docs/api.md, "Epoch keys": one epoch's private key, sealed to the caller's user key. */
export interface EpochKey {
  epoch: number;
  wrapped: string;
}

/** GET /inboxes/{inbox}/keys (crypto.json EpochKeyList). */
export interface EpochKeyList {
  epochs: EpochKey[];
}

/**
 * PUT /me/key: the member's OpenPGP public key, armored or base64 of the binary (crypto.json
 * UserKey); the request (app.json SetKeyRequest) adds `reauth` to replace a key already set.
 */
export interface UserKey {
  publicKey: string;
}

/** Its answer: the key's fingerprint, upper-case hex (crypto.json UserKeySet). */
export interface UserKeySet {
  fingerprint: string;
}

/** docs/api.md, "Compose data": GET /inboxes/{inbox}/compose (crypto.json ComposeData). */
export interface ComposeData {
  addresses: string[];
  epoch: number;
  /** Base64 of the epoch's binary OpenPGP public key. */
  epochPublic: string;
  epochFingerprint: string;
}

/** POST /inboxes/{inbox}/send: a message sealed to the epoch key (send.json SendRequest). */
export interface SendRequest {
  draftId: string;
  epoch: number;
  wrappedDek: string;
  ciphertext: string;
  from: string;
  to: string[];
}

/** Both send operations' answer (send.json SendResult). */
export interface SendResult {
  sent: true;
  /** An extension of version 1: the Message-ID the message went with. */
  messageId?: string;
}

/** An inbox address's display name and signature (send.json Identity; docs/sending.md, "Identities"). */
export interface Identity {
  address: string;
  displayName: string | null;
  signatureText: string | null;
  signatureHtml: string | null;
  updatedAt: number | null;
}

/** GET /inboxes/{inbox}/identities (send.json IdentityList). */
export interface IdentityList {
  identities: Identity[];
}

/** POST and PUT /inboxes/{inbox}/drafts: a plain draft (drafts.json RawDraft); a sealed one is a SendRequest. */
export interface RawDraft {
  draftId?: string;
  raw: string;
}

/** A draft in the inbox's Drafts folder (drafts.json Draft): docs/sending.md, "Drafts". */
export interface Draft {
  id: string;
  sealed: boolean;
  /** tok_… or mem_… that last saved it through Postern; null for a mail app's draft. */
  author: string | null;
  from: string | null;
  to: string[];
  subject: string | null;
  size: number;
  savedAt: string;
}

/** GET /inboxes/{inbox}/drafts/{draft} (drafts.json DraftDetail): `raw`, or a sealed draft's parts. */
export interface DraftDetail {
  id: string;
  sealed: boolean;
  author: string | null;
  from: string | null;
  to: string[];
  subject: string | null;
  size: number;
  savedAt: string;
  raw?: string;
  epoch?: number;
  wrappedDek?: string;
  ciphertext?: string;
}

/** GET /inboxes/{inbox}/drafts (drafts.json DraftList). */
export interface DraftList {
  drafts: Draft[];
}

/** What a re-authentication confirms (app.json ReauthOperation): POST /me/reauth/options. */
export type ReauthOperation = 'replace-key' | 'add-passkey';

/** A member's passkey (app.json Passkey). */
export interface Passkey {
  id: string;
  name: string;
  createdAt: string;
  lastUsedAt: string | null;
  backedUp: boolean;
  disabled: boolean;
}

/** GET /auth/passkeys (app.json PasskeyList). */
export interface PasskeyList {
  passkeys: Passkey[];
}

/** A web session opened by enrollment or sign-in (app.json SignedIn); enrollment adds its passkey. */
export interface SignedIn {
  session: string;
  expiresAt: string;
  memberId: string;
  email: string;
  passkeyId: string;
  passkey?: Passkey;
}

/** One of the member's sessions (app.json Session). */
export interface Session {
  id: string;
  /** The passkey that opened it; null for a staff-issued session. */
  passkeyId: string | null;
  createdAt: string;
  expiresAt: string;
  /** The browser and system it was opened on ("Chrome on Linux"); null when not known. */
  device: string | null;
  /** The last request made with it, to the minute; null for none yet. */
  lastUsedAt: string | null;
  current: boolean;
}

/** GET /auth/sessions (app.json SessionList). */
export interface SessionList {
  sessions: Session[];
}

/** GET /me/key-backup (app.json KeyBackup). */
export interface KeyBackup {
  blob: string;
  version: number;
  updatedAt: string;
}

/** PUT /me/key-backup (app.json KeyBackupWrite). */
export interface KeyBackupWrite {
  blob: string;
  replaces: number;
}

/** POST /me/key-handovers (app.json KeyHandoverRequest). */
export interface KeyHandoverRequest {
  publicKey: string;
}

/** POST /me/key-handovers/{id}/approve (app.json KeyHandoverApproval). */
export interface KeyHandoverApproval {
  publicKey: string;
  sealed: string;
}

/** A new device's request for the member's key (app.json KeyHandover). */
export interface KeyHandover {
  id: string;
  status: 'pending' | 'approved';
  device: string | null;
  mine: boolean;
  requesterKey: string;
  approverKey?: string;
  sealed?: string;
  createdAt: string;
  expiresAt: string;
}

/** GET /me/key-handovers (app.json KeyHandoverList). */
export interface KeyHandoverList {
  handovers: KeyHandover[];
}

/** POST /webhooks (webhooks.json NewWebhook). */
export interface NewWebhook {
  url: string;
  types?: string[] | null;
  inboxes?: string[] | null;
  description?: string | null;
}

/** PATCH /webhooks/{id} (webhooks.json WebhookChange). */
export interface WebhookChange {
  url?: string;
  types?: string[] | null;
  inboxes?: string[] | null;
  description?: string | null;
  enabled?: boolean;
}

/** A webhook endpoint, without its secret (webhooks.json Webhook). */
export interface Webhook {
  id: string;
  url: string;
  types: string[] | null;
  inboxes: string[] | null;
  description: string | null;
  enabled: boolean;
  disabledAt: string | null;
  disabledReason: string | null;
  /** After a rotation: until when the previous secret still signs. */
  previousSecretExpiresAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** POST /webhooks: the endpoint and its secret, shown this once (webhooks.json WebhookCreated). */
export interface WebhookCreated {
  id: string;
  url: string;
  types: string[] | null;
  inboxes: string[] | null;
  description: string | null;
  enabled: boolean;
  disabledAt: string | null;
  disabledReason: string | null;
  previousSecretExpiresAt: string | null;
  createdAt: string;
  updatedAt: string;
  secret: string;
}

/** POST /webhooks/{id}/rotate-secret (webhooks.json WebhookSecret). */
export interface WebhookSecret {
  secret: string;
  previousSecretExpiresAt: string;
}

/** GET /webhooks (webhooks.json WebhookList). */
export interface WebhookList {
  webhooks: Webhook[];
}

/** POST /webhooks/{id}/replay (webhooks.json WebhookReplay). */
export interface WebhookReplay {
  after: string;
}

/** POST /webhooks/{id}/replay: accepted (webhooks.json WebhookReplayStarted). */
export interface WebhookReplayStarted {
  after: string;
}

/** One event's delivery to an endpoint (webhooks.json WebhookDelivery). */
export interface WebhookDelivery {
  eventId: string;
  type: string;
  cursor: string;
  state: 'pending' | 'delivered' | 'failed';
  attempts: number;
  lastAttemptAt: string | null;
  lastStatus: number | null;
  lastError: string | null;
  lastDurationMs: number | null;
  nextAttemptAt: string | null;
  createdAt: string;
}

/** GET /webhooks/{id}/deliveries (webhooks.json WebhookDeliveryList). */
export interface WebhookDeliveryList {
  deliveries: WebhookDelivery[];
  next: string | null;
}

/** POST /webhooks/{id}/test (webhooks.json WebhookTestResult). */
export interface WebhookTestResult {
  delivered: boolean;
  status: number | null;
  error: string | null;
  durationMs: number;
}
