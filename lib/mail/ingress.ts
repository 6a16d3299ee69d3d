// Delivery from outside: what the LMTP ingress (adapters/smtp/lmtp-ingress.ts) does with each
// message Postfix hands it. Each recipient is looked up in the directory: a zero-access inbox
// gets the message sealed to its current epoch key (lib/mail/sealing.ts), a compatible inbox gets
// it as it came, and an address Postern does not know passes through untouched. A recipient is
// resolved as Dovecot will resolve it (dovecotUser): a detail, another case or the bare IMAP user
// name of a zero-access inbox is that inbox's mail, and is sealed. Every copy goes
// on to the mail store (Dovecot's LMTP, behind LocalDelivery), and each recipient gets the
// store's own answer, so Postfix retries exactly the recipients that failed for now. A message
// accepted for an inbox is recorded as message.received.
//
// Nothing is lost: a recipient whose copy cannot be made now (no key yet, the store is down)
// gets a 4xx and Postfix keeps the message queued. Nothing is refused for its content: a
// message that cannot be parsed is sealed whole like any other.
import type { DirectoryStore } from '../directory/ports.ts';
import type { Inbox } from '../directory/types.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { WarnLog } from '../warn-log.ts';
import type { EpochKeys } from '../crypto/epoch-keys.ts';
import { clearHeaders, seal } from './sealing.ts';

export interface Envelope {
  /** MAIL FROM; empty for a bounce. */
  from: string;
  /** RCPT TO, in order. */
  to: string[];
}

/** One recipient's answer, as LMTP gives it: accepted, or refused with a reply code. */
export type DeliveryOutcome = { ok: true } | { ok: false; code: number; reply: string };

/** The mail store's delivery (Dovecot LMTP): one outcome per recipient, in the order given. */
export interface LocalDelivery {
  deliver(envelope: Envelope, message: Uint8Array): Promise<DeliveryOutcome[]>;
}

/**
 * Told of each message a zero-access inbox accepted, as it came: what is stored is sealed, so
 * anything that must read the plaintext (delivery reports, lib/send/bounces.ts) reads it here.
 */
export type SealedInboxHook = (inboxId: string, envelopeFrom: string, raw: Uint8Array) => Promise<void>;

/** What the ingress needs of the epoch keyring: an inbox's current epoch, to seal new mail to. */
export type InboxKeys = Pick<EpochKeys, 'current'>;

const temporary = (reply: string): DeliveryOutcome => ({ ok: false, code: 451, reply });

/** Dovecot's default `recipient_delimiter`, and Postern's (POSTERN_RECIPIENT_DELIMITER). */
export const DEFAULT_RECIPIENT_DELIMITER = '+';

/**
 * The Dovecot user a recipient is delivered to, as Dovecot 2.3's LMTP names it
 * (`smtp_address_detail_parse`, then `auth_username_format = %Lu`): the local part unquoted, cut
 * at the first of the delimiter characters (each one is a delimiter; none: no detail), glued to
 * the domain, lower-cased (ASCII only, as Dovecot and SQLite's NOCASE fold).
 */
export function dovecotUser(recipient: string, delimiters: string): string {
  const at = recipient.lastIndexOf('@');
  let local = at < 0 ? recipient : recipient.slice(0, at);
  const domain = at < 0 ? '' : recipient.slice(at + 1);
  // A quoted local part ("vault"@…) names the same mailbox as the bare one.
  if (local.length >= 2 && local.startsWith('"') && local.endsWith('"')) local = local.slice(1, -1).replace(/\\(.)/g, '$1');
  if (delimiters !== '') {
    const cut = [...local].findIndex((c) => delimiters.includes(c));
    if (cut >= 0) local = [...local].slice(0, cut).join('');
  }
  const user = domain === '' ? local : `${local}@${domain}`;
  return user.replace(/[A-Z]+/g, (c) => c.toLowerCase());
}

/** A copy of the message and the recipients it goes to. */
interface Copy {
  message: Uint8Array;
  rcpts: Array<{ index: number; to: string; inbox: Inbox | null; epoch?: number }>;
}

/** The Message-ID header's value, unfolded, if the message has one. */
function messageIdOf(raw: Uint8Array): string | undefined {
  const m = /^message-id:[ \t]*(.*(?:\r\n[ \t].*)*)/im.exec(clearHeaders(raw));
  const id = m?.[1]?.replace(/\r\n[ \t]+/g, ' ').trim();
  return id ? id.slice(0, 998) : undefined;
}

export interface IngressOptions {
  directory: DirectoryStore;
  keys: InboxKeys;
  local: LocalDelivery;
  events: EventLog;
  log: WarnLog;
  beforeSealed?: SealedInboxHook;
  /** Dovecot's `recipient_delimiter`: Postern must cut details where Dovecot does. */
  recipientDelimiter?: string;
}

export class Ingress {
  private readonly directory: DirectoryStore;
  private readonly keys: InboxKeys;
  private readonly local: LocalDelivery;
  private readonly events: EventLog;
  private readonly log: WarnLog;
  private readonly beforeSealed: SealedInboxHook;
  private readonly recipientDelimiter: string;

