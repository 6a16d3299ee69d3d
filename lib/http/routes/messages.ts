// Message listing, detail and flags (docs/api.md, "Messages", "Message flags").
import type { Access } from '../../auth/access.ts';
import { invalid } from '../../errors.ts';
import type { FlagChange, KeywordChange, LabelChange, MessageMove } from '../../../schemas/wire.ts';
import type { MailService } from '../../mail/service.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import type { CredentialRate } from '../../rate.ts';
import { allow, DEFAULT_RULE, expensive } from '../authenticate.ts';
import { readJson } from '../body.ts';
import { sendJsonOnce } from '../json-once.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';
import type { ThreadReads } from '../../mail/thread-reads.ts';
import type { EventLog } from '../../events/log.ts';
import { previewGate } from '../../mail/content-access.ts';

const LIST_QUERY = 'https://postern.dev/schemas/mail.json#/$defs/MessageListQuery';
const FLAG_CHANGE = 'https://postern.dev/schemas/mail.json#/$defs/FlagChange';
const LABEL_CHANGE = 'https://postern.dev/schemas/mail.json#/$defs/LabelChange';
const MESSAGE_MOVE = 'https://postern.dev/schemas/mail.json#/$defs/MessageMove';
const KEYWORD_CHANGE = 'https://postern.dev/schemas/mail.json#/$defs/KeywordChange';
/** Filing messages into labels, an extension of version 1 (docs/organize.md). */
const ORGANIZE = { token: 'messages:write', session: true } as const;

/** If-None-Match holds one or more ETags (or *); weak ones compare by their opaque part. */
function matches(header: string, etag: string): boolean {
  if (header.trim() === '*') return true;
  const bare = etag.replace(/^W\//, '');
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === bare);
}

export function messageRoutes(
  access: Access,
  mail: MailService,
  validator: Validator,
  sealed: MailOpening,
  rate: CredentialRate,
  /** Threads and previews (docs/threads.md): collapseThreads and preview on the listing. */
  threads?: { reads: ThreadReads; events: EventLog },
) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/labels/:label/messages', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      const query = validator.query<{ limit: number; before?: number; collapseThreads?: boolean; preview?: boolean }>(
        LIST_QUERY,
        ctx.query,
      );
      const page = { limit: query.limit, ...(query.before !== undefined ? { before: query.before } : {}) };
      if (!threads || (!query.collapseThreads && !query.preview)) {
        threads?.reads.backfill(inbox);
        sendJsonOnce(ctx, await mail.messages(inbox, ctx.params.label!, page));
        return;
      }
      // Checked before anything is read: a caller who may not see previews learns nothing more.
      const record = query.preview ? await previewGate(access, threads.events, ctx.state.principal, inbox, ctx.params.label) : null;
      const list = query.collapseThreads
        ? await threads.reads.collapsed(inbox, ctx.params.label!, page)
        : structuredClone(await mail.messages(inbox, ctx.params.label!, page));
      if (record) await threads.reads.withPreviews(inbox, list.messages, record);
      ctx.body = list;
    });

    router.get('/inboxes/:inbox/messages/:msg', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      // With keyEpoch and wrappedDek (docs/api.md, "Message detail"): the ETag covers them too.
      const { detail, etag } = await sealed.detail(inbox, ctx.params.msg!);
      // Private: a browser may keep it, but must ask each time (the ETag makes that cheap).
      ctx.set('Cache-Control', 'private, no-cache');
      ctx.set('ETag', etag);
      const ifNoneMatch = ctx.get('if-none-match');
      if (ifNoneMatch && matches(ifNoneMatch, etag)) {
        ctx.status = 304;
        return;
      }
      ctx.body = detail;
    });

    // The whole message from the mail server: the expensive budget.
    router.get('/inboxes/:inbox/messages/:msg/raw', allow(access, DEFAULT_RULE), expensive(rate), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      const body = await sealed.raw(inbox, ctx.params.msg!);
      // Byte-identical on every read, forever (docs/encryption.md): the browser may keep it.
      ctx.set('Cache-Control', 'private, max-age=31536000, immutable');
      ctx.type = 'application/octet-stream';
      ctx.body = body;
    });

    router.post('/inboxes/:inbox/messages/:msg/flags', allow(access, { token: 'flags:write', session: true }), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'flags:write');
      const body = validator.body<FlagChange>(FLAG_CHANGE, await readJson(ctx));
      const both = (body.add ?? []).filter((f) => body.remove?.includes(f));
      if (both.length > 0) throw invalid(`a flag cannot be added and removed at once: ${both.join(', ')}`);
      ctx.body = { flags: await mail.changeFlags(inbox, ctx.params.msg!, body.add ?? [], body.remove ?? [], ctx.state.principal.actor) };
    });

    router.post('/inboxes/:inbox/messages/:msg/labels', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const body = validator.body<LabelChange>(LABEL_CHANGE, await readJson(ctx));
      ctx.body = await mail.changeLabels(inbox, ctx.params.msg!, body.add ?? [], body.remove ?? [], ctx.state.principal.actor);
    });

    router.post('/inboxes/:inbox/messages/:msg/move', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const body = validator.body<MessageMove>(MESSAGE_MOVE, await readJson(ctx));
      ctx.body = await mail.move(inbox, ctx.params.msg!, body.to, ctx.state.principal.actor);
    });

    router.post('/inboxes/:inbox/messages/:msg/keywords', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const body = validator.body<KeywordChange>(KEYWORD_CHANGE, await readJson(ctx));
      ctx.body = await mail.changeKeywords(inbox, ctx.params.msg!, body.add ?? [], body.remove ?? [], ctx.state.principal.actor);
    });
  };
}
