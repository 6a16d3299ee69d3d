// JSON compose (docs/sending.md, "Compose from JSON"): a structured message turned into MIME by
// nodemailer's composer, with a Message-ID and Date of its own, the identity's display name and
// signature, and for a reply or forward the original's threading, recipients and content. What it
// makes is sent like any POST /messages (lib/send/service.ts): the same checks, outbox, Sent copy
// and events.
import type { Readable } from 'node:stream';
import { simpleParser, type AddressObject, type EmailAddress, type ParsedMail } from 'mailparser';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import type Mail from 'nodemailer/lib/mailer/index.js';
import type { Access, Principal } from '../auth/access.ts';
import type { MailOpening } from '../crypto/mail-opening.ts';
import type { Inbox } from '../directory/types.ts';
import type { EventLog } from '../events/log.ts';
import { CONTENT_RULE, recordContentRead, requireCompatible } from '../mail/content-access.ts';
import { invalid, unprocessable } from '../errors.ts';
import { randomId } from '../ids.ts';
import { checkAttachment, safeFilename, type AttachmentInput } from './attachments.ts';
import type { Identities } from './identities.ts';
import { MAX_MESSAGE_BYTES } from './service.ts';

export interface ComposeAddress {
  address: string;
  name?: string;
}

export type ComposeAction = 'reply' | 'reply-all' | 'forward';

export interface ComposeRequest {
  /** One of the inbox's addresses. */
  from: string;
  /** The From display name; the identity's when absent, none when empty. */
  fromName?: string;
  to?: Array<string | ComposeAddress>;
  cc?: Array<string | ComposeAddress>;
  bcc?: Array<string | ComposeAddress>;
  replyTo?: Array<string | ComposeAddress>;
  subject?: string;
  text?: string;
  html?: string;
  attachments?: AttachmentInput[];
  /** A reply to or forward of a message of this inbox (compatible inboxes only). */
  reference?: { message: string; action: ComposeAction; forward?: 'inline' | 'attachment'; quote?: boolean };
  /** false: the identity's signature is left off. */
  signature?: boolean;
  /** Threading known without reading the original (MCP send_message's inReplyTo); a reference's wins. */
  thread?: { inReplyTo: string; references: string[] };
}

/** The message a reference names, as its inbox stores it, read and parsed. */
export interface Original {
  raw: Buffer;
  parsed: ParsedMail;
}

export interface Composed {
  raw: Buffer;
  from: string;
  /** Every recipient (To, Cc and Bcc), each once. */
  envelope: string[];
  messageId: string;
  date: Date;
}

/** References kept from the original's chain (RFC 5322 3.6.4 leaves trimming to the writer). */
const MAX_REFERENCES = 20;

/**
 * The message a reference names. Reading it is a read of content: the caller needs content:read in
 * the inbox, the inbox must be compatible (zero-access mail is sealed to its users: the web app
 * composes there), and the read is audited as GET …/source is.
 */
export async function referencedOriginal(
  access: Access,
  sealed: MailOpening,
  events: EventLog,
  p: Principal,
  inbox: Inbox,
  msgId: string,
): Promise<Original> {
  access.authorize(p, CONTENT_RULE);
  await access.inboxAccess(p, inbox.id, 'content:read');
  requireCompatible(inbox);
  const { body } = await sealed.plaintext(inbox, msgId);
  try {
    await recordContentRead(events, inbox, p.actor, msgId, { part: 'source' });
  } catch (err) {
    body.destroy();
    throw err;
  }
  return readOriginal(body);
}

/** Reads and parses the original (up to the 25 MB a message may be: more could not be forwarded either). */
export async function readOriginal(source: Readable): Promise<Original> {
  const parts: Buffer[] = [];
  let size = 0;
  for await (const chunk of source as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_MESSAGE_BYTES) {
      source.destroy();
      throw unprocessable(`the original message is over the ${MAX_MESSAGE_BYTES} byte limit`);
    }
    parts.push(chunk);
  }
  const raw = Buffer.concat(parts);
  try {
    // cid: links kept: an inline forward carries the images they name.
    return { raw, parsed: await simpleParser(raw, { keepCidLinks: true }) };
  } catch (err) {
    throw unprocessable(`the original message could not be parsed (${(err as Error).message})`);
  }
}

const addressesOf = (value: AddressObject | AddressObject[] | undefined): EmailAddress[] =>
  (Array.isArray(value) ? value : value ? [value] : []).flatMap((o) => flatten(o.value));
const flatten = (list: EmailAddress[]): EmailAddress[] => list.flatMap((a) => (a.group ? flatten(a.group) : a.address ? [a] : []));