  constructor(o: IngressOptions) {
    this.directory = o.directory;
    this.keys = o.keys;
    this.local = o.local;
    this.events = o.events;
    this.log = o.log;
    this.beforeSealed = o.beforeSealed ?? (async () => undefined);
    this.recipientDelimiter = o.recipientDelimiter ?? DEFAULT_RECIPIENT_DELIMITER;
  }

  /**
   * The inbox a recipient's mail lands in: one of its addresses as given, or, as Dovecot will
   * resolve it (detail cut, case folded), one of its addresses or its IMAP user. Null: no inbox
   * of Postern's, Dovecot's to decide. Whatever form reaches a zero-access user is found here, so
   * nothing reaches it unsealed.
   */
  private async inboxFor(recipient: string): Promise<Inbox | null> {
    const listed = await this.directory.findInboxByAddress(recipient);
    if (listed) return listed;
    const user = dovecotUser(recipient, this.recipientDelimiter);
    return (await this.directory.findInboxByAddress(user)) ?? (await this.directory.getInboxByImapUser(user));
  }

  /** Delivers one message to its recipients; one outcome per envelope recipient, in order. */
  async receive(envelope: Envelope, raw: Uint8Array): Promise<DeliveryOutcome[]> {
    const outcomes: DeliveryOutcome[] = envelope.to.map(() => temporary('4.3.0 not delivered'));
    const plain: Copy = { message: raw, rcpts: [] };
    const sealed = new Map<string, Copy>();
    for (const [index, to] of envelope.to.entries()) {
      const inbox = await this.inboxFor(to);
      if (!inbox) {
        // Not Postern's: Dovecot decides about it, as if Postern were not there.
        plain.rcpts.push({ index, to, inbox: null });
      } else if (inbox.mode === 'compatible') {
        plain.rcpts.push({ index, to: inbox.imapUser, inbox });
      } else {
        let copy = sealed.get(inbox.id);
        if (!copy) {
          try {
            const key = await this.keys.current(inbox.id);
            copy = { message: await seal(raw, key), rcpts: [] };
            sealed.set(inbox.id, copy);
            copy.rcpts.push({ index, to: inbox.imapUser, inbox, epoch: key.epoch });
          } catch (err) {
            this.log.warn({ err, inboxId: inbox.id }, 'cannot seal for a zero-access inbox; Postfix will retry');
            outcomes[index] = temporary('4.3.0 cannot seal the message for this inbox now, try again later');
          }
          continue;
        }
        copy.rcpts.push({ index, to: inbox.imapUser, inbox, epoch: copy.rcpts[0]!.epoch! });
      }
    }
    const copies = [plain, ...sealed.values()].filter((c) => c.rcpts.length > 0);
    await Promise.all(copies.map((copy) => this.hand(envelope.from, copy, outcomes)));
    await this.record(envelope, raw, copies, outcomes);
    // Each zero-access inbox that took its (sealed) copy, once.
    const sealedFor = new Set(
      copies.flatMap((c) => c.rcpts.filter((r) => r.epoch !== undefined && outcomes[r.index]!.ok).map((r) => r.inbox!.id)),
    );
    await Promise.all(
      [...sealedFor].map((id) =>
        this.beforeSealed(id, envelope.from, raw).catch((err: unknown) =>
          this.log.warn({ err, inboxId: id }, "reading a sealed inbox's message failed"),
        ),
      ),
    );
    return outcomes;
  }

  private async hand(from: string, copy: Copy, outcomes: DeliveryOutcome[]): Promise<void> {
    let got: DeliveryOutcome[];
    try {
      got = await this.local.deliver({ from, to: copy.rcpts.map((r) => r.to) }, copy.message);
    } catch (err) {
      // The store is unreachable or broke off: nothing was delivered, Postfix tries again.
      this.log.warn({ err }, 'handing a message to the mail store failed; Postfix will retry');
      got = copy.rcpts.map(() => temporary('4.4.2 the mail store is not available now, try again later'));
    }
    copy.rcpts.forEach((r, i) => (outcomes[r.index] = got[i] ?? temporary('4.3.0 no answer from the mail store')));
  }

  /** message.received for each inbox that accepted its copy; a failure here never undoes a delivery. */
  private async record(envelope: Envelope, raw: Uint8Array, copies: Copy[], outcomes: DeliveryOutcome[]): Promise<void> {
    const messageId = messageIdOf(raw);
    const recording = copies.flatMap((copy) =>
      copy.rcpts
        .filter((r) => r.inbox && outcomes[r.index]!.ok)
        .map((r) => {
          const data: EventData = {
            recipient: envelope.to[r.index]!,
            from: envelope.from,
            size: raw.length,
            sealed: r.epoch !== undefined,
          };
          if (r.epoch !== undefined) data.epoch = r.epoch;
          if (messageId) data.messageId = messageId;
          return this.events
            .record({
              type: 'message.received',
              projectId: r.inbox!.projectId,
              inboxId: r.inbox!.id,
              actor: SYSTEM_ACTOR,
              ...(messageId && messageId.length <= 256 ? { subject: messageId } : {}),
              data,
            })
            .catch((err: unknown) => this.log.warn({ err, inboxId: r.inbox!.id }, 'recording message.received failed'));
        }),
    );
    await Promise.all(recording);
  }
}
