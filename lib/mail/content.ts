// A message's decrypted content (spec 2.10, 2.11): decoded headers, text, HTML and its
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

/** Spec 2.10: the decoded headers among these, only those present. */
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
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'string' ? v : (v as { value?: string }).value ?? '')).join(' ');
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
 * (and call `release` once done with it), false to have it counted and skipped.
 */
function walk(
  source: Readable,
  onAttachment: (att: AttachmentStream, index: number) => boolean,
  collect: { headers?: Map<string, HeaderValue>; text?: MessageText; sizes: number[]; infos: AttachmentInfo[] },
): Promise<void> {
  return new Promise((resolve, reject) => {
    // skipTextToHtml: `html` is the message's own HTML only (spec: "empty string if none").
    const parser = new MailParser({ skipTextToHtml: true, skipImageLinks: true });
    let index = 0;
    const fail = (err: unknown) => {
      source.destroy();
      parser.destroy();
      reject(err instanceof UnparseableMessageError ? err : new UnparseableMessageError((err as Error)?.message ?? String(err)));
    };
    parser.on('headers', (headers: Map<string, HeaderValue>) => (collect.headers = headers));
    parser.on('data', (data: AttachmentStream | MessageText) => {
      if (data.type === 'text') {
        collect.text = data;
        return;
      }
      const n = index++;
      if (onAttachment(data, n)) return;
      let size = 0;
      const content = data.content as Readable;
      content.on('data', (chunk: Buffer) => (size += chunk.length));
      content.on('end', () => {
        collect.infos.push(describe(data, n, size));
        data.release?.();
      });
      content.on('error', fail);
    });
    parser.on('end', () => resolve());
    parser.on('error', fail);
    source.on('error', fail);
    source.pipe(parser);
  });
}

export async function parseContent(source: Readable): Promise<ParsedContent> {
  const collect: { headers?: Map<string, HeaderValue>; text?: MessageText; sizes: number[]; infos: AttachmentInfo[] } = { sizes: [], infos: [] };
  await walk(source, () => false, collect);
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

/** Attachment `n` as a stream of its decoded bytes, with what describes it; null when there is none. */
export function openAttachment(source: Readable, n: number): Promise<{ info: Omit<AttachmentInfo, 'size'>; content: Readable } | null> {
  return new Promise((resolve, reject) => {
    let found = false;
    walk(
      source,
      (att, index) => {
        if (index !== n) return false;
        found = true;
        const content = att.content as Readable;
        content.once('end', () => att.release?.());
        content.once('close', () => {
          // The reader left early: stop parsing the rest.
          if (!content.readableEnded) source.destroy();
        });
        const { size: _size, ...info } = describe(att, index, 0);
        resolve({ info, content });
        return true;
      },
      { sizes: [], infos: [] },
    ).then(
      () => {
        if (!found) resolve(null);
      },
      (err: unknown) => {
        if (!found) reject(err);
      },
    );
  });
}