const asAddress = (a: string | ComposeAddress): ComposeAddress => (typeof a === 'string' ? { address: a } : a);
const fromParsed = (a: EmailAddress): ComposeAddress => (a.name ? { address: a.address!, name: a.name } : { address: a.address! });

/** Each address once (the first spelling), none of `except`. */
function distinct(list: ComposeAddress[], except: Set<string>): ComposeAddress[] {
  const out: ComposeAddress[] = [];
  for (const a of list) {
    const key = a.address.toLowerCase();
    if (except.has(key)) continue;
    except.add(key);
    out.push(a);
  }
  return out;
}

/** `Re:` / `Fwd:` once: a subject that already starts with one (or a common translation) keeps it. */
export function prefixedSubject(subject: string, action: ComposeAction): string {
  const s = subject.trim();
  if (action === 'forward') return /^(fwd?|fw|tr|wg|rv|i)\s*:/i.test(s) ? s : `Fwd: ${s}`.trim();
  return /^(re|aw|sv|antw|vs|odp|r)\s*(\[\d+\])?\s*:/i.test(s) ? s : `Re: ${s}`.trim();
}

const escapeHtml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const textAsHtml = (s: string) => escapeHtml(s).replace(/\r?\n/g, '<br>\n');
const quoteText = (s: string) =>
  s
    .replace(/\r\n/g, '\n')
    .replace(/\n+$/, '')
    .split('\n')
    .map((l) => (l.startsWith('>') ? `>${l}` : `> ${l}`))
    .join('\n');

function person(list: AddressObject | AddressObject[] | undefined): string {
  return addressesOf(list)
    .map((a) => (a.name ? `${a.name} <${a.address}>` : a.address!))
    .join(', ');
}

export class Composer {
  constructor(private readonly identities: Identities) {}

