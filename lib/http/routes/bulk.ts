// POST /inboxes/{inbox}/messages/bulk (docs/organize.md, "Bulk"), an extension of version 1: one
// change to up to 1,000 messages, answered per id; a repeated Idempotency-Key applies nothing twice.
import type { Access } from '../../auth/access.ts';
import { invalid } from '../../errors.ts';
import type { BulkDestroy, Flag, KeywordChange, LabelChange, MessageMove } from '../../../schemas/wire.ts';
import { MAX_BULK, type BulkChange, type MailBulk } from '../../mail/bulk.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';
import { DESTROY } from './folders.ts';

const BULK_CHANGE = 'https://postern.dev/schemas/mail.json#/$defs/BulkChange';
/** The rule of every organizing operation (docs/organize.md, "Who may"). */
const ORGANIZE = { token: 'messages:write', session: true } as const;
/** As POST /events has it (docs/api.md, "Events"): 1 to 255 visible ASCII characters. */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

const CHANGES = ['labels', 'flags', 'keywords', 'move', 'destroy'];

interface BulkBody {
  ids: string[];
  labels?: LabelChange;
  flags?: { add?: Flag[]; remove?: Flag[] };
  keywords?: KeywordChange;
  move?: MessageMove;
  destroy?: BulkDestroy;
}

/** The one change a bulk body names (the schema lets through exactly one). */
export function bulkChangeOf(body: Omit<BulkBody, 'ids'>): BulkChange {
  if (body.labels) return { kind: 'labels', add: body.labels.add ?? [], remove: body.labels.remove ?? [] };
  if (body.flags) return { kind: 'flags', add: body.flags.add ?? [], remove: body.flags.remove ?? [] };
  if (body.keywords) return { kind: 'keywords', add: body.keywords.add ?? [], remove: body.keywords.remove ?? [] };
  if (body.move) return { kind: 'move', to: body.move.to };
  if (body.destroy) return { kind: 'destroy', confirm: body.destroy.confirm === true };
  throw invalid('name one change: labels, flags, keywords, move or destroy');
}

export function bulkRoutes(access: Access, bulk: MailBulk, validator: Validator) {
  return (router: AppRouter): void => {
    router.post('/inboxes/:inbox/messages/bulk', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const raw = await readJson(ctx);
      // Counted before the schema so the answer says what is wrong, not which item broke a rule.
      const ids = (raw as { ids?: unknown } | null)?.ids;
      if (Array.isArray(ids) && ids.length > MAX_BULK)
        throw invalid(`at most ${MAX_BULK} message ids in one call (got ${ids.length}); split the change`);
      if (raw !== null && typeof raw === 'object' && CHANGES.filter((k) => k in raw).length !== 1)
        throw invalid('name exactly one change: labels, flags, keywords, move or destroy');
      const body = validator.body<BulkBody>(BULK_CHANGE, raw);
      // What cannot be undone needs the destroy rule as well (docs/organize.md, "Delete forever").
      if (body.destroy) {
        access.authorize(ctx.state.principal, DESTROY);
        await access.inboxAccess(ctx.state.principal, inbox.id, 'messages:destroy');
      }
      const given = ctx.headers['idempotency-key'] !== undefined;
      const key = ctx.get('idempotency-key');
      if (given && !IDEMPOTENCY_KEY.test(key)) throw invalid('Idempotency-Key must be 1 to 255 visible ASCII characters');
      const p = ctx.state.principal;
      ctx.body = await bulk.apply(inbox, p.projectId, body.ids, bulkChangeOf(body), p.actor, given ? key : undefined);
    });
  };
}
