// Drafts (docs/sending.md, "Drafts"), an extension of version 1. Writing a draft needs the
// drafts:write scope, sending one the send scope: a token may propose what a person sends.
// Reading drafts takes either drafts:write (an agent reads back what it proposed) or messages:read.
import type { RawDraft, SendRequest } from '../../../schemas/wire.ts';
import type { Access, Principal } from '../../auth/access.ts';
import { forbidden, invalid } from '../../errors.ts';
import type { Inbox } from '../../directory/types.ts';
import type { DraftContent, DraftService } from '../../send/drafts.ts';
import type { SendService } from '../../send/service.ts';
import { allow } from '../authenticate.ts';
import type { BodyGate } from '../body-gate.ts';
import type { AppContext, AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';
import { answer, base64Bytes, gated, querySchedule, readSendBody } from './send.ts';

const DRAFT_REQUEST = 'https://postern.dev/schemas/drafts.json#/$defs/DraftRequest';
const WRITE = { token: 'drafts:write', session: true } as const;
const READ = { token: 'any', session: true } as const;

type DraftBody = RawDraft | SendRequest;

/** The inbox, for a caller holding drafts:write or messages:read (sessions: the role decides). */
async function readableInbox(access: Access, p: Principal, inboxId: string): Promise<Inbox> {
  if (p.kind === 'token' && !access.hasScope(p, 'drafts:write') && !access.hasScope(p, 'messages:read')) {
    throw forbidden('token lacks the drafts:write or messages:read scope');
  }
  const need = access.hasScope(p, 'drafts:write') ? 'drafts:write' : 'messages:read';
  return (await access.inboxAccess(p, inboxId, need)).inbox;
}

/** The body's content; its draft id when it names one. */
async function content(ctx: AppContext, validator: Validator): Promise<{ content: DraftContent; draftId?: string }> {
  const { json, fields } = await readSendBody(ctx);
  const body = validator.body<DraftBody>(DRAFT_REQUEST, json);
  const bytes = (field: string, value: string) => fields.get(value)?.bytes ?? base64Bytes(field, value);
  if ('raw' in body) return { content: { raw: bytes('raw', body.raw) }, ...(body.draftId ? { draftId: body.draftId } : {}) };
  return {
    draftId: body.draftId,
    content: {
      sealed: {
        epoch: body.epoch,
        wrappedDek: bytes('wrappedDek', body.wrappedDek),
        ciphertext: bytes('ciphertext', body.ciphertext),
        from: body.from,
        to: body.to,
      },
    },
  };
}

export function draftRoutes(access: Access, drafts: DraftService, validator: Validator, gate: BodyGate, send: SendService) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/drafts', allow(access, READ), async (ctx) => {
      const inbox = await readableInbox(access, ctx.state.principal, ctx.params.inbox!);
      ctx.body = { drafts: await drafts.list(inbox) };
    });

    router.get('/inboxes/:inbox/drafts/:draft', allow(access, READ), async (ctx) => {
      const inbox = await readableInbox(access, ctx.state.principal, ctx.params.inbox!);
      ctx.set('Cache-Control', 'no-store');
      ctx.body = await drafts.get(inbox, ctx.params.draft!);
    });

    router.post('/inboxes/:inbox/drafts', allow(access, WRITE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'drafts:write');
      const draft = await gated(gate, ctx, { opened: false, sealed: false }, async () => {
        const body = await content(ctx, validator);
        return drafts.create(inbox, ctx.state.principal.actor, body.content, body.draftId);
      });
      ctx.status = 201;
      ctx.body = draft;
    });

    router.put('/inboxes/:inbox/drafts/:draft', allow(access, WRITE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'drafts:write');
      ctx.body = await gated(gate, ctx, { opened: false, sealed: false }, async () => {
        const body = await content(ctx, validator);
        if (body.draftId && body.draftId !== ctx.params.draft) throw invalid(`draftId (${body.draftId}) is not this draft's id`);
        return drafts.update(inbox, ctx.state.principal.actor, ctx.params.draft!, body.content);
      });
    });

    router.delete('/inboxes/:inbox/drafts/:draft', allow(access, WRITE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'drafts:write');
      await drafts.remove(inbox, ctx.state.principal.actor, ctx.params.draft!);
      ctx.status = 204;
    });

    router.post('/inboxes/:inbox/drafts/:draft/send', allow(access, { token: 'send', session: true }), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const schedule = querySchedule(ctx, send);
      ctx.body = answer(ctx, await drafts.sendDraft(inbox, ctx.state.principal.actor, ctx.params.draft!, schedule));
    });
  };
}
