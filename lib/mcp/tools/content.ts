// Decrypted content for a model, the twins of GET …/content and …/attachments/{n} (docs/api.md, "Content"):
// the same scope (content:read), the same refusal for zero-access inboxes and the same
// `access.content.read` record before anything is returned. HTML is reduced to text, the text
// is capped, and all of it is fenced as untrusted data.
import type { Readable } from 'node:stream';
import type { Access } from '../../auth/access.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import { notFound, unprocessable } from '../../errors.ts';
import type { EventLog } from '../../events/log.ts';
import { CONTENT_RULE, recordContentRead, requireCompatible } from '../../mail/content-access.ts';
import { openAttachment, parseContent, UnparseableMessageError } from '../../mail/content.ts';
import { cap, cutNote, htmlToText, untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool } from '../tool.ts';

/** Attachments larger than this are not returned through a tool (base64 in a model's context). */
export const MAX_ATTACHMENT_BYTES = 256 * 1024;

const RULE = CONTENT_RULE;

function unparseable(err: unknown): never {
  if (err instanceof UnparseableMessageError) throw unprocessable(`the message could not be parsed (${err.message})`);
  throw err;
}

/** The attachment's bytes, or null once there are more than `max` (the rest is not read). */
async function upTo(content: Readable, max: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of content as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      content.destroy();
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

export function contentTools(access: Access, sealed: MailOpening, events: EventLog): Tool[] {
  return [
    tool<{ inboxId: string; messageId: string; maxChars: number }>({
      name: 'read_message',
      title: 'Read a message',
      description:
        "A message's decrypted text (HTML reduced to plain text) with its headers and a list of its attachments. " +
        'Only for compatible inboxes: a zero-access inbox is encrypted for its users, and Postern cannot read it. Every read is recorded in the audit log.',
      rule: RULE,
      input: 'ReadMessageInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'content:read');
        requireCompatible(inbox);
        const { message: m, body: source } = await sealed.plaintext(inbox, args.messageId);
        try {
          await recordContentRead(events, inbox, p.actor, args.messageId, { part: 'content' });
        } catch (err) {
          source.destroy();
          throw err;
        }
        const parsed = await parseContent(source).catch(unparseable);
        // mailparser derives text from HTML when a message has no text part; this is for the rest.
        const fromHtml = parsed.text.trim() === '' && parsed.html !== '';
        const cut = cap(fromHtml ? htmlToText(parsed.html) : parsed.text, args.maxChars);
        const attachments = parsed.attachments;
        const headerLines = Object.entries(parsed.headers).map(([k, v]) => `${k}: ${v}`);
        const attachmentLines = attachments.map(
          (a) => `attachment ${a.index}: ${a.filename ?? '(no name)'} (${a.contentType}, ${a.size} bytes${a.inline ? ', inline' : ''})`,
        );
        const body = [...headerLines, '', cut.text, ...(attachmentLines.length > 0 ? ['', ...attachmentLines] : [])].join('\n');
        const text = untrusted(body) + cutNote(cut, 'call read_message with a larger maxChars for more');
        return {
          structured: {
            id: m.id,
            receivedAt: m.receivedAt,
            flags: m.flags,
            headers: parsed.headers,
            text: cut.text,
            textFromHtml: fromHtml,
            truncated: cut.truncated,
            totalChars: cut.total,
            attachments,
            untrusted: true,
            notice: UNTRUSTED_NOTICE,
          },
          text,
        };
      },
    }),

    tool<{ inboxId: string; messageId: string; index: number }>({
      name: 'get_attachment',
      title: 'Get a small attachment',
      description: `One attachment of a message as base64, up to ${MAX_ATTACHMENT_BYTES} bytes (larger ones are refused: fetch them over HTTP). Indexes come from read_message. Compatible inboxes only; recorded in the audit log.`,
      rule: RULE,
      input: 'GetAttachmentInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'content:read');
        requireCompatible(inbox);
        const { body: source } = await sealed.plaintext(inbox, args.messageId);
        const found = await openAttachment(source, args.index).catch(unparseable);
        if (!found) throw notFound(`attachment ${args.index} not found`);
        try {
          await recordContentRead(events, inbox, p.actor, args.messageId, { part: 'attachment', attachment: args.index });
        } catch (err) {
          found.content.destroy();
          source.destroy();
          throw err;
        }
        const bytes = await upTo(found.content, MAX_ATTACHMENT_BYTES);
        if (!bytes) {
          throw unprocessable(
            `attachment ${args.index} is over the ${MAX_ATTACHMENT_BYTES} bytes a tool returns; download it from GET /v1/inboxes/${inbox.id}/messages/${args.messageId}/attachments/${args.index}`,
          );
        }
        const { info } = found;
        const structured = {
          index: info.index,
          contentType: info.contentType,
          size: bytes.length,
          ...(info.filename ? { filename: info.filename } : {}),
          base64: bytes.toString('base64'),
          untrusted: true,
          notice: UNTRUSTED_NOTICE,
        };
        const text = `${untrusted(`attachment ${info.index}: ${info.filename ?? '(no name)'} (${info.contentType}, ${bytes.length} bytes)`)}\nThe bytes are in the structured result as base64.`;
        return { structured, text };
      },
    }),
  ];
}
