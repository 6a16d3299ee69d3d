// A message's decrypted content (docs/api.md, "Decrypted message", "Attachment"): decoded headers, text, HTML and its
// attachments, parsed by mailparser as a stream, so attachments are counted (or streamed to
// the caller) without ever being held whole. The same parse numbers the attachments for
// `/content` and `/attachments/{n}`, so an index always means the same part.
import type { Readable } from 'node:stream';
import { MailParser, type AddressObject, type AttachmentStream, type HeaderValue, type MessageText } from 'mailparser';

export interface AttachmentInfo {
  index: number;
  contentType: string;
  size: number;
  inline: boolean;
  filename?: string;
  contentId?: string;
}

export interface ParsedContent {
  headers: Record<string, string>;
  text: string;
  html: string;
  attachments: AttachmentInfo[];
}

/** The message could not be parsed (a 422 where it is read through the API). */
export class UnparseableMessageError extends Error {}

/**
 * MIME parts a message may have: Dovecot's own limit (its message parser's
 * max_total_mime_parts), so every message it splits into parts is read here as it reads it.
 * mailparser's default of 1,000 failed a 1,000-part message, and a failure after an attachment
 * was handed out left that attachment's stream open for good.
 */
export const MAX_MIME_PARTS = 10_000;
/**
 * How long parsing may take before it has what was asked (all of /content, or the first bytes
 * of an attachment): far more than any message needs (25 MB of attachments parse in about a
 * second), so only a message that makes the parser stall meets it. Settable for tests.
 */
export const PARSE_LIMITS = { deadlineMs: 30_000 };

/** docs/api.md, "Decrypted message": the decoded headers among these, only those present. */
const HEADERS: ReadonlyArray<[string, string]> = [
  ['from', 'from'],
  ['to', 'to'],
  ['cc', 'cc'],
  ['reply-to', 'replyTo'],
  ['subject', 'subject'],
  ['date', 'date'],
  ['message-id', 'messageId'],
  ['in-reply-to', 'inReplyTo'],
  ['references', 'references'],
];

function headerText(value: HeaderValue): string | null {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'string' ? v : ((v as { value?: string }).value ?? ''))).join(' ');
  if (value && typeof value === 'object' && 'text' in value) return (value as AddressObject).text;
  if (value && typeof value === 'object' && 'value' in value) return String((value as { value: unknown }).value);
  return null;
}

function describe(att: AttachmentStream, index: number, size: number): AttachmentInfo {
  return {
    index,
    contentType: att.contentType || 'application/octet-stream',
    size,
    inline: att.contentDisposition === 'inline' || att.related === true,
    ...(att.filename ? { filename: att.filename } : {}),
    ...(att.cid ? { contentId: att.cid } : {}),
  };
}

/**
 * Walks the message. `onAttachment` decides per attachment: return true to take its stream
 * (and call `release` once done with it), false to have it counted and skipped. The returned
 * `stop` ends the walk early: without an error when the rest is not needed, or failing it.
 */
function walk(
  source: Readable,
  onAttachment: (att: AttachmentStream, index: number) => boolean,
  collect: { headers?: Map<string, HeaderValue>; text?: MessageText; sizes: number[]; infos: AttachmentInfo[] },
): { done: Promise<void>; stop: (err?: Error) => void } {
  // skipTextToHtml: `html` is the message's own HTML only (docs/api.md, "Decrypted message": empty string if none).
  // maxChildNodes is mailsplit's option, passed through by mailparser (not in its types).
  const options = { skipTextToHtml: true, skipImageLinks: true, maxChildNodes: MAX_MIME_PARTS };
  const parser = new MailParser(options);
  let stop: (err?: Error) => void = () => {};
  const done = new Promise<void>((resolve, reject) => {
    let index = 0;
    let settled = false;
    const finish = (err?: unknown) => {
      if (settled) return;
      settled = true;
      source.destroy();
      parser.destroy();
      if (err === undefined) resolve();
      else reject(err instanceof UnparseableMessageError ? err : new UnparseableMessageError((err as Error)?.message ?? String(err)));
    };
    stop = finish;
    parser.on('headers', (headers: Map<string, HeaderValue>) => (collect.headers = headers));
    parser.on('data', (data: AttachmentStream | MessageText) => {
      if (data.type === 'text') {
        collect.text = data;
        return;
      }
      const n = index++;
      if (onAttachment(data, n)) return;
      let size = 0;
      const content = data.content;
      content.on('data', (chunk: Buffer) => (size += chunk.length));
      content.on('end', () => {
        collect.infos.push(describe(data, n, size));
        data.release?.();
      });
      content.on('error', finish);
    });
    parser.on('end', () => {
      settled = true;
      resolve();
    });
    parser.on('error', finish);
    source.on('error', finish);
    source.pipe(parser);
  });
  return { done, stop };
}

/** Fails the walk (and so `work`) when `work` has not settled within the deadline. */
function withDeadline<T>(work: Promise<T>, stop: (err: Error) => void): Promise<T> {
  const timer = setTimeout(
    () => stop(new UnparseableMessageError(`parsing took longer than ${PARSE_LIMITS.deadlineMs} ms`)),
    PARSE_LIMITS.deadlineMs,
  );
  return work.finally(() => clearTimeout(timer));
}

export async function parseContent(source: Readable): Promise<ParsedContent> {
  const collect: { headers?: Map<string, HeaderValue>; text?: MessageText; sizes: number[]; infos: AttachmentInfo[] } = {
    sizes: [],
    infos: [],
  };
  const { done, stop } = walk(source, () => false, collect);
  await withDeadline(done, stop);
  const headers: Record<string, string> = {};
  for (const [name, field] of HEADERS) {
    const value = collect.headers?.get(name);
    if (value === undefined) continue;
    const text = headerText(value);
    if (text !== null && text !== '') headers[field] = text;
  }
  const html = collect.text?.html;
  return {
    headers,
    text: collect.text?.text ?? '',
    html: typeof html === 'string' ? html : '',
    attachments: collect.infos.sort((a, b) => a.index - b.index),
  };
}

/**
 * Attachment `n` as a stream of its decoded bytes, with what describes it; null when there is
 * none. Resolves once its first bytes (or its end) are there, so a message that fails to parse
 * before then is an UnparseableMessageError, never a response that starts and stalls; one
 * that fails later fails the stream. Parsing stops when the attachment has been read.
 */
export function openAttachment(source: Readable, n: number): Promise<{ info: Omit<AttachmentInfo, 'size'>; content: Readable } | null> {
  let taken: Readable | null = null;
  let found!: (value: { info: Omit<AttachmentInfo, 'size'>; content: Readable }) => void;
  const first = new Promise<{ info: Omit<AttachmentInfo, 'size'>; content: Readable }>((resolve) => (found = resolve));
  const { done, stop } = walk(
    source,
    (att, index) => {
      if (index !== n) return false;
      const content = att.content;
      taken = content;
      content.once('end', () => {
        att.release?.();
        stop();
      });
      content.once('close', () => {
        // The reader left early: stop parsing the rest.
        if (!content.readableEnded) stop();
      });
      const { size: _size, ...info } = describe(att, index, 0);
      content.once('readable', () => found({ info, content }));
      return true;
    },
    { sizes: [], infos: [] },
  );
  done.catch((err: unknown) => {
    // Handed out already: its reader learns of it (the response ends early, never hangs).
    const content = taken;
    if (content && !content.readableEnded) content.destroy(err as Error);
  });
  // The first bytes, or the walk's end (no such attachment) or failure, whichever comes first.
  return withDeadline(Promise.race([first, done.then(() => null)]), stop);
}
