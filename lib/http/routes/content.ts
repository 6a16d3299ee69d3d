// Decrypted content (docs/api.md, "Content"): tokens with content:read, compatible inboxes only. Each read is
// recorded as `access.content.read` before any byte goes out, and nothing here is ever cached.
import type { Access } from '../../auth/access.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import type { Inbox } from '../../directory/types.ts';
import { notFound, unprocessable } from '../../errors.ts';
import type { EventLog } from '../../events/log.ts';
import { CONTENT_RULE, recordContentRead, requireCompatible, type ContentPart } from '../../mail/content-access.ts';
import { openAttachment, parseContent, UnparseableMessageError } from '../../mail/content.ts';
import type { CredentialRate } from '../../rate.ts';
import { allow, expensive } from '../authenticate.ts';
import type { AppContext, AppRouter } from '../context.ts';

const RULE = CONTENT_RULE;
/** A MIME type as a header may carry it; anything else is served as opaque bytes. */
const MIME_TYPE = /^[A-Za-z0-9][\w!#$&^.+-]*\/[A-Za-z0-9][\w!#$&^.+-]*$/;

export function contentRoutes(access: Access, sealed: MailOpening, events: EventLog, rate: CredentialRate) {
  async function compatibleInbox(ctx: AppContext): Promise<Inbox> {
    const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'content:read');
    requireCompatible(inbox);
    return inbox;
  }

  function audit(ctx: AppContext, inbox: Inbox, msgId: string, data: ContentPart) {
    return recordContentRead(events, inbox, ctx.state.principal.actor, msgId, data);
  }

  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/messages/:msg/content', allow(access, RULE), async (ctx) => {
      const inbox = await compatibleInbox(ctx);
      const msgId = ctx.params.msg!;
      const { message: m, body: source } = await sealed.plaintext(inbox, msgId);
      try {
        await audit(ctx, inbox, msgId, { part: 'content' });
      } catch (err) {
        source.destroy();
        throw err;
      }
      let parsed;
      try {
        parsed = await parseContent(source);
      } catch (err) {
        if (err instanceof UnparseableMessageError)
          throw unprocessable(`the message could not be parsed (${err.message}); read it whole from /source`);
        throw err;
      }
      ctx.body = {
        id: m.id,
        receivedAt: m.receivedAt,
        flags: m.flags,
        ...(m.keywords ? { keywords: m.keywords } : {}),
        ...parsed,
      };
    });

    // The whole message, decrypted: the expensive budget, like /raw.
    router.get('/inboxes/:inbox/messages/:msg/source', allow(access, RULE), expensive(rate), async (ctx) => {
      const inbox = await compatibleInbox(ctx);
      const msgId = ctx.params.msg!;
      const { body: source } = await sealed.plaintext(inbox, msgId);
      try {
        await audit(ctx, inbox, msgId, { part: 'source' });
      } catch (err) {
        source.destroy();
        throw err;
      }
      ctx.type = 'message/rfc822';
      ctx.body = source;
    });

    router.get('/inboxes/:inbox/messages/:msg/attachments/:n', allow(access, RULE), async (ctx) => {
      const inbox = await compatibleInbox(ctx);
      const msgId = ctx.params.msg!;
      const raw = ctx.params.n!;
      const n = /^\d{1,6}$/.test(raw) ? Number(raw) : -1;
      if (n < 0) throw notFound('attachment not found: n is the index from /content');
      const { body: source } = await sealed.plaintext(inbox, msgId);
      let found;
      try {
        found = await openAttachment(source, n);
      } catch (err) {
        if (err instanceof UnparseableMessageError)
          throw unprocessable(`the message could not be parsed (${err.message}); read it whole from /source`);
        throw err;
      }
      if (!found) throw notFound(`attachment ${n} not found`);
      try {
        await audit(ctx, inbox, msgId, { part: 'attachment', attachment: n });
      } catch (err) {
        found.content.destroy();
        source.destroy();
        throw err;
      }
      // koa's attachment() encodes the file name safely (an ASCII fallback plus filename*=UTF-8'').
      ctx.attachment(found.info.filename ?? `attachment-${n}`, { type: 'attachment' });
      ctx.type = MIME_TYPE.test(found.info.contentType) ? found.info.contentType : 'application/octet-stream';
      ctx.set('X-Content-Type-Options', 'nosniff');
      ctx.body = found.content;
    });
  };
}
