// What imapflow (pinned at 2.10.2) does not expose: Dovecot's X-GUID in FETCH and STATUS, LIST
// with RETURN (STATUS ...), NOTIFY, and MULTIAPPEND (RFC 3502). They go through imapflow's internal `exec`, the same
// function its own commands use (see node_modules/imapflow/dist/esm/commands/fetch.js); the
// internal shape is declared once here so nothing else reaches into the library.
//
// Rules of `exec`: the untagged handlers given with a command see that command's untagged
// responses first; handler errors are only logged by imapflow, so they are kept and rethrown
// here; the tagged result must be released with `next()` or the connection stalls. A handler
// must never issue another command (the reader is parked until it returns).
import type { ImapAttribute, ImapAttributeList, ImapFlow, ImapResponse, SearchObject } from 'imapflow';
import type { ImapCompileNode } from 'imapflow/lib/handler/types.js';
import { decodePath, encodePath, parseEnvelope } from 'imapflow/lib/tools.js';
import { normalizeImapFlags } from '../../lib/mail/flags.ts';
import { specialUseOf } from '../../lib/mail/labels.ts';
import type { SpecialUse } from '../../schemas/wire.ts';
import type { MessageRecord } from '../../lib/mail/types.ts';
import { isPgpMime } from '../../lib/mail/sealing.ts';
import { hasAttachmentHint } from '../../lib/mail/attachment-hint.ts';
import { parseMessageIds } from '../../lib/mail/threads.ts';
import { createHash } from 'node:crypto';
import { headerValues } from '../../lib/send/rfc5322.ts';

export type Untagged = (response: ImapResponse) => void | Promise<void>;

interface ImapFlowInternals {
  exec(
    command: string,
    attributes: ImapCompileNode[] | undefined,
    options?: { untagged?: Record<string, Untagged> },
  ): Promise<{ next(): void }>;
  untaggedHandlers: Record<string, Untagged | null | undefined>;
  run(command: 'CLOSE', options: { unselect: boolean }): Promise<unknown>;
}

const internals = (client: ImapFlow): ImapFlowInternals => client as unknown as ImapFlowInternals;

/** Runs one raw command; resolves when it completed, rejects with the first handler error. */
export async function rawCommand(
  client: ImapFlow,
  command: string,
  attributes: ImapCompileNode[],
  untagged: Record<string, Untagged> = {},
): Promise<void> {
  let failure: unknown = null;
  const guarded: Record<string, Untagged> = {};
  for (const [name, handler] of Object.entries(untagged)) {
    guarded[name] = async (response) => {
      if (failure) return;
      try {
        await handler(response);
      } catch (err) {
        failure = err;
      }
    };
  }
  const result = await internals(client).exec(command, attributes, { untagged: guarded });
  result.next();
  // What a handler threw, as it threw it.
  // eslint-disable-next-line @typescript-eslint/only-throw-error
  if (failure) throw failure;
}

/** Handles untagged responses that arrive outside any command (NOTIFY's STATUS and LIST). */
export function onUnsolicited(client: ImapFlow, name: string, handler: Untagged): void {
  internals(client).untaggedHandlers[name] = handler;
}

/**
 * Leaves the selected mailbox without expunging (UNSELECT, RFC 3691). Dovecot answers STATUS
 * and LIST-STATUS for the selected mailbox from the session's own view, which does not see other
 * sessions' changes until it syncs: a connection that keeps a mailbox selected would report it
 * unchanged (verified on 2.3.19). Syncs therefore start unselected.
 */
export async function unselect(client: ImapFlow): Promise<void> {
  if (client.mailbox) await internals(client).run('CLOSE', { unselect: true });
}

/**
 * Appends messages to a mailbox with the same flags in one command: MULTIAPPEND (RFC 3502) when
 * the server has it, so they are saved in one transaction, all or none (Dovecot then also makes
 * one push hint of them and saves a little CPU per message); otherwise one APPEND each, in
 * order, where a failure leaves the earlier ones appended. Resolves once all were taken.
 */
