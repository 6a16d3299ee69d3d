// Extensions of version 1 for writing mail (docs/sending.md, "Compose from JSON", "Identities"):
// POST /inboxes/{inbox}/messages/compose (a message as fields, composed into MIME and sent like
// POST /messages), and each inbox address's display name and signature.
import type { Access } from '../../auth/access.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import type { EventLog } from '../../events/log.ts';
import { Composer, referencedOriginal, type ComposeRequest } from '../../send/compose.ts';
import type { Identities, IdentityInput } from '../../send/identities.ts';
import { draftFingerprint, type SendService } from '../../send/service.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import type { BodyGate } from '../body-gate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { LongField } from '../send-body.ts';
import type { Validator } from '../validate.ts';
import { answer, base64Bytes, gated, idempotencyKey, readSendBody } from './send.ts';

const COMPOSE = 'https://postern.dev/schemas/send.json#/$defs/ComposeRequest';
const IDENTITY = 'https://postern.dev/schemas/send.json#/$defs/IdentityInput';

/** The request as the schema checked it: attachments' content still base64 (or a long field's key). */
type ComposeBody = Omit<ComposeRequest, 'attachments'> & {
  attachments?: Array<{ filename?: string; contentType?: string; content: string; contentId?: string }>;
  /** docs/sending.md, "Send later". */
  sendAt?: string;
  holdSeconds?: number;
};

export interface ComposeRouteDeps {
  access: Access;
  send: SendService;
  identities: Identities;
  sealed: MailOpening;
  events: EventLog;
  validator: Validator;
  gate: BodyGate;
}

export function composeRoutes({ access, send, identities, sealed, events, validator, gate }: ComposeRouteDeps) {
  const composer = new Composer(identities);
  /** A text field long enough to be read as base64 by readSendBody is put back as the text it was. */
  const text = (fields: Map<string, LongField>, v: string | undefined) =>
    v !== undefined && fields.has(v) ? fields.get(v)!.bytes.toString('base64') : v;

  return (router: AppRouter): void => {
    router.post('/inboxes/:inbox/messages/compose', allow(access, { token: 'send', session: false }), async (ctx) => {
      const p = ctx.state.principal;
      const { inbox } = await access.inboxAccess(p, ctx.params.inbox!, 'send');
      const key = idempotencyKey(ctx);
      // The body and the message composed from it, about as large again.
      const result = await gated(gate, ctx, { opened: true, sealed: inbox.mode === 'zero-access' }, async () => {
        const { json, fields } = await readSendBody(ctx);
        const { sendAt, holdSeconds, ...body } = validator.body<ComposeBody>(COMPOSE, json);
        const schedule = send.scheduleOf(sendAt, holdSeconds);
        // The whole request names the message: the same key with another request is a 422.
        const fingerprint = key
          ? draftFingerprint(['compose', JSON.stringify(json), ...[...fields.values()].map((f) => ({ base64: f.bytes }))])
          : '';
        if (key) {
          const prior = await send.keyAnswer(inbox.id, key, fingerprint);
          if (prior) return prior;
        }
        const req: ComposeRequest = {
          ...body,
          ...(body.text !== undefined ? { text: text(fields, body.text)! } : {}),
          ...(body.html !== undefined ? { html: text(fields, body.html)! } : {}),
          attachments: (body.attachments ?? []).map((a, i) => ({
            filename: a.filename,
            contentType: a.contentType,
            contentId: a.contentId,
            content: fields.get(a.content)?.bytes ?? base64Bytes(`attachments[${i}].content`, a.content),
          })),
        };
        // Who may send as `from` before the original is read.
        send.mayUse(inbox, body.from);
        const orig = req.reference ? await referencedOriginal(access, sealed, events, p, inbox, req.reference.message) : null;
        const composed = await composer.compose(inbox, req, orig);
        const sent = await send.send(inbox, p.actor, {
          from: composed.from,
          to: composed.envelope,
          raw: composed.raw,
          ...(key ? { idempotency: { key, fingerprint } } : {}),
          ...(schedule ? { schedule } : {}),
        });
        return { ...sent, date: composed.date.toISOString() };
      });
      ctx.body = answer(ctx, result);
    });

    router.get('/inboxes/:inbox/identities', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      ctx.body = { identities: await identities.list(inbox) };
    });

    router.put('/inboxes/:inbox/identities/:address', allow(access, { token: 'send', session: true }), async (ctx) => {
      const { inbox, role } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const body = validator.body<Partial<IdentityInput>>(IDENTITY, await readJson(ctx));
      ctx.body = await identities.set(inbox, role, ctx.params.address!, {
        displayName: body.displayName ?? null,
        signatureText: body.signatureText ?? null,
        signatureHtml: body.signatureHtml ?? null,
      });
    });
  };
}
