// The built-in event types Postern records, and how a list of data fields becomes a JSON Schema.
// A part of Postern that starts emitting a new built-in type adds it here first: record()
// refuses a type that is not in the catalog, and data that does not match its schema.
import type { DataField, EventClass, EventType, JsonSchemaObject, TypeStatus, Visibility } from './types.ts';

export const SCHEMA_BASE = 'https://postern.dev/schemas/events';

const FLAG_ENUM = ['seen', 'answered', 'flagged', 'draft', 'forwarded', 'junk', 'not_junk'];

/** Extra constraints a built-in field carries beyond its type (ids have a fixed form). */
interface BuiltinField extends DataField {
  pattern?: string;
  enum?: string[];
  minimum?: number;
  /** For string[]: the values items may take (distinct). */
  itemEnum?: string[];
}

/** A data field list → the JSON Schema its data must match (no other fields allowed). */
export function schemaForFields(fields: readonly (DataField | BuiltinField)[]): JsonSchemaObject {
  // Field names come from users: no prototype for a name like __proto__ to reach.
  const properties: Record<string, JsonSchemaObject> = Object.create(null) as Record<string, JsonSchemaObject>;
  for (const f of fields) {
    const extra = f as BuiltinField;
    let s: JsonSchemaObject;
    switch (f.type) {
      case 'string':
        s = { type: 'string' };
        if (extra.pattern) s.pattern = extra.pattern;
        if (extra.enum) s.enum = extra.enum;
        break;
      case 'integer':
        s = { type: 'integer' };
        if (extra.minimum !== undefined) s.minimum = extra.minimum;
        break;
      case 'boolean':
        s = { type: 'boolean' };
        break;
      case 'string[]':
        s = extra.itemEnum
          ? { type: 'array', items: { type: 'string', enum: extra.itemEnum }, uniqueItems: true }
          : { type: 'array', items: { type: 'string' } };
        break;
    }
    if (f.description) s.description = f.description;
    properties[f.name] = s;
  }
  const required = fields.filter((f) => f.required).map((f) => f.name);
  return {
    type: 'object',
    properties,
    ...(required.length ? { required } : {}),
    additionalProperties: false,
  };
}

/** The public form of a field: name, type, description, required (no internal constraints). */
const publicField = (f: BuiltinField): DataField => ({
  name: f.name,
  type: f.type,
  ...(f.description ? { description: f.description } : {}),
  required: f.required === true,
});

interface BuiltinSpec {
  name: string;
  description: string;
  class: EventClass;
  visibility: Visibility;
  status: TypeStatus;
  subject?: string;
  fields: BuiltinField[];
}

const MSG = '^msg_[0-9A-Z]{26}$';
const LBL = '^lbl_[0-9A-Z]{26}$';
const MEM = '^mem_[0-9A-Z]{26}$';
const PKY = '^pky_[0-9A-Z]{26}$';
const KHO = '^kho_[0-9A-Z]{26}$';
const WHK = '^whk_[0-9A-Z]{26}$';
const DRAFT = '^draft_[A-Za-z0-9_-]{16,64}$';
const FINGERPRINT = '^[0-9A-F]{40,64}$';
/** The mail types share class, visibility, status and subject, and all name their message first. */
function mailType(name: string, description: string, fields: BuiltinField[]): BuiltinSpec {
  return {
    name,
    description,
    class: 'mail',
    visibility: 'inbox',
    status: 'stable',
    subject: 'the message id (msg_…)',
    fields: [{ name: 'msgId', type: 'string', pattern: MSG, required: true, description: 'The message.' }, ...fields],
  };
}

const labelField = (description: string): BuiltinField => ({ name: 'labelId', type: 'string', pattern: LBL, description });

/**
 * A label created, renamed or deleted, by the API or a mail app: an extension of version 1
 * (docs/organize.md, "Events"), recorded by the sync (adapters/imap/sync.ts).
 */
function labelType(name: string, description: string, fields: BuiltinField[] = []): BuiltinSpec {
  return {
    name,
    description,
    class: 'mail',
    visibility: 'inbox',
    status: 'experimental',
    subject: 'the label id (lbl_…)',
    fields: [{ name: 'labelId', type: 'string', pattern: LBL, required: true, description: 'The label.' }, ...fields],
  };
}

const SOURCES: Record<EventClass, string> = {
  mail: '/postern/mail',
  delivery: '/postern/delivery',
  access: '/postern/access',
  ext: '/postern/projects',
};