export async function appendAll(client: ImapFlow, path: string, messages: readonly Buffer[], flags: readonly string[]): Promise<void> {
  const mailbox = atom(encodePath(client, path));
  const flagList = flags.map(atom);
  // A message holding a NUL byte goes as a literal8 (RFC 3516), as imapflow's own append does.
  const binary = client.capabilities.has('BINARY');
  const literal = (m: Buffer): ImapCompileNode => ({ type: 'LITERAL', value: m, isLiteral8: binary && m.includes(0) });
  if (client.capabilities.has('MULTIAPPEND')) {
    await rawCommand(client, 'APPEND', [mailbox, ...messages.flatMap((m) => [flagList, literal(m)])]);
    return;
  }
  for (const m of messages) await rawCommand(client, 'APPEND', [mailbox, flagList, literal(m)]);
}

/**
 * The UIDs of the selected mailbox among `candidates` (searched by what the mailbox's own index
 * answers: UIDs, dates) whose header `name` has a value `matches` accepts. Not SEARCH HEADER:
 * with a full-text index Dovecot answers that from the index, and fts-xapian's answer is
 * inexact (it missed some Message-IDs and matched others loosely on 2.3.19); here the header
 * itself is fetched and compared.
 */
export async function uidsWithHeader(
  client: ImapFlow,
  candidates: SearchObject,
  name: string,
  matches: (value: string) => boolean,
): Promise<number[]> {
  const uids = await client.search(candidates, { uid: true });
  // Refused: "none" would be a guess, and callers act on "none" (append a copy).
  if (!uids) throw new Error('the mail server refused a SEARCH');
  const found: number[] = [];
  for (const set of uidSets(uids)) {
    for await (const msg of client.fetch(set, { uid: true, headers: [name] }, { uid: true })) {
      if (msg.headers && headerValues(msg.headers, name).some(matches)) found.push(msg.uid);
    }
  }
  return found;
}

export const atom = (value: string): ImapCompileNode => ({ type: 'ATOM', value });
export const str = (value: string): ImapCompileNode => ({ type: 'STRING', value });

function isList(a: ImapAttribute | undefined): a is ImapAttributeList {
  return Array.isArray(a);
}

/** The text of a token (atom, quoted string or literal); null for NIL or a list. */
export function text(a: ImapAttribute | undefined): string | null {
  if (!a || isList(a)) return null;
  if (typeof a.value === 'string') return a.value;
  if (Buffer.isBuffer(a.value)) return a.value.toString('utf8');
  if (typeof a.value === 'number') return String(a.value);
  return null;
}

function int(a: ImapAttribute | undefined): number | null {
  const t = isList(a) ? text(a[0]) : text(a);
  return t !== null && /^\d{1,19}$/.test(t) ? Number(t) : null;
}

/** Dovecot prints GUIDs as 32 hex digits (128 bits, dbox). Anything else (maildir) is hashed to 128 bits. */
export function guid128(raw: string): string {
  const lower = raw.toLowerCase();
  return /^[0-9a-f]{32}$/.test(lower) ? lower : createHash('sha256').update(raw).digest('hex').slice(0, 32);
}

// ---------------------------------------------------------------------------------------------
// LIST "" "*" RETURN (SPECIAL-USE STATUS (...X-GUID))

export interface ListedMailbox {
  path: string;
  guid: string;
  specialUse: SpecialUse | null;
  selectable: boolean;
  uidValidity: number;
  uidNext: number;
  highestModseq: number;
  messages: number;
}

const STATUS_ITEMS = ['MESSAGES', 'UIDNEXT', 'UIDVALIDITY', 'HIGHESTMODSEQ', 'X-GUID'];

export interface StatusValues {
  messages?: number;
  uidNext?: number;
  uidValidity?: number;
  highestModseq?: number;
  guid?: string;
}

export function parseStatus(client: ImapFlow, response: ImapResponse): { path: string; values: StatusValues } | null {
  const attrs = response.attributes ?? [];
  const name = text(attrs[0]);
  const list = attrs[1];
  if (name === null || !isList(list)) return null;
  const values: StatusValues = {};
  for (let i = 0; i + 1 < list.length; i += 2) {
    const key = text(list[i])?.toUpperCase();
    const v = list[i + 1];
    if (key === 'MESSAGES') values.messages = int(v) ?? 0;
    else if (key === 'UIDNEXT') values.uidNext = int(v) ?? 0;
    else if (key === 'UIDVALIDITY') values.uidValidity = int(v) ?? 0;
    else if (key === 'HIGHESTMODSEQ') values.highestModseq = int(v) ?? 0;
    else if (key === 'X-GUID') {
      const g = text(v);
      if (g) values.guid = guid128(g);
    }
  }
  return { path: decodePath(client, name), values };
}

