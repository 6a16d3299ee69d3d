// A small RFC 5322 / MIME writer for what the app sends: text with optional attachments, a
// forwarded message attached whole. Everything it writes is 7-bit clean except a forwarded
// message's own bytes: non-ASCII header text becomes RFC 2047 encoded words, UTF-8 bodies are
// quoted-printable, attachments base64, so no relay on the way needs to convert anything.
import { concatBytes, toBase64 } from '../bytes.ts';

export interface Mailbox {
  name?: string;
  address: string;
}

export interface OutgoingAttachment {
  filename: string;
  contentType: string;
  data: Uint8Array;
}

export interface Outgoing {
  from: Mailbox;
  to: Mailbox[];
  cc: Mailbox[];
  bcc: Mailbox[];
  subject: string;
  text: string;
  attachments: OutgoingAttachment[];
  /** A message forwarded whole, as message/rfc822. */
  forwarded?: { bytes: Uint8Array; filename: string };
  messageId: string;
  date: Date;
  inReplyTo?: string;
  references?: string[];
}

const enc = new TextEncoder();
const CRLF = '\r\n';
const ASCII_PRINTABLE = /^[\x20-\x7e]*$/;

const hex = (n: number) => crypto.getRandomValues(new Uint8Array(n)).reduce((s, b) => s + b.toString(16).padStart(2, '0'), '');

/** A fresh Message-ID on the sender's domain (RFC 5322 3.6.4: unique, the right side a domain). */
export function newMessageId(from: string): string {
  const domain = from.slice(from.lastIndexOf('@') + 1) || 'postern.invalid';
  return `<${hex(16)}@${domain}>`;
}

/** RFC 5322 date-time in the browser's time zone, e.g. `Sun, 22 Nov 2026 21:49:29 +0100`. */
export function rfc5322Date(d: Date): string {
  const days = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  const pad = (n: number) => String(n).padStart(2, '0');
  const offset = -d.getTimezoneOffset();
  const sign = offset >= 0 ? '+' : '-';
  const abs = Math.abs(offset);
  return `${days[d.getDay()]}, ${pad(d.getDate())} ${months[d.getMonth()]} ${d.getFullYear()} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${sign}${pad(Math.floor(abs / 60))}${pad(abs % 60)}`;
}

/**
 * RFC 2047 encoded words (UTF-8, base64) for text that is not printable ASCII. Each word stays
 * within 75 characters and never splits a character: a word is decoded on its own (6.3).
 */
export function encodeWords(text: string): string[] {
  const words: string[] = [];
  let chunk = '';
  // 42 bytes are 56 base64 characters, a 68-character word: "Subject: " and one word stay within 78.
  for (const ch of text) {
    if (enc.encode(chunk + ch).length > 42) {
      words.push(chunk);
      chunk = '';
    }
    chunk += ch;
  }
  if (chunk) words.push(chunk);
  return words.map((w) => `=?UTF-8?B?${toBase64(enc.encode(w))}?=`);
}

/** Unstructured header text (Subject): as is when printable ASCII, else encoded words. */
function unstructured(text: string): string[] {
  const clean = text.replace(/[\r\n]+/g, ' ');
  return ASCII_PRINTABLE.test(clean) ? clean.split(' ') : encodeWords(clean);
}

/** A display name: an atom list as is, a quoted string when it has specials, encoded words when not ASCII. */
function displayName(name: string): string[] {
  const clean = name.replace(/[\r\n]+/g, ' ').trim();
  if (!ASCII_PRINTABLE.test(clean)) return encodeWords(clean);
  if (/^[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~ ]+$/.test(clean)) return [clean];
  return [`"${clean.replace(/(["\\])/g, '\\$1')}"`];
}

function mailboxTokens(m: Mailbox): string[] {
  return m.name ? [...displayName(m.name), `<${m.address}>`] : [m.address];
}

/**
 * One header field, folded at the spaces between tokens so no line passes 78 characters where a
 * token allows it (RFC 5322 2.1.1); tokens themselves are never longer than 998.
 */
function field(name: string, tokens: string[]): string {
  let line = `${name}:`;
  const lines: string[] = [];
  // Unfolding removes only the CRLF, so the space before each token is kept (runs of spaces too).
  for (const token of tokens) {
    if (line.length + 1 + token.length > 78 && line.length > name.length + 1) {
      lines.push(line);
      line = ` ${token}`;
    } else {
      line += ` ${token}`;
    }
  }
  lines.push(line);
  return lines.join(CRLF) + CRLF;
}

function addressField(name: string, list: Mailbox[]): string {
  const tokens: string[] = [];
  list.forEach((m, i) => {
    const t = mailboxTokens(m);
    if (i < list.length - 1) t[t.length - 1] += ',';
    tokens.push(...t);
  });
  return field(name, tokens);
}

