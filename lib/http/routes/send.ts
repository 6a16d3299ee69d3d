// Sending (docs/api.md, "Sending"): POST /inboxes/{inbox}/messages (an RFC 5322 message as given, tokens
// only) and POST /inboxes/{inbox}/send (a message sealed to the inbox's epoch key).
import type { SendRequest } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import { invalid, isDomainError, unprocessable } from '../../errors.ts';
import { HttpError } from '../errors.ts';
import type { DraftOpener } from '../../send/draft-opening.ts';
import {
  draftFingerprint,
  IDEMPOTENCY_KEY,
  isScheduled,
  MAX_MESSAGE_BYTES,
  type SendRequest as SendOrder,
  type SendResult,
  type SendService,
} from '../../send/service.ts';
import { allow } from '../authenticate.ts';
import type { BodyGate } from '../body-gate.ts';
import { readRaw } from '../body.ts';
import { parseSendBody, type LongField } from '../send-body.ts';
import type { AppContext, AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const RAW_SEND = 'https://postern.dev/schemas/send.json#/$defs/RawSendRequest';
const SEALED_SEND = 'https://postern.dev/schemas/send.json#/$defs/SendRequest';

/**
 * A body carrying a 25 MB message in base64 (4 characters per 3 bytes), plus room for the other
 * fields (100 addresses, a wrapped key). Anything larger is refused while it is still arriving.
 */
export const SEND_BODY_LIMIT = Math.ceil(MAX_MESSAGE_BYTES / 3) * 4 + 256 * 1024;

/**
 * The bytes of a base64 field the schema checked for its alphabet; 400 unless padded to a
 * multiple of 4 (a whole-string regex for that overflows the stack on 33 MB of text).
 */
export function base64Bytes(field: string, value: string): Buffer {
  if (value.length % 4 !== 0) throw invalid(`${field} is not base64 (its length must be a multiple of 4)`);
  return Buffer.from(value, 'base64');
}

/**
 * The body (long base64 fields decoded on the way, lib/http/send-body.ts), or 422 (a sending
 * limit: docs/api.md, "Errors") as soon as it passes the size a 25 MB message needs.
 */
export async function readSendBody(ctx: AppContext): Promise<{ json: unknown; fields: Map<string, LongField> }> {
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]+\+)?json\s*(;|$)/i.test(type)) {
    throw new HttpError(415, 'send the body as Content-Type: application/json');
  }
  let raw: Buffer;
  try {
    raw = await readRaw(ctx, SEND_BODY_LIMIT);
  } catch (err) {
    if (isDomainError(err) && err.kind === 'too-large') {
      throw unprocessable(`the message is over the ${MAX_MESSAGE_BYTES} byte limit`);
    }
    throw err;
  }
  if (raw.length === 0) throw invalid('request body required');
  return parseSendBody(raw);
}

/**
 * Send bodies in memory at once, across both routes and the filing of Sent copies
 * (lib/send/outbox.ts): one 25 MB message in base64 (its body, decoded in place) with small
 * sends beside it; anything larger (a sealed or zero-access 25 MB send, or a 25 MB send and a
 * 25 MB copy being filed) goes alone. Small messages are never held up by one another.
 */
export const SEND_MEMORY_BUDGET = 48 * 1024 * 1024;

/**
 * What a send holds in memory at once, counted against the budget: its body (the base64 is
 * decoded in place, lib/http/send-body.ts, so the message itself costs nothing more), and each
 * whole copy made from it: the message opened from its ciphertext (/send), and for a zero-access
 * inbox the Sent copy sealed (the message joined with any added header, and the sealed bytes).
 * The relayed message and a plain Sent copy are pieces of the body, never copies of it.
 */
export function sendMemoryBytes(bodyBytes: number, copies: { opened: boolean; sealed: boolean }): number {
  const message = Math.ceil(bodyBytes / 4) * 3;
  return bodyBytes + (copies.opened ? message : 0) + (copies.sealed ? 2 * message : 0);
}

/**
 * The request's Idempotency-Key (docs/sending.md, "Exactly once"), checked as POST /events checks
 * it; undefined without one.
 */
export function idempotencyKey(ctx: AppContext): string | undefined {
  if (ctx.headers['idempotency-key'] === undefined) return undefined;
  const key = ctx.get('idempotency-key');
  if (!IDEMPOTENCY_KEY.test(key)) throw invalid('Idempotency-Key must be 1 to 255 visible ASCII characters');
  return key;
}

/**
 * The send time and undo hold a raw or sealed send (or a draft's) carries in its query
 * (docs/sending.md, "Send later"): `sendAt` (RFC 3339) and `holdSeconds` (0 to 30).
 */
