// Drafts (docs/sending.md, "Drafts"), an extension of version 1: messages kept in the inbox's
// \Drafts folder, so mail apps see Postern's drafts and Postern sees theirs. IMAP cannot change a
// stored message, so an update APPENDs the new version and expunges the old; the draft keeps its
// id through that because the id travels in the message, in an X-Postern-Draft-Id field (a mail
// app's draft, which has none, is named after its UIDVALIDITY and UID until Postern first saves
// it). A zero-access inbox's draft is sealed by the client exactly as a /send body is, stored
// as PGP/MIME the server does not open, and opened only when it is sent. Sending goes through
// SendService with the draft id as the outbox's draft id: the same exactly-once rules as /send.
import { createHash } from 'node:crypto';
import * as openpgp from 'openpgp';
import { dearmor } from '../crypto/armor.ts';
import { splitPkesk } from '../crypto/mail-opening.ts';
import type { Inbox } from '../directory/types.ts';
import { conflict, forbidden, invalid, notFound, unavailable, unprocessable } from '../errors.ts';
import type { EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { Draft, DraftDetail } from '../../schemas/wire.ts';
import { randomId } from '../ids.ts';
import type { MailInbox } from '../mail/types.ts';
import type { WarnLog } from '../warn-log.ts';
import type { MemoryBudget, OutboxStore } from './ports.ts';
import { fromAddress, headerValues, lineEnding, splitHeader, withoutField } from './rfc5322.ts';
import type { DraftOpener } from './draft-opening.ts';
import {
  draftFingerprint,
  isScheduled,
  MAX_MESSAGE_BYTES,
  MAX_RECIPIENTS,
  type SendRequest,
  type SendResult,
  type SendService,
} from './service.ts';

/** A send time or undo hold for a draft's send (docs/sending.md, "Send later"). */
type Schedule = SendRequest['schedule'];

export const DRAFT_ID = /^draft_[A-Za-z0-9_-]{16,64}$/;
/** The fields Postern writes on a draft, and strips from what a client gives and from what it sends. */
const ID_FIELD = 'X-Postern-Draft-Id';
const AUTHOR_FIELD = 'X-Postern-Draft-Author';
/** A sealed draft's epoch and envelope recipients (the server cannot read them from the message). */
const SEALED_FIELD = 'X-Postern-Draft-Sealed';
const TO_FIELD = 'X-Postern-Draft-To';
const OWN_FIELDS = [ID_FIELD, AUTHOR_FIELD, SEALED_FIELD, TO_FIELD];
const ACTOR = /^(tok|mem)_[0-9A-Z]{26}$/;
const CRLF = '\r\n';

/** A message in the \Drafts folder as the mail server lists it (adapters/imap/drafts.ts). */
export interface FolderDraft {
  uid: number;
  uidValidity: number;
  size: number;
  /** INTERNALDATE, ms since the epoch: when this version was stored. */
  savedAt: number;
  /** The X-Postern-Draft-* fields, as a header block. */
  fields: Buffer;
  subject: string | null;
  /** Bare addresses of From, and of To, Cc and Bcc together. */
  from: string | null;
  to: string[];
}

export interface DraftFolder {
  /** The drafts in the inbox's \Drafts folder; a conflict when the mail server has none. */
  list(inbox: MailInbox): Promise<FolderDraft[]>;
  /** The message's bytes; null when it is gone. */
  source(inbox: MailInbox, at: { uid: number; uidValidity: number }): Promise<Buffer | null>;
  /** APPENDs `raw` with \Draft and \Seen, then expunges `replacing` (only once the new one is stored). */
  save(inbox: MailInbox, raw: Buffer, replacing: { uids: number[]; uidValidity: number } | null): Promise<void>;
  /** Expunges these messages. */
  remove(inbox: MailInbox, at: { uids: number[]; uidValidity: number }): Promise<void>;
}

/** What a draft holds: an RFC 5322 message, or one the client sealed as for /send. */
export type DraftContent =
  | { raw: Buffer }
  | { sealed: { epoch: number; wrappedDek: Buffer; ciphertext: Buffer; from: string; to: readonly string[] } };

interface Found {
  draft: Draft;
  /** Every stored version with this id, newest last (more than one only after an interrupted save). */
  uids: number[];
  uidValidity: number;
}

/** How long sending a draft waits for its Sent copy to be filed before it removes the draft. */
const FILED_WAIT_MS = 20_000;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function idOf(d: FolderDraft): string {
  const named = headerValues(d.fields, ID_FIELD)[0];
  if (named && DRAFT_ID.test(named)) return named;
  // A mail app's draft: named after where it is stored, until Postern saves it with this id.
  return `draft_imap-${d.uidValidity}-${String(d.uid).padStart(10, '0')}`;
}

function viewOf(d: FolderDraft): Draft {
  const author = headerValues(d.fields, AUTHOR_FIELD)[0] ?? '';
  const sealed = headerValues(d.fields, SEALED_FIELD).length > 0;
  return {
    id: idOf(d),
    sealed,
    author: ACTOR.test(author) ? author : null,
    from: d.from,
    to: sealed ? recipientsOf(d.fields) : d.to,
    subject: sealed ? null : d.subject,
    size: d.size,
    savedAt: new Date(d.savedAt).toISOString(),
  };
}

function recipientsOf(fields: Buffer): string[] {
  return (headerValues(fields, TO_FIELD)[0] ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
}

/** A sealed draft's epoch, from its X-Postern-Draft-Sealed field; NaN when it has none. */
function epochOf(head: Buffer): number {
  return Number(/epoch=(\d+)/.exec(headerValues(head, SEALED_FIELD)[0] ?? '')?.[1] ?? NaN);
}

/** `head` without the fields only Postern may write. */
function withoutOwnFields(head: Buffer): Buffer {
  return OWN_FIELDS.reduce((h, name) => withoutField(h, name), head);
}

/** The OpenPGP message of a sealed draft, from its armored part. */
async function sealedParts(source: Buffer): Promise<{ wrappedDek: Buffer; ciphertext: Buffer }> {
  const text = source.toString('latin1');
  const begin = text.indexOf('-----BEGIN PGP MESSAGE-----');
  const endMarker = '-----END PGP MESSAGE-----';
  const end = text.indexOf(endMarker, begin);
  if (begin < 0 || end < 0) throw unprocessable('the sealed draft holds no OpenPGP message');
  const pieces: Buffer[] = [];
  for await (const piece of dearmor(
    (async function* () {
      yield source.subarray(begin, end + endMarker.length);
    })(),
  ))
    pieces.push(piece);
  const split = splitPkesk(Buffer.concat(pieces));
  if (!split) throw unprocessable('the sealed draft holds no sealed session key');
  return { wrappedDek: Buffer.from(split.wrappedDek), ciphertext: Buffer.from(split.raw) };
}

export interface DraftServiceOptions {
  folder: DraftFolder;
  send: SendService;
  /** Opens a sealed draft at its send, as /send opens its body. */
  opener: DraftOpener;
  outbox: OutboxStore;
  events: EventLog;
  log: WarnLog;
  /** The send bodies' memory budget (lib/http/routes/send.ts): a draft being sent is held whole. */
  memory?: MemoryBudget;
}

export class DraftService {
  /** Saves and sends of one draft, one at a time in this process (an update appends, then expunges). */
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly folder: DraftFolder;
  private readonly send: SendService;
  private readonly opener: DraftOpener;
  private readonly outbox: OutboxStore;
  private readonly events: EventLog;
  private readonly log: WarnLog;
  private readonly memory: MemoryBudget | null;

  constructor(o: DraftServiceOptions) {
    this.folder = o.folder;
    this.send = o.send;
    this.opener = o.opener;
    this.outbox = o.outbox;
    this.events = o.events;
    this.log = o.log;
    this.memory = o.memory ?? null;
  }

  /** A draft's send time or hold, checked as any send's (docs/sending.md, "Send later"). */
  scheduleOf(sendAt: string | undefined, holdSeconds: number | undefined): Schedule {
    return this.send.scheduleOf(sendAt, holdSeconds);
  }

  async list(inbox: Inbox): Promise<Draft[]> {
    return [...(await this.byId(inbox)).values()]
      .map((f) => f.draft)
      .sort((a, b) => b.savedAt.localeCompare(a.savedAt) || a.id.localeCompare(b.id));
  }

  async get(inbox: Inbox, id: string): Promise<DraftDetail> {
    const found = await this.find(inbox, id);
    const source = await this.folder.source(inbox, { uid: found.uids.at(-1)!, uidValidity: found.uidValidity });
    if (!source) throw notFound('draft not found');
    if (found.draft.sealed) {
      const parts = await sealedParts(source);
      return {
        ...found.draft,
        epoch: epochOf(splitHeader(source).head),
        wrappedDek: parts.wrappedDek.toString('base64'),
        ciphertext: parts.ciphertext.toString('base64'),
      };
    }
    return { ...found.draft, raw: this.outgoing(source).toString('base64') };
  }

  /** A new draft, named `id` when the client chose it (a sealed draft's ciphertext is bound to it). */
  async create(inbox: Inbox, actor: string, content: DraftContent, id?: string): Promise<Draft> {
    const draftId = id ?? `draft_${randomId(18).toString('base64url')}`;
    return this.exclusive(inbox.id, draftId, async () => {
      if ((await this.byId(inbox)).has(draftId)) throw conflict(`draft ${draftId} exists already: update it with PUT`);
      if (await this.outbox.byDraft(inbox.id, draftId)) throw conflict(`draft ${draftId} was sent already`);
      return this.save(inbox, actor, draftId, content, null);
    });
  }

  /** Replaces the draft's message; its id stays. */
  async update(inbox: Inbox, actor: string, id: string, content: DraftContent): Promise<Draft> {
    return this.exclusive(inbox.id, id, async () => {
      const found = await this.find(inbox, id);
      // Sent, and still in Drafts only because its Sent copy was slow: changing it now would
      // change nothing that was sent.
      if (await this.outbox.byDraft(inbox.id, id)) throw conflict(`draft ${id} was sent already`);
      return this.save(inbox, actor, id, content, found);
    });
  }

  async remove(inbox: Inbox, actor: string, id: string): Promise<void> {
    await this.exclusive(inbox.id, id, async () => {
      const found = await this.find(inbox, id);
      await this.folder.remove(inbox, found);
      await this.record(inbox, actor, 'draft.removed', id, { draftId: id, sent: false });
    });
  }

  /**
   * Sends the draft as /send or /messages would (the draft id is the outbox's: a retry never
   * sends it twice), then removes it from Drafts once its Sent copy is filed. Scheduled (a send
   * time or an undo hold), it leaves Drafts at once: the outbox holds it, and cancelling it there
   * puts it back under the same id.
   */
  async sendDraft(inbox: Inbox, actor: string, id: string, schedule?: Schedule): Promise<SendResult> {
    return this.exclusive(inbox.id, id, async () => {
      const found = (await this.byId(inbox)).get(id);
      if (!found) {
        // Sent already (and removed): the first answer again.
        const first = await this.outbox.byDraft(inbox.id, id);
        if (!first) throw notFound('draft not found');
        const prior = await this.send.priorAnswer(inbox.id, id, first.fingerprint ?? '');
        if (!prior) throw unavailable('this draft is being sent; try again');
        return prior;
      }
      // What is held at once, as a /send body counts it: the draft read whole, the message opened
      // from it (sealed), and a zero-access inbox's Sent copy sealed (the joined message and the sealed bytes).
      const size = found.draft.size;
      const release = await this.memory?.enter(size + (found.draft.sealed ? size : 0) + (inbox.mode === 'zero-access' ? 2 * size : 0));
      let result: SendResult;
      try {
        const source = await this.folder.source(inbox, { uid: found.uids.at(-1)!, uidValidity: found.uidValidity });
        if (!source) throw notFound('draft not found');
        result = found.draft.sealed
          ? await this.sendSealed(inbox, actor, id, source, schedule)
          : await this.sendRaw(inbox, actor, id, source, found.draft.to, schedule);
      } finally {
        release?.();
      }
      if (isScheduled(result)) {
        await this.folder.remove(inbox, found);
        await this.record(inbox, actor, 'draft.removed', id, { draftId: id, sent: true });
      } else await this.removeOnceFiled(inbox, actor, id, found);
      return result;
    });
  }

  private async sendSealed(inbox: Inbox, actor: string, id: string, source: Buffer, schedule: Schedule): Promise<SendResult> {
    const head = splitHeader(source).head;
    const epoch = epochOf(head);
    const from = fromAddress(head);
    const to = recipientsOf(head);
    if (!Number.isSafeInteger(epoch) || !from) throw unprocessable('the sealed draft lacks its epoch or From address');
    const { wrappedDek, ciphertext } = await sealedParts(source);
    // The fingerprint /send makes of the same content: the two paths share the draft id.
    const fingerprint = draftFingerprint([
      String(epoch),
      { base64: wrappedDek },
      { base64: ciphertext },
      from,
      ...[...new Set(to.map((a) => a.toLowerCase()))].sort(),
    ]);
    const prior = await this.send.priorAnswer(inbox.id, id, fingerprint);
    if (prior) return prior;
    await this.send.admit(inbox, { from, to });
    const raw = await this.opener.open(inbox.id, { draftId: id, epoch, wrappedDek, ciphertext });
    const sealed = schedule ? { sealed: { draftId: id, epoch, wrappedDek, ciphertext } } : {};
    return this.send.send(inbox, actor, { from, to, raw, draft: { id, fingerprint }, ...(schedule ? { schedule } : {}), ...sealed });
  }

  /** `to`: the draft's To, Cc and Bcc addresses, as the mail server read them (its envelope). */
  private async sendRaw(inbox: Inbox, actor: string, id: string, source: Buffer, to: string[], schedule: Schedule): Promise<SendResult> {
    const raw = this.outgoing(source);
    const { head } = splitHeader(raw);
    const from = fromAddress(head);
    if (!from) throw unprocessable('the draft needs one From header with one address before it can be sent');
    const fingerprint = draftFingerprint(['raw', createHash('sha256').update(raw).digest('hex'), from, ...[...to].sort()]);
    const prior = await this.send.priorAnswer(inbox.id, id, fingerprint);
    if (prior) return prior;
    return this.send.send(inbox, actor, { from, to, raw, draft: { id, fingerprint }, ...(schedule ? { schedule } : {}) });
  }

  /** The draft as it is sent and shown: without the fields Postern keeps on it. */
  private outgoing(source: Buffer): Buffer {
    const { head, body } = splitHeader(source);
    const clean = withoutOwnFields(head);
    return clean === head ? source : Buffer.concat([clean, body]);
  }

  /**
   * A draft whose Sent copy is filed leaves Drafts (a mail app never sees it in neither). A copy
   * slower than FILED_WAIT_MS leaves the draft in place: sending it again answers as the first
   * time and removes it then.
   */
  private async removeOnceFiled(inbox: Inbox, actor: string, id: string, found: Found): Promise<void> {
    const deadline = Date.now() + FILED_WAIT_MS;
    for (;;) {
      const entry = await this.outbox.byDraft(inbox.id, id);
      if (entry?.state === 'filed') break;
      if (Date.now() > deadline) {
        this.log.warn({ draftId: id, inbox: inbox.id }, 'the sent draft stays in Drafts: its Sent copy is not filed yet');
        return;
      }
      await sleep(100);
    }
    await this.folder.remove(inbox, found);
    await this.record(inbox, actor, 'draft.removed', id, { draftId: id, sent: true });
  }

  private async save(inbox: Inbox, actor: string, id: string, content: DraftContent, replacing: Found | null): Promise<Draft> {
    const message = 'raw' in content ? this.rawDraft(inbox, actor, id, content.raw) : this.sealedDraft(inbox, actor, id, content.sealed);
    await this.folder.save(inbox, message, replacing);
    const saved = (await this.byId(inbox)).get(id);
    if (!saved) throw unavailable('the draft was stored but is not listed yet; try again');
    await this.record(inbox, actor, 'draft.saved', id, {
      draftId: id,
      created: replacing === null,
      sealed: saved.draft.sealed,
      author: actor,
    });
    return saved.draft;
  }

  private rawDraft(inbox: Inbox, actor: string, id: string, raw: Buffer): Buffer {
    if (inbox.mode === 'zero-access') {
      throw unprocessable("a zero-access inbox's drafts are sealed by the client: send epoch, wrappedDek and ciphertext as for /send");
    }
    if (raw.length > MAX_MESSAGE_BYTES) throw unprocessable(`the message is over the ${MAX_MESSAGE_BYTES} byte limit`);
    const { head, body } = splitHeader(raw);
    const from = fromAddress(head);
    if (from === null) throw invalid('the draft needs one From header with one address');
    this.mayWriteAs(inbox, from);
    const nl = lineEnding(head);
    const ours = Buffer.from(`${ID_FIELD}: ${id}${nl}${AUTHOR_FIELD}: ${actor}${nl}`, 'utf8');
    return Buffer.concat([ours, withoutOwnFields(head), body]);
  }

  private sealedDraft(inbox: Inbox, actor: string, id: string, s: Extract<DraftContent, { sealed: unknown }>['sealed']): Buffer {
    this.mayWriteAs(inbox, s.from);
    const to = [...new Set(s.to.map((a) => a.toLowerCase()))];
    if (to.length < 1 || to.length > MAX_RECIPIENTS) throw unprocessable(`a message goes to 1 to ${MAX_RECIPIENTS} recipients`);
    if (s.ciphertext.length > MAX_MESSAGE_BYTES + 64 * 1024) throw unprocessable(`the message is over the ${MAX_MESSAGE_BYTES} byte limit`);
    const armored = openpgp.armor(openpgp.enums.armor.message, Buffer.concat([s.wrappedDek, s.ciphertext]));
    const boundary = `postern-${randomId(12).toString('hex')}`;
    const head = [
      `From: <${s.from.toLowerCase()}>`,
      `Date: ${new Date().toUTCString().replace(/GMT$/, '+0000')}`,
      `Message-ID: <${randomId(16).toString('hex')}@${s.from.split('@')[1]!.toLowerCase()}>`,
      `${ID_FIELD}: ${id}`,
      `${AUTHOR_FIELD}: ${actor}`,
      `${SEALED_FIELD}: epoch=${s.epoch}`,
      `${TO_FIELD}: ${to.join(`,${CRLF} `)}`,
      'MIME-Version: 1.0',
      `Content-Type: multipart/encrypted; protocol="application/pgp-encrypted";${CRLF} boundary="${boundary}"`,
    ];
    const text =
      head.join(CRLF) +
      CRLF +
      CRLF +
      `This is an OpenPGP/MIME encrypted draft (RFC 3156), sealed by its writer.${CRLF}` +
      `--${boundary}${CRLF}Content-Type: application/pgp-encrypted${CRLF}${CRLF}Version: 1${CRLF}${CRLF}` +
      `--${boundary}${CRLF}Content-Type: application/octet-stream; name="encrypted.asc"${CRLF}` +
      `Content-Disposition: inline; filename="encrypted.asc"${CRLF}${CRLF}` +
      armored.replace(/\r?\n/g, CRLF).replace(/\r\n$/, '') +
      `${CRLF}--${boundary}--${CRLF}`;
    return Buffer.from(text, 'utf8');
  }

  private mayWriteAs(inbox: Inbox, from: string): void {
    if (!inbox.addresses.some((a) => a.toLowerCase() === from.toLowerCase())) throw forbidden(`this inbox cannot send as ${from}`);
  }

  /** The drafts by id, each with every stored version of it. */
  private async byId(inbox: Inbox): Promise<Map<string, Found>> {
    const out = new Map<string, Found>();
    for (const d of (await this.folder.list(inbox)).sort((a, b) => a.uid - b.uid)) {
      const view = viewOf(d);
      const prior = out.get(view.id);
      out.set(view.id, { draft: view, uids: [...(prior?.uids ?? []), d.uid], uidValidity: d.uidValidity });
    }
    return out;
  }

  private async find(inbox: Inbox, id: string): Promise<Found> {
    if (!DRAFT_ID.test(id)) throw notFound('draft not found');
    const found = (await this.byId(inbox)).get(id);
    if (!found) throw notFound('draft not found');
    return found;
  }

  private async record(inbox: Inbox, actor: string, type: 'draft.saved' | 'draft.removed', id: string, data: EventData): Promise<void> {
    try {
      await this.events.record({ type, projectId: inbox.projectId, inboxId: inbox.id, actor, subject: id, data });
    } catch (err) {
      // The draft is saved (or gone); a lost event must not turn that into an error.
      this.log.warn({ err, draftId: id }, 'could not record the draft event');
    }
  }

  private async exclusive<T>(inboxId: string, id: string, work: () => Promise<T>): Promise<T> {
    const key = `${inboxId}/${id}`;
    const before = this.tails.get(key) ?? Promise.resolve();
    const run = before.then(work, work);
    const tail = run.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    try {
      return await run;
    } finally {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}