/** A MIME parameter: a quoted string when ASCII, RFC 2231 `name*=utf-8''…` otherwise. */
function param(name: string, value: string): string {
  const clean = value.replace(/[\r\n]+/g, ' ');
  if (ASCII_PRINTABLE.test(clean)) return `${name}="${clean.replace(/(["\\])/g, '\\$1')}"`;
  const pct = Array.from(enc.encode(clean), (b) =>
    /[A-Za-z0-9!#$&+\-.^_`|~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`,
  ).join('');
  return `${name}*=utf-8''${pct}`;
}

/** Quoted-printable (RFC 2045 6.7) of UTF-8 text, with CRLF line ends and soft breaks at 76. */
export function quotedPrintable(text: string): string {
  const out: string[] = [];
  for (const line of text.replace(/\r\n?/g, '\n').split('\n')) {
    const bytes = enc.encode(line);
    let encoded = '';
    let width = 0;
    bytes.forEach((b, i) => {
      const last = i === bytes.length - 1;
      // Trailing white space is encoded: relays may strip it (rule 3).
      const literal = (b >= 33 && b <= 126 && b !== 61) || ((b === 32 || b === 9) && !last);
      const piece = literal ? String.fromCharCode(b) : `=${b.toString(16).toUpperCase().padStart(2, '0')}`;
      if (width + piece.length > (last ? 76 : 75)) {
        encoded += `=${CRLF}`;
        width = 0;
      }
      encoded += piece;
      width += piece.length;
    });
    out.push(encoded);
  }
  return out.join(CRLF);
}

function base64Lines(data: Uint8Array): string {
  return (toBase64(data).match(/.{1,76}/g) ?? []).join(CRLF);
}

function textPart(text: string): string {
  const normalized = text.replace(/\r\n?/g, '\n');
  const plain = /^[\x20-\x7e\t\n]*$/.test(normalized) && normalized.split('\n').every((l) => l.length <= 998 && !/[ \t]$/.test(l));
  return plain
    ? `Content-Type: text/plain; charset=us-ascii${CRLF}Content-Transfer-Encoding: 7bit${CRLF}${CRLF}${normalized.split('\n').join(CRLF)}`
    : `Content-Type: text/plain; charset=utf-8${CRLF}Content-Transfer-Encoding: quoted-printable${CRLF}${CRLF}${quotedPrintable(normalized)}`;
}

/** The RFC 5322 bytes of `m`. */
export function buildMessage(m: Outgoing): Uint8Array {
  let head = '';
  head += addressField('From', [m.from]);
  if (m.to.length) head += addressField('To', m.to);
  if (m.cc.length) head += addressField('Cc', m.cc);
  // Kept in the Sent copy; /send removes it from what is relayed (docs/sending.md).
  if (m.bcc.length) head += addressField('Bcc', m.bcc);
  head += field('Subject', unstructured(m.subject));
  head += field('Date', [rfc5322Date(m.date)]);
  head += field('Message-ID', [m.messageId]);
  if (m.inReplyTo) head += field('In-Reply-To', [m.inReplyTo]);
  if (m.references?.length) head += field('References', m.references);
  head += `MIME-Version: 1.0${CRLF}`;

  const parts: Array<string | Uint8Array> = [];
  if (m.attachments.length === 0 && !m.forwarded) {
    const body = textPart(m.text);
    parts.push(head, body, body.endsWith(CRLF) ? '' : CRLF);
  } else {
    // "=_" cannot occur in base64 or quoted-printable text, so no part can contain the boundary.
    const boundary = `=_postern_${hex(12)}`;
    parts.push(
      head,
      `Content-Type: multipart/mixed; boundary="${boundary}"${CRLF}${CRLF}This is a multi-part message in MIME format.${CRLF}`,
    );
    parts.push(`--${boundary}${CRLF}`, textPart(m.text), CRLF);
    if (m.forwarded) {
      const f = m.forwarded.bytes;
      // message/rfc822 allows only 7bit or 8bit (RFC 2046 5.2.1): the original goes as it is.
      const eightBit = f.some((b) => b > 127);
      parts.push(
        `--${boundary}${CRLF}Content-Type: message/rfc822${CRLF}Content-Disposition: attachment; ${param('filename', m.forwarded.filename)}${CRLF}Content-Transfer-Encoding: ${eightBit ? '8bit' : '7bit'}${CRLF}${CRLF}`,
        f,
        // The CRLF before a boundary belongs to the boundary (RFC 2046 5.1.1), so it is always added.
        CRLF,
      );
    }
    for (const a of m.attachments) {
      const type = /^[a-z0-9!#$&^_.+-]+\/[a-z0-9!#$&^_.+-]+$/i.test(a.contentType) ? a.contentType : 'application/octet-stream';
      parts.push(
        `--${boundary}${CRLF}Content-Type: ${type}; ${param('name', a.filename)}${CRLF}Content-Disposition: attachment; ${param('filename', a.filename)}${CRLF}Content-Transfer-Encoding: base64${CRLF}${CRLF}`,
        base64Lines(a.data),
        CRLF,
      );
    }
    parts.push(`--${boundary}--${CRLF}`);
  }
  return concatBytes(parts.map((p) => (typeof p === 'string' ? enc.encode(p) : p)));
}

/**
 * The addresses in a To/Cc/Bcc box: `a@example.org, Ann <ann@example.org>, "Doe, J" <j@x.org>`.
 * Throws with the entry that is not an address.
 */
export function parseAddressList(input: string): Mailbox[] {
  const entries: string[] = [];
  let current = '';
  let quoted = false;
  let angle = false;
  for (const ch of input) {
    if (ch === '"') quoted = !quoted;
    else if (ch === '<' && !quoted) angle = true;
    else if (ch === '>' && !quoted) angle = false;
    if ((ch === ',' || ch === ';') && !quoted && !angle) {
      entries.push(current);
      current = '';
    } else {
      current += ch;
    }
  }
  entries.push(current);
  const out: Mailbox[] = [];
  for (const raw of entries) {
    const entry = raw.trim();
    if (!entry) continue;
    const m = /^(.*?)\s*<([^<>\s]+)>$/.exec(entry);
    const address = (m ? m[2]! : entry).trim();
    const name = m
      ? m[1]!
          .trim()
          .replace(/^"(.*)"$/, '$1')
          .replace(/\\(.)/g, '$1')
      : '';
    if (!/^[^\s@<>(),;:"\\[\]]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$/.test(address)) throw new Error(`not an e-mail address: ${entry}`);
    out.push(name ? { name, address } : { address });
  }
  return out;
}