export function querySchedule(ctx: AppContext, send: SendService): SendOrder['schedule'] {
  const one = (name: string): string | undefined => {
    const v = ctx.query[name];
    if (Array.isArray(v)) throw invalid(`${name} may be given once`);
    return v;
  };
  const hold = one('holdSeconds');
  if (hold !== undefined && !/^\d{1,2}$/.test(hold)) throw invalid('holdSeconds must be an integer from 0 to 30');
  return send.scheduleOf(one('sendAt'), hold === undefined ? undefined : Number(hold));
}

/** A send's answer: 200 when it went, 202 when it waits in the outbox. */
export function answer<T extends SendResult>(ctx: AppContext, result: T): T {
  if (isScheduled(result)) ctx.status = 202;
  return result;
}

/** Runs `work` once the request's memory fits in the budget (lib/http/body-gate.ts). */
export async function gated<T>(
  gate: BodyGate,
  ctx: AppContext,
  copies: { opened: boolean; sealed: boolean },
  work: () => Promise<T>,
): Promise<T> {
  const declared = Number(ctx.get('content-length') || NaN);
  const body = Number.isFinite(declared) ? Math.min(declared, SEND_BODY_LIMIT) : SEND_BODY_LIMIT;
  const release = await gate.enter(sendMemoryBytes(body, copies));
  try {
    return await work();
  } finally {
    release();
  }
}

export function sendRoutes(access: Access, send: SendService, opener: DraftOpener, validator: Validator, gate: BodyGate) {
  return (router: AppRouter): void => {
    router.post('/inboxes/:inbox/send', allow(access, { token: 'send', session: true }), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const schedule = querySchedule(ctx, send);
      const result = await gated(gate, ctx, { opened: true, sealed: inbox.mode === 'zero-access' }, async () => {
        const { json, fields } = await readSendBody(ctx);
        const body = validator.body<SendRequest>(SEALED_SEND, json);
        const wrappedDek = fields.get(body.wrappedDek)?.bytes ?? base64Bytes('wrappedDek', body.wrappedDek);
        const long = fields.get(body.ciphertext);
        const ciphertext = long?.bytes ?? base64Bytes('ciphertext', body.ciphertext);
        const to = [...new Set(body.to.map((a) => a.toLowerCase()))].sort();
        const dek = fields.get(body.wrappedDek);
        const fingerprint = draftFingerprint([
          String(body.epoch),
          dek ? { base64: dek.bytes } : body.wrappedDek,
          long ? { base64: long.bytes } : body.ciphertext,
          body.from.toLowerCase(),
          ...to,
        ]);
        body.ciphertext = '';
        fields.clear();
        // A retry of a draft already sent is answered as the first time, without opening it again.
        const prior = await send.priorAnswer(inbox.id, body.draftId, fingerprint);
        if (prior) return prior;
        // Who may send, the recipients and the rate first: opening is the costly part.
        await send.admit(inbox, body);
        const sealed = { draftId: body.draftId, epoch: body.epoch, wrappedDek, ciphertext };
        const raw = await opener.open(inbox.id, sealed);
        // Scheduled, it waits sealed, as it came: opened again at its time.
        return send.send(inbox, ctx.state.principal.actor, {
          from: body.from,
          to: body.to,
          raw,
          draft: { id: body.draftId, fingerprint },
          ...(schedule ? { schedule, sealed } : {}),
        });
      });
      ctx.body = answer(ctx, result);
    });

    router.post('/inboxes/:inbox/messages', allow(access, { token: 'send', session: false }), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const key = idempotencyKey(ctx);
      const schedule = querySchedule(ctx, send);
      const later = schedule ? { schedule } : {};
      const result = await gated(gate, ctx, { opened: false, sealed: inbox.mode === 'zero-access' }, async () => {
        const { json, fields } = await readSendBody(ctx);
        const body = validator.body<{ from: string; to: string[]; raw: string }>(RAW_SEND, json);
        const raw = fields.get(body.raw)?.bytes ?? base64Bytes('raw', body.raw);
        // The received text is no longer needed while the message is relayed (33 MB of it, at most).
        body.raw = '';
        fields.clear();
        if (key === undefined) return send.send(inbox, ctx.state.principal.actor, { from: body.from, to: body.to, raw, ...later });
        // A key used before answers as the first time, without sending again (docs/sending.md, "Exactly once").
        const to = [...new Set(body.to.map((a) => a.toLowerCase()))].sort();
        const fingerprint = draftFingerprint(['messages', body.from.toLowerCase(), ...to, { base64: raw }]);
        const prior = await send.keyAnswer(inbox.id, key, fingerprint);
        if (prior) return prior;
        return send.send(inbox, ctx.state.principal.actor, {
          from: body.from,
          to: body.to,
          raw,
          idempotency: { key, fingerprint },
          ...later,
        });
      });
      ctx.body = answer(ctx, result);
    });
  };
}