const BUILTINS: BuiltinSpec[] = [
  {
    // Recorded by the LMTP ingress (lib/mail/ingress.ts) when Dovecot accepts the message for the
    // inbox, before Dovecot has given it an id: the message.added that follows names it.
    name: 'message.received',
    description:
      'A message arrived in the inbox from outside: the mail server accepted it for the inbox (sealed first in a zero-access inbox). The message.added that follows names the stored message.',
    class: 'mail',
    visibility: 'inbox',
    status: 'stable',
    subject: 'the Message-ID header of the message, when it has one',
    // The ingress always sets recipient, from, size and sealed; they are optional in the schema
    // so that a message.received from another source (none yet) need not invent them.
    fields: [
      {
        name: 'msgId',
        type: 'string',
        pattern: MSG,
        description: 'The stored message, when known when recorded (the ingress records before Dovecot names it).',
      },
      { name: 'recipient', type: 'string', description: 'The envelope recipient: the inbox address it arrived for.' },
      { name: 'from', type: 'string', description: 'The envelope sender (empty for a bounce).' },
      { name: 'size', type: 'integer', minimum: 0, description: 'Bytes of the message as it arrived (before sealing).' },
      { name: 'sealed', type: 'boolean', description: 'True when it was sealed to the inbox key on arrival (zero-access inbox).' },
      { name: 'epoch', type: 'integer', minimum: 1, description: 'The key epoch it was sealed to (sealed messages only).' },
      { name: 'messageId', type: 'string', description: 'The Message-ID header, when there is one.' },
    ],
  },
  mailType('message.added', 'A message was added to a label (new mail, a copy or a move).', [
    labelField('The label it was added to.'),
    { name: 'uid', type: 'integer', minimum: 1, description: 'Its number in that label.' },
  ]),
  mailType('message.removed', 'A message was removed from a label (expunged or moved away).', [
    labelField('The label it was removed from.'),
  ]),
  mailType('message.flags', "A message's flags changed (through the API or a mail app); read state is the seen flag.", [
    { name: 'flags', type: 'string[]', itemEnum: FLAG_ENUM, required: true, description: 'The flags now (Flag values).' },
    labelField('The label whose copy changed.'),
  ]),
  labelType('label.created', 'A label (an IMAP folder) was created in the inbox, through the API or by a mail app.', [
    { name: 'name', type: 'string', required: true, description: "Its name: the folder path, with the mail server's hierarchy delimiter." },
  ]),
  labelType(
    'label.renamed',
    'A label was renamed (its id stays), through the API or by a mail app; renaming a parent renames the labels under it, each its own event.',
    [
      { name: 'name', type: 'string', required: true, description: 'Its name now.' },
      { name: 'previousName', type: 'string', required: true, description: 'Its name before.' },
    ],
  ),
  labelType('label.deleted', 'A label was deleted, through the API or by a mail app. Its messages left it first (message.removed).', [
    { name: 'name', type: 'string', required: true, description: 'The name it had.' },
  ]),
  {
    // lib/send/drafts.ts: a draft saved through the API (docs/sending.md, "Drafts").
    name: 'draft.saved',
    description: "A draft was created or replaced in the inbox's Drafts folder through Postern; the actor is its author.",
    class: 'mail',
    visibility: 'inbox',
    status: 'stable',
    subject: 'the draft id (draft_…)',
    fields: [
      { name: 'draftId', type: 'string', pattern: DRAFT, required: true, description: 'The draft; its id is kept across updates.' },
      { name: 'created', type: 'boolean', required: true, description: 'True when the draft is new, false when it replaced a version.' },
      { name: 'sealed', type: 'boolean', description: 'Sealed by its writer (zero-access): Postern cannot read it before it is sent.' },
      { name: 'author', type: 'string', description: 'Who wrote it: a token (tok_…, an agent) or a member (mem_…).' },
    ],
  },
  {
    name: 'draft.removed',
    description: "A draft left the inbox's Drafts folder through Postern: deleted, or sent (once its Sent copy was filed).",
    class: 'mail',
    visibility: 'inbox',
    status: 'stable',
    subject: 'the draft id (draft_…)',
    fields: [
      { name: 'draftId', type: 'string', pattern: DRAFT, required: true },
      { name: 'sent', type: 'boolean', required: true, description: 'True when it went because it was sent.' },
    ],
  },
  // docs/organize.md, "Events": the state after a change, as JMAP's Email changes carry it, so a
  // consumer need not add up message.added and message.removed (which the sync may see apart).
  mailType(
    'message.labels',
    "A message's labels changed (through the API, a bulk change or a mail app's copy, move or expunge): every label it is in now.",
    [{ name: 'labelIds', type: 'string[]', required: true, description: 'Every label the message is in now (lbl_… ids).' }],
  ),
  mailType(
    'message.keywords',
    "A message's custom keywords (IMAP keywords such as $label1) changed in a label, through the API or a mail app.",
    [
      { name: 'keywords', type: 'string[]', required: true, description: 'Its keywords in that label now.' },
      labelField('The label whose copy changed.'),
    ],
  ),
  {
    // Recorded by lib/mail/bulk-journal.ts for each POST …/messages/bulk (and the bulk MCP tools):
    // the call as a whole. Each message's own changes are the message.* events the sync records.
    name: 'message.bulk',
    description:
      'One change was applied to many messages of the inbox (POST …/messages/bulk or a bulk MCP tool): which ids it changed, found already so, did not find, or refused.',
    class: 'mail',
    visibility: 'inbox',
    status: 'stable',
    subject: 'the Idempotency-Key of the call, when it had one',
    fields: [
      {
        name: 'change',
        type: 'string',
        enum: ['labels', 'flags', 'keywords', 'move', 'destroy'],
        required: true,
        description: 'What kind of change (destroy: deleted forever, an extension of version 1).',
      },
      { name: 'to', type: 'string', description: 'For change = move: where to (inbox, archive, trash, junk or a label id).' },
      {
        name: 'confirm',
        type: 'boolean',
        description: 'For change = destroy: messages outside Trash and Junk were allowed too.',
      },
      { name: 'add', type: 'string[]', description: 'The labels, flags or keywords added.' },
      { name: 'remove', type: 'string[]', description: 'The labels, flags or keywords removed.' },
      { name: 'changed', type: 'string[]', required: true, description: 'The messages changed.' },
      { name: 'unchanged', type: 'string[]', required: true, description: 'The messages already so.' },
      { name: 'notFound', type: 'string[]', required: true, description: 'The ids not found in the inbox.' },
      { name: 'refused', type: 'string[]', required: true, description: 'The messages the change was refused for.' },
      { name: 'errors', type: 'string[]', description: 'Why, for each refused message, in the same order.' },
    ],
  },
  {
    name: 'mail.delivery.accepted',
    description: 'The mail relay accepted a message sent from the inbox for delivery.',
    class: 'delivery',
    visibility: 'project',
    status: 'stable',
    subject: 'the Message-ID header of the sent message',
    fields: [
      { name: 'from', type: 'string', required: true, description: 'The envelope sender.' },
      { name: 'recipients', type: 'integer', minimum: 1, required: true, description: 'How many envelope recipients.' },
      { name: 'size', type: 'integer', minimum: 0, description: 'Bytes relayed.' },
      { name: 'messageId', type: 'string', description: 'The Message-ID header.' },
      { name: 'draftId', type: 'string', description: 'The draft id of a /send request.' },
      { name: 'msgId', type: 'string', pattern: MSG, description: 'The copy filed in Sent, once filed.' },
    ],
  },
  {
    name: 'mail.delivery.failed',
    description: 'Sending a message from the inbox failed: refused by the relay or a policy, or bounced later.',
    class: 'delivery',
    visibility: 'project',
    status: 'stable',
    subject: 'the Message-ID header of the message',
    fields: [
      { name: 'from', type: 'string', required: true },
      { name: 'reason', type: 'string', required: true, description: 'Why, in words.' },
      { name: 'permanent', type: 'boolean', required: true, description: 'False for a temporary failure worth retrying.' },
      { name: 'status', type: 'string', description: 'Enhanced status code, e.g. 5.1.1.' },
      { name: 'recipients', type: 'string[]', description: 'The recipients the failure concerns.' },
      {
        name: 'statuses',
        type: 'string[]',
        description: "For a bounce: each recipient's enhanced status code, in the order of recipients.",
      },
      { name: 'messageId', type: 'string' },
      { name: 'draftId', type: 'string' },
    ],
  },
  // lib/send/scheduled.ts: a send waiting in the outbox for its time or undo hold, and what became
  // of it (docs/sending.md, "The outbox"); sent or refused, it is mail.delivery.accepted or .failed.
  ...(
    [
      ['mail.outbox.scheduled', 'A send was stored to go later: at its send time, or once its undo hold passed.'],
      ['mail.outbox.rescheduled', "A waiting send's time was moved."],
      ['mail.outbox.cancelled', 'A waiting send was taken back before it went; its message is back in Drafts.'],
      ['mail.outbox.sending', 'A waiting send came due and is being relayed.'],
      [
        'mail.outbox.unknown',
        "A send's whole message was written to the relay (the end of its data included) but the relay's reply was lost, or the process died before recording it: it may or may not have been queued, is never sent again, and gets no Sent copy unless evidence settles it.",
      ],
      [
        'mail.outbox.settled',
        'A send whose outcome was unknown was settled by evidence that the relay took it (a delivery report naming its ENVID): its Sent copy is filed and its retries answer that it was sent.',
      ],
    ] as const
  ).map(
    ([name, description]): BuiltinSpec => ({
      name,
      description,
      class: 'delivery',
      visibility: 'project',
      status: 'stable',
      subject: 'the Message-ID header of the message',
      fields: [
        {
          name: 'outboxId',
          type: 'string',
          pattern: '^[0-9a-f]{32}$',
          required: true,
          description: 'The send in the outbox (GET …/outbox).',
        },
        { name: 'messageId', type: 'string', required: true, description: 'The Message-ID header.' },
        ...(name === 'mail.outbox.scheduled' || name === 'mail.outbox.rescheduled'
          ? [{ name: 'sendAt', type: 'string', required: true, description: 'When it goes (RFC 3339).' } as const]
          : []),
        ...(name === 'mail.outbox.scheduled'
          ? [{ name: 'holdUntil', type: 'string', description: 'Until when it can be taken back (RFC 3339).' } as const]
          : []),
        ...(name === 'mail.outbox.cancelled'
          ? [{ name: 'draftId', type: 'string', pattern: DRAFT, required: true, description: 'The draft it became.' } as const]
          : []),
        ...(name === 'mail.outbox.unknown'
          ? [{ name: 'reason', type: 'string', required: true, description: 'What happened to the connection or the process.' } as const]
          : []),
        ...(name === 'mail.outbox.settled'
          ? [
              {
                name: 'evidence',
                type: 'string',
                enum: ['dsn'],
                required: true,
                description: 'What settled it: dsn, a delivery status notification naming the send as its Original-Envelope-Id.',
              } satisfies BuiltinField,
              {
                name: 'actions',
                type: 'string[]',
                description: "The report's actions for its recipients (delivered, relayed, expanded, delayed, failed), each once.",
              } satisfies BuiltinField,
            ]
          : []),
      ],
    }),
  ),
  {
    name: 'access.content.read',
    description: 'Decrypted content of a message was read through /content, /source or /attachments/{n}. Audit-only.',
    class: 'access',
    visibility: 'audit',
    status: 'stable',
    subject: 'the message id (msg_…)',
    fields: [
      { name: 'msgId', type: 'string', pattern: MSG, required: true },
      { name: 'part', type: 'string', enum: ['content', 'source', 'attachment'], required: true, description: 'Which read.' },
      { name: 'attachment', type: 'integer', minimum: 0, description: 'The attachment index, for part = attachment.' },
    ],
  },
  {
    name: 'access.content.searched',
    description:
      'Messages of the inbox were searched by their content (GET /search with body or text): the mail server read them for Postern. Audit-only; the words searched for are not recorded.',
    class: 'access',
    visibility: 'audit',
    status: 'stable',
    subject: 'the inbox id (ibx_…)',
    fields: [
      {
        name: 'conditions',
        type: 'string[]',
        itemEnum: ['body', 'text'],
        required: true,
        description: 'Which content conditions the search had.',
      },
      { name: 'labelId', type: 'string', pattern: LBL, description: 'The label searched (inLabel); absent: every label.' },
    ],
  },
  {
    name: 'access.content.previewed',
    description:
      "A page of messages was served with their previews (…?preview=true, or an agent's list_messages): the index's ~200 characters of each message's text. Audit-only; one event per page.",
    class: 'access',
    visibility: 'audit',
    status: 'stable',
    subject: 'the inbox id (ibx_…)',
    fields: [
      { name: 'msgIds', type: 'string[]', required: true, description: 'The messages of the page (msg_…).' },
      { name: 'labelId', type: 'string', pattern: LBL, description: 'The label listed; absent for a search or a thread.' },
    ],
  },
  // Recorded by lib/auth (passkeys.ts, key-change.ts): what widens who can read a member's mail.
  {
    name: 'access.key.set',
    description:
      "A member's encryption key (PUT /me/key, or staff's `postern admin member set-key`) was set or replaced: /keys seals every epoch key to it from now on. A member's replacement is confirmed with a fresh passkey assertion; the first key may rely on a session minutes old.",
    class: 'access',
    visibility: 'project',
    status: 'stable',
    subject: 'the member id (mem_…)',
    fields: [
      { name: 'memberId', type: 'string', pattern: MEM, required: true, description: 'Whose key.' },
      { name: 'fingerprint', type: 'string', pattern: FINGERPRINT, required: true, description: "The new key's fingerprint." },
      { name: 'previousFingerprint', type: 'string', pattern: FINGERPRINT, description: 'The key it replaced; absent for the first key.' },
      {
        name: 'confirmedBy',
        type: 'string',
        enum: ['passkey', 'fresh-session', 'staff'],
        required: true,
        description:
          'A fresh passkey assertion, (first key only) a session at most POSTERN_REAUTH_MAX_AGE old, or staff on the server (postern admin member set-key).',
      },
      { name: 'passkeyId', type: 'string', pattern: PKY, description: 'The passkey that confirmed it (or that opened the fresh session).' },
    ],
  },
  {
    name: 'access.passkey.added',
    description:
      'A passkey was added to a member: enrolled from a staff invitation, or added by a signed-in member after confirming with another of their passkeys.',
    class: 'access',
    visibility: 'project',
    status: 'stable',
    subject: 'the member id (mem_…)',
    fields: [
      { name: 'memberId', type: 'string', pattern: MEM, required: true, description: 'Whose passkey.' },
      { name: 'passkeyId', type: 'string', pattern: PKY, required: true, description: 'The new passkey.' },
      { name: 'name', type: 'string', required: true, description: 'Its name, as the member gave it.' },
      {
        name: 'via',
        type: 'string',
        enum: ['invite', 'session'],
        required: true,
        description: 'An enrollment link, or a signed-in session.',
      },
      {
        name: 'confirmedWith',
        type: 'string',
        pattern: PKY,
        description: 'For via = session: the passkey whose fresh assertion confirmed it.',
      },
    ],
  },
  // Recorded by lib/crypto/key-handovers.ts.
  {
    name: 'access.device.approved',
    description:
      'A signed-in device approved a new device of the same member and handed it the member\'s key, sealed to the new device (docs/app.md, "A new device"): the server relayed only ciphertext.',
    class: 'access',
    visibility: 'project',
    status: 'stable',
    subject: 'the member id (mem_…)',
    fields: [
      { name: 'memberId', type: 'string', pattern: MEM, required: true, description: 'Whose key.' },
      { name: 'handoverId', type: 'string', pattern: KHO, required: true, description: 'The request the new device made (kho_…).' },
      {
        name: 'device',
        type: 'string',
        description: "The new device's browser and system, as its User-Agent named them; absent when not known.",
      },
    ],
  },
  // Recorded by the webhook dispatcher (lib/webhooks/disabling.ts) when it stops sending to an endpoint.
  {
    name: 'webhook.endpoint.disabled',
    description:
      'Postern stopped sending to a webhook endpoint: every attempt failed for POSTERN_WEBHOOK_DISABLE_AFTER (3 days by default), the receiver answered 410 Gone, the token that created it was revoked or expired, or staff disabled it. Its deliveries wait; enabling it (PATCH enabled: true) sends them.',
    class: 'delivery',
    visibility: 'project',
    status: 'stable',
    subject: 'the webhook endpoint id (whk_…)',
    fields: [
      { name: 'webhookId', type: 'string', pattern: WHK, required: true, description: 'The endpoint.' },
      {
        name: 'reason',
        type: 'string',
        enum: ['failing', 'gone', 'token', 'staff'],
        required: true,
        description: 'failing for too long, 410 Gone, its token revoked or expired, or staff (postern admin webhook disable).',
      },
      { name: 'detail', type: 'string', description: 'What the last attempt got, in words.' },
    ],
  },
];

export function builtinSchemaId(name: string, version: number): string {
  return `${SCHEMA_BASE}/${name}/v${version}.json`;
}

export function extSchemaId(projectId: string, name: string, version: number): string {
  return `${SCHEMA_BASE}/${projectId}/${name}/v${version}.json`;
}

export const BUILTIN_TYPES: readonly EventType[] = BUILTINS.map((b) => ({
  name: b.name,
  version: 1,
  description: b.description,
  source: SOURCES[b.class],
  class: b.class,
  visibility: b.visibility,
  status: b.status,
  data: b.fields.map(publicField),
  dataSchema: { $id: builtinSchemaId(b.name, 1), ...schemaForFields(b.fields) },
  ...(b.subject ? { subject: b.subject } : {}),
}));

const BY_NAME = new Map(BUILTIN_TYPES.map((t) => [t.name, t]));

export function builtinType(name: string): EventType | undefined {
  return BY_NAME.get(name);
}

/** The source of a project's own events: the project, as a URI reference. */
export function extSource(projectId: string): string {
  return `${SOURCES.ext}/${projectId}`;
}

export const EXT_NAME = /^ext\.[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$/;