  /** The message's MIME and envelope; 422 when it has no body or no recipient. */
  async compose(inbox: Inbox, req: ComposeRequest, original: Original | null): Promise<Composed> {
    const from = req.from.toLowerCase();
    const identity = await this.identities.of(inbox, from);
    const own = new Set(inbox.addresses.map((a) => a.toLowerCase()));
    const ref = req.reference;
    const o = original?.parsed;

    let to = (req.to ?? []).map(asAddress);
    let cc = (req.cc ?? []).map(asAddress);
    if (ref && o && ref.action !== 'forward' && to.length === 0 && cc.length === 0) ({ to, cc } = replyRecipients(o, ref.action, own));
    const seen = new Set<string>();
    to = distinct(to, seen);
    cc = distinct(cc, seen);
    const bcc = distinct((req.bcc ?? []).map(asAddress), seen);
    if (to.length + cc.length + bcc.length === 0)
      throw unprocessable(
        ref && ref.action !== 'forward'
          ? 'the original has nobody to reply to but this inbox: give to'
          : 'give at least one recipient (to, cc or bcc)',
      );

    if (req.text === undefined && req.html === undefined && !ref) throw invalid('give text, html or both');
    const subject = req.subject ?? (o && ref ? prefixedSubject(o.subject ?? '', ref.action) : '');

    // The signature goes under what the caller wrote, above any quoted original.
    const sign = req.signature !== false && identity !== null;
    const sigText = sign && identity.signatureText ? identity.signatureText : null;
    const sigHtml = sign ? (identity.signatureHtml ?? (identity.signatureText ? textAsHtml(identity.signatureText) : null)) : null;
    const wantsHtml = req.html !== undefined || (o !== undefined && req.text === undefined && typeof o.html === 'string');
    let text = req.text ?? (req.html === undefined ? '' : undefined);
    let html = wantsHtml ? (req.html ?? (req.text !== undefined ? textAsHtml(req.text) : '')) : undefined;
    if (text !== undefined && sigText) text = `${text.replace(/\s+$/, '')}\n\n${/^--\s*\n/.test(sigText) ? '' : '-- \n'}${sigText}\n`;
    if (html !== undefined && sigHtml) html = `${html}\n<div class="postern-signature">-- <br>\n${sigHtml}</div>`;

    const attachments: Mail.Attachment[] = (req.attachments ?? []).map((a, i) => {
      const c = checkAttachment(a, i);
      return {
        filename: c.filename,
        contentType: c.contentType,
        content: c.content,
        ...(c.contentId ? { cid: c.contentId, contentDisposition: 'inline' as const } : {}),
      };
    });

    let threading: { inReplyTo: string; references: string[] } | null = req.thread ?? null;
    if (o && original && ref) {
      if (o.messageId) {
        const refs = typeof o.references === 'string' ? o.references.split(/\s+/) : (o.references ?? []);
        const chain = [...refs.filter((r) => /^<[^<>\s]+>$/.test(r) && r !== o.messageId), o.messageId];
        threading = { inReplyTo: o.messageId, references: chain.slice(-MAX_REFERENCES) };
      }
      const when = o.date ? o.date.toUTCString() : 'an unknown date';
      if (ref.action === 'forward') {
        if (ref.forward === 'attachment') {
          attachments.push({
            filename: `${safeFilename(o.subject, 'message')}.eml`,
            contentType: 'message/rfc822',
            // nodemailer would make a message/rfc822 part inline; this one is the attachment.
            contentDisposition: 'attachment',
            content: original.raw,
          });
        } else {
          const head = [
            '---------- Forwarded message ---------',
            `From: ${person(o.from)}`,
            `Date: ${when}`,
            `Subject: ${o.subject ?? ''}`,
            `To: ${person(o.to)}`,
            ...(o.cc ? [`Cc: ${person(o.cc)}`] : []),
          ];
          if (text !== undefined) text = `${text.trimEnd()}\n\n${head.join('\n')}\n\n${o.text ?? ''}`;
          if (html !== undefined)
            html = `${html}\n<div class="postern-forward"><p>${head.map(escapeHtml).join('<br>\n')}</p>\n${typeof o.html === 'string' ? o.html : textAsHtml(o.text ?? '')}</div>`;
          o.attachments.forEach((a, i) => {
            attachments.push({
              filename: safeFilename(a.filename, `attachment-${i + 1}`),
              contentType: a.contentType,
              content: a.content,
              ...(a.cid && a.contentDisposition === 'inline' ? { cid: a.cid, contentDisposition: 'inline' as const } : {}),
            });
          });
        }
      } else if (ref.quote !== false) {
        const attribution = `On ${when}, ${person(o.from) || 'someone'} wrote:`;
        if (text !== undefined) text = `${text.trimEnd()}\n\n${attribution}\n${quoteText(o.text ?? '')}\n`;
        if (html !== undefined)
          html = `${html}\n<div class="postern-quote"><p>${escapeHtml(attribution)}</p>\n<blockquote type="cite" style="margin:0 0 0 .8ex;border-left:1px solid #ccc;padding-left:1ex">${typeof o.html === 'string' ? o.html : textAsHtml(o.text ?? '')}</blockquote></div>`;
      }
    }

    const name = req.fromName ?? identity?.displayName ?? '';
    const date = new Date();
    const messageId = `<${randomId(16).toString('hex')}@${from.split('@')[1]}>`;
    const options: Mail.Options = {
      from: name ? { name, address: from } : from,
      ...(to.length ? { to: to.map(mail) } : {}),
      ...(cc.length ? { cc: cc.map(mail) } : {}),
      ...(bcc.length ? { bcc: bcc.map(mail) } : {}),
      ...(req.replyTo?.length ? { replyTo: req.replyTo.map(asAddress).map(mail) } : {}),
      subject,
      ...(text !== undefined ? { text } : {}),
      ...(html !== undefined ? { html } : {}),
      attachments,
      messageId,
      date,
      // Base64 rather than quoted-printable for the text and HTML: nodemailer's quoted-printable
      // encoder costs about twice the CPU of the rest of composing (bench/RESULTS.md, "JSON compose").
      textEncoding: 'base64',
      ...(threading ? { inReplyTo: threading.inReplyTo, references: threading.references } : {}),
    };
    const node = new MailComposer(options).compile();
    // The Sent copy keeps Bcc; the service takes it off what is relayed.
    node.keepBcc = true;
    const raw = await node.build();
    return { raw, from, envelope: [...to, ...cc, ...bcc].map((a) => a.address), messageId, date };
  }
}

const mail = (a: ComposeAddress): Mail.Address | string => (a.name ? { name: a.name, address: a.address } : a.address);

/**
 * Who a reply goes to: the original's Reply-To, else its From; reply-all adds its To (and keeps its
 * Cc), never the inbox's own addresses. A reply to the inbox's own message (from Sent) goes to
 * that message's recipients.
 */
function replyRecipients(o: ParsedMail, action: ComposeAction, own: Set<string>): { to: ComposeAddress[]; cc: ComposeAddress[] } {
  const notOwn = (list: EmailAddress[]) => list.filter((a) => !own.has(a.address!.toLowerCase())).map(fromParsed);
  const author = addressesOf(o.replyTo).length > 0 ? addressesOf(o.replyTo) : addressesOf(o.from);
  let to = notOwn(author);
  const ownMessage = to.length === 0;
  if (ownMessage || action === 'reply-all') to = [...to, ...notOwn(addressesOf(o.to))];
  const cc = action === 'reply-all' ? notOwn(addressesOf(o.cc)) : [];
  return { to, cc };
}