export async function listStatus(client: ImapFlow): Promise<ListedMailbox[]> {
  const listed = new Map<string, { attributes: string[] }>();
  const status = new Map<string, StatusValues>();
  await rawCommand(client, 'LIST', [str(''), str('*'), atom('RETURN'), [atom('SPECIAL-USE'), atom('STATUS'), STATUS_ITEMS.map(atom)]], {
    LIST: (r) => {
      const attrs = r.attributes ?? [];
      const flags = isList(attrs[0]) ? attrs[0].map(text).filter((t): t is string => t !== null) : [];
      const name = text(attrs[2]);
      if (name !== null) listed.set(decodePath(client, name), { attributes: flags });
    },
    STATUS: (r) => {
      const parsed = parseStatus(client, r);
      if (parsed) status.set(parsed.path, parsed.values);
    },
  });
  const out: ListedMailbox[] = [];
  for (const [path, { attributes }] of listed) {
    const lower = attributes.map((a) => a.toLowerCase());
    const s = status.get(path);
    const selectable = !lower.includes('\\noselect') && !lower.includes('\\nonexistent') && s?.guid !== undefined;
    out.push({
      path,
      guid: s?.guid ?? '',
      specialUse: specialUseOf(attributes),
      selectable,
      uidValidity: s?.uidValidity ?? 0,
      uidNext: s?.uidNext ?? 0,
      highestModseq: s?.highestModseq ?? 0,
      messages: s?.messages ?? 0,
    });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// UID FETCH with X-GUID

export interface FetchedRow {
  uid: number;
  modseq: number;
  flags: string[] | null;
  /** Present when X-GUID and the metadata items were asked for. */
  message: MessageRecord | null;
}

/**
 * `BODY.PEEK[HEADER.FIELDS (CONTENT-TYPE REFERENCES)]`: whether a message is PGP/MIME is known at
 * index time (a zero-access inbox's resealer finds what to seal in the index, lib/mail/resealing.ts),
 * and the References its thread needs (ENVELOPE has only In-Reply-To; docs/threads.md). Dovecot
 * parses the header for ENVELOPE anyway, so this costs a few bytes a row.
 */
const CONTENT_TYPE_ITEM: ImapCompileNode = {
  type: 'ATOM',
  value: 'BODY.PEEK',
  section: [
    { type: 'ATOM', value: 'HEADER.FIELDS' },
    [
      { type: 'ATOM', value: 'CONTENT-TYPE' },
      { type: 'ATOM', value: 'REFERENCES' },
    ],
  ],
};

/** The Message-IDs of a References field in a header block (unfolded; the last field if several). */
function referencesOf(header: Buffer): string[] {
  const unfolded = header.toString('latin1').replace(/\r?\n[ \t]+/g, ' ');
  const found = [...unfolded.matchAll(/^references:(.*)$/gim)].at(-1);
  return found ? parseMessageIds(found[1]) : [];
}
export const FULL_ITEMS: ReadonlyArray<string | ImapCompileNode> = [
  'UID',
  'FLAGS',
  'MODSEQ',
  'X-GUID',
  'RFC822.SIZE',
  'INTERNALDATE',
  'ENVELOPE',
  CONTENT_TYPE_ITEM,
];
export const FLAG_ITEMS = ['UID', 'FLAGS', 'MODSEQ'];
/** What the threads backfill asks of mail indexed before the index kept References (docs/threads.md). */
export const REFERENCES_ITEMS: ReadonlyArray<string | ImapCompileNode> = ['UID', 'X-GUID', CONTENT_TYPE_ITEM];
/** FULL_ITEMS and RFC 8970 PREVIEW: Dovecot's own ~200 characters of the text (docs/threads.md, "Previews"). */
const WITH_PREVIEW: ReadonlyArray<string | ImapCompileNode> = [...FULL_ITEMS, 'PREVIEW'];

/**
 * What a fetch of new rows asks for: the preview only when previews are on, for a compatible
 * inbox (a zero-access inbox's text is not Postern's to keep), on a server that has PREVIEW.
 */
export function fullItems(client: ImapFlow, inbox: { mode?: string }, previews: boolean): ReadonlyArray<string | ImapCompileNode> {
  return previews && inbox.mode === 'compatible' && client.capabilities.has('PREVIEW') ? WITH_PREVIEW : FULL_ITEMS;
}

/** A preview as the index keeps it: whitespace folded, at most PREVIEW_CHARS characters; null when empty. */
export const PREVIEW_CHARS = 200;
function previewText(value: string): string | null {
  const folded = value.replace(/\s+/g, ' ').trim();
  return folded === '' ? null : [...folded].slice(0, PREVIEW_CHARS).join('');
}

type Address = { name?: string | undefined; address?: string | undefined };

function formatAddresses(list: Address[] | undefined): string | null {
  if (!list || list.length === 0) return null;
  const parts = list.map((a) => (a.name ? (a.address ? `${a.name} <${a.address}>` : a.name) : (a.address ?? ''))).filter((s) => s !== '');
  return parts.length > 0 ? parts.join(', ') : null;
}

function parseFetch(response: ImapResponse): FetchedRow | null {
  const list = response.attributes?.[1];
  if (!isList(list)) return null;
  let uid: number | null = null;
  let modseq = 0;
  let flags: string[] | null = null;
  let guid: string | null = null;
  let size = 0;
  let internalDate: number | null = null;
  let envelope: ImapAttributeList | null = null;
  let sealed: boolean | undefined;
  let hasAttachment: boolean | null | undefined;
  let references: string[] | undefined;
  let preview: string | null = null;
  for (let i = 0; i + 1 < list.length; i += 2) {
    const key = text(list[i])?.toUpperCase() ?? '';
    const v = list[i + 1];
    switch (key) {
      case 'UID':
        uid = int(v);
        break;
      case 'MODSEQ':
        modseq = int(v) ?? 0;
        break;
      case 'FLAGS':
        flags = isList(v) ? normalizeImapFlags(v.map(text).filter((t): t is string => t !== null)) : [];
        break;
      case 'X-GUID': {
        const g = text(v);
        guid = g ? guid128(g) : null;
        break;
      }
      case 'RFC822.SIZE':
        size = int(v) ?? 0;
        break;
      case 'INTERNALDATE': {
        const t = Date.parse(text(v) ?? '');
        internalDate = Number.isNaN(t) ? null : t;
        break;
      }
      case 'ENVELOPE':
        envelope = isList(v) ? v : null;
        break;
      // BODY[HEADER.FIELDS (CONTENT-TYPE REFERENCES)]: the only body section asked for.
      case 'BODY': {
        const header = v && !isList(v) && Buffer.isBuffer(v.value) ? v.value : Buffer.from(text(v) ?? '', 'latin1');
        sealed = isPgpMime(header.length > 0 ? header : Buffer.from('\r\n'));
        hasAttachment = hasAttachmentHint(header);
        references = referencesOf(header);
        break;
      }
      case 'PREVIEW': {
        const raw = v && !isList(v) && Buffer.isBuffer(v.value) ? v.value.toString('utf8') : (text(v) ?? '');
        preview = previewText(raw);
        break;
      }
    }
  }
  if (uid === null) return null;
  let message: MessageRecord | null = null;
  if (guid) {
    const env = envelope ? parseEnvelope(envelope) : {};
    const date = env.date instanceof Date ? env.date.toISOString() : (env.date ?? null);
    const from = formatAddresses(env.from);
    const replyTo = formatAddresses(env.replyTo);
    message = {
      guid,
      size,
      receivedAt: internalDate ?? 0,
      date: date || null,
      from,
      to: formatAddresses(env.to),
      cc: formatAddresses(env.cc),
      // IMAP fills an absent Reply-To with From (RFC 3501 7.4.2): only a different one is news.
      replyTo: replyTo !== from ? replyTo : null,
      subject: env.subject ?? null,
      messageId: env.messageId ?? null,
      inReplyTo: env.inReplyTo ?? null,
      fromAddress: env.from?.[0]?.address?.toLowerCase() || null,
      ...(sealed === undefined ? {} : { sealed }),
      ...(hasAttachment === undefined ? {} : { hasAttachment }),
      ...(references && references.length > 0 ? { references } : {}),
      // A PGP/MIME message's "preview" is its envelope's boilerplate, not its text.
      ...(preview !== null && sealed !== true ? { preview } : {}),
    };
  }
  return { uid, modseq, flags, message };
}

export interface FetchOptions {
  changedSince?: number;
  /** Expunged UIDs (QRESYNC VANISHED), EARLIER or not. */
  onVanished?: (ranges: Array<[number, number]>) => void | Promise<void>;
}

/**
 * UID FETCH of a range, one row at a time to `onRow` as the server sends them (bounded memory:
 * imapflow does not read on while a handler runs).
 */
export async function uidFetch(
  client: ImapFlow,
  range: string,
  items: ReadonlyArray<string | ImapCompileNode>,
  onRow: (row: FetchedRow) => void | Promise<void>,
  options: FetchOptions = {},
): Promise<void> {
  const attributes: ImapCompileNode[] = [{ type: 'SEQUENCE', value: range }, items.map((i) => (typeof i === 'string' ? atom(i) : i))];
  if (options.changedSince !== undefined) {
    attributes.push([atom('CHANGEDSINCE'), atom(String(options.changedSince)), ...(options.onVanished ? [atom('VANISHED')] : [])]);
  }
  const untagged: Record<string, Untagged> = {
    FETCH: async (r) => {
      const row = parseFetch(r);
      if (row) await onRow(row);
    },
  };
  if (options.onVanished) {
    const onVanished = options.onVanished;
    untagged.VANISHED = (r) => onVanished(parseVanished(r));
  }
  await rawCommand(client, 'UID FETCH', attributes, untagged);
}

/** `* VANISHED (EARLIER) 1:3,7` → [[1, 3], [7, 7]] */
export function parseVanished(response: ImapResponse): Array<[number, number]> {
  const attrs = response.attributes ?? [];
  return parseSet(text(attrs.find((a) => !isList(a)) ?? null) ?? '');
}

// ---------------------------------------------------------------------------------------------
// UID sets that fit on a command line

/**
 * Dovecot refuses a command line longer than imap_max_line_length (64 KiB by default) and then
 * drops the connection, so a UID list is sent as ranges, in commands of at most this many
 * characters of UID set each.
 */
export const MAX_SET_CHARS = 16_000;

/** `[1, 2, 3, 7]` → `['1:3,7']`: ascending UIDs as compact sets, each at most `maxChars` long. */
export function uidSets(uids: Iterable<number>, maxChars = MAX_SET_CHARS): string[] {
  const sorted = [...new Set(uids)].sort((a, b) => a - b);
  const sets: string[] = [];
  let current = '';
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    const part = i === j ? String(sorted[i]) : `${sorted[i]}:${sorted[j]}`;
    if (current !== '' && current.length + 1 + part.length > maxChars) {
      sets.push(current);
      current = '';
    }
    current = current === '' ? part : `${current},${part}`;
    i = j + 1;
  }
  if (current !== '') sets.push(current);
  return sets;
}

/**
 * Every UID of the selected mailbox, as ranges: `UID SEARCH RETURN (ALL) ALL` (ESEARCH, RFC
 * 4731), so 50,000 UIDs arrive as a few ranges rather than one line of 50,000 numbers.
 */
export async function uidSearchAll(client: ImapFlow): Promise<Array<[number, number]>> {
  let ranges: Array<[number, number]> = [];
  await rawCommand(client, 'UID SEARCH', [atom('RETURN'), [atom('ALL')], atom('ALL')], {
    ESEARCH: (r) => {
      const attrs = r.attributes ?? [];
      for (let i = 0; i + 1 < attrs.length; i++) {
        if (!isList(attrs[i]) && text(attrs[i])?.toUpperCase() === 'ALL') ranges = parseSet(text(attrs[i + 1]) ?? '');
      }
    },
  });
  return ranges;
}

/** `1:3,7` → [[1, 3], [7, 7]] */
function parseSet(set: string): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (const part of set.split(',')) {
    const m = /^(\d+)(?::(\d+))?$/.exec(part);
    if (!m) continue;
    const a = Number(m[1]);
    const b = m[2] ? Number(m[2]) : a;
    out.push([Math.min(a, b), Math.max(a, b)]);
  }
  return out;
}
