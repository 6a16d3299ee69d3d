// The project event log over HTTP (docs/api.md, "Events", "Project event log"): GET/POST /event-types, POST /events, and
// GET /events as pages or as a live Server-Sent Events stream. Domain: lib/events/log.ts.
import type { Access } from '../../auth/access.ts';
import { invalid, isDomainError, tooLarge, unprocessable } from '../../errors.ts';
import type { Cursors } from '../../events/cursor.ts';
import { publishAs, publishKeyed, type PublishRequest } from '../../events/publish-as.ts';
import { MAX_DATA_BYTES, type EventLog, type NewEventType } from '../../events/log.ts';
import { compileFilter, filterFor, redactActor, startPosition, type EventFilter, type EventsQuery } from '../../events/query.ts';
import type { StoredEvent } from '../../events/types.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppContext, AppRouter } from '../context.ts';
import { formatFrame, framer, SseStream } from '../sse.ts';
import type { StreamGuard } from '../stream-guard.ts';
import type { StreamQuota } from '../stream-quota.ts';
import type { Validator } from '../validate.ts';
import type { WarnLog } from '../../warn-log.ts';

const SCHEMA = 'https://postern.dev/schemas/events.json';
/** A POST /events body: 4 KB of data plus room for the other fields and JSON escapes. */
const EVENT_BODY_LIMIT = 16 * 1024;
const TYPE_BODY_LIMIT = 64 * 1024;
/** Live events held while a stream backfills; more than this and the client is too far behind. */
const MAX_PENDING = 10_000;
const BACKFILL_PAGE = 500;

export interface EventRouteOptions {
  access: Access;
  events: EventLog;
  validator: Validator;
  heartbeatMs: number;
  maxDurationMs: number;
  /** Bytes a live client may fall behind before it is cut off (it resumes from the log). */
  maxBufferedBytes?: number;
  /** Re-checks each live stream's credential and filter while it runs. */
  guard: StreamGuard;
  /** Caps the live streams open per credential and per project. */
  quota: StreamQuota;
  log?: WarnLog;
}

/** Shape errors in a request body are 422 on the event operations (docs/api.md, "Events" lists no 400 there). */
function bodyAs<T>(validator: Validator, ref: string, value: unknown): T {
  try {
    return validator.body<T>(ref, value);
  } catch (err) {
    if (isDomainError(err) && err.kind === 'invalid') throw unprocessable(err.message);
    throw err;
  }
}

function wantsStream(ctx: AppContext): boolean {
  return /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(ctx.get('accept'));
}

type FrameOf = (e: StoredEvent, redact: boolean) => string;
const framers = new WeakMap<Cursors, FrameOf>();

/** One serialization of each live frame for all its clients (two forms: with and without actor). */
function framesFor(cursors: Cursors): FrameOf {
  let frameOf = framers.get(cursors);
  if (!frameOf) {
    const full = framer((e: StoredEvent) => ({ id: cursors.encode(e.projectId, e.position), event: e.type, data: e.json }));
    const redacted = framer((e: StoredEvent) => ({
      id: cursors.encode(e.projectId, e.position),
      event: e.type,
      data: redactActor(e.json),
    }));
    frameOf = (e, redact) => (redact ? redacted(e) : full(e));
    framers.set(cursors, frameOf);
  }
  return frameOf;
}

const READ_RULE = { token: 'events:read', session: true } as const;

/** The parts of a filter that a re-check can change (the rest follows from the query). */
const reach = (f: EventFilter): string => `${f.visibilities.join(',')}|${f.allowedInboxes.join(',')}`;

export function eventRoutes(o: EventRouteOptions) {
  const { access, events, validator } = o;

  /** A page oldest first after `after`, or newest first below `before` (`back`). */
  function page(ctx: AppContext, filter: EventFilter, after: number, limit: number, back?: { before: number | null }) {
    return (back ? events.pageBack(filter, back.before, limit) : events.page(filter, after, limit)).then(({ events: rows, cursor }) => {
      // The stored JSON is served as is: no parse and re-serialize per event.
      const items = rows.map((e) => (filter.redactActor ? redactActor(e.json) : e.json));
      ctx.type = 'application/json';
      // One Buffer: a string body would be scanned once for Content-Length and again to send.
      ctx.body = Buffer.from(`{"events":[${items.join(',')}],"cursor":${JSON.stringify(cursor)}}`);
    });
  }

  function live(ctx: AppContext, q: EventsQuery, initial: EventFilter, after: number | null, cursors: Cursors): void {
    const frameOf = framesFor(cursors);
    // Both change when a re-check finds the caller's reach changed (see `guard.watch` below).
    let filter = initial;
    let matches = compileFilter(filter);
    // Counted before the stream starts: over a cap, the caller gets a plain 429.
    const release = o.quota.take('events', ctx.state.principal);
    const sse = new SseStream(ctx, {
      heartbeatMs: o.heartbeatMs,
      maxDurationMs: o.maxDurationMs,
      ...(o.maxBufferedBytes !== undefined ? { maxBufferedBytes: o.maxBufferedBytes } : {}),
    });
    // Subscribe first, so nothing committed from now on can fall between backfill and live.
    let lastSent = after ?? events.live.position;
    let pending: StoredEvent[] | null = after === null ? null : [];
    const unsubscribe = events.live.subscribe(filter.projectId, (e) => {
      if (!matches(e)) return;
      if (pending) {
        pending.push(e);
        if (pending.length > MAX_PENDING) sse.close('slow');
        return;
      }
      if (e.position <= lastSent) return;
      lastSent = e.position;
      sse.enqueue(frameOf(e, filter.redactActor));
    });
    sse.onClose(() => {
      release();
      unsubscribe();
    });
    // Every POSTERN_STREAM_RECHECK_MS the filter is derived again, exactly as for a new request,
    // from the credential as it stands: revoked, expired or ended (401), a scope lost (403), or an
    // inbox named in `inboxes` no longer granted (404) ends the stream with that error. Without
    // `inboxes` the filter is "every inbox I can use", and it follows the grants in place instead:
    // a withdrawn inbox's events stop at once and the stream goes on. Closing would also be safe
    // (the client reconnects with Last-Event-ID), but one grant change would then cut and
    // backfill every project stream of the member, for no gain in what each is shown.
    const key = `events|${q.inboxes ?? '*'}|${q.types ?? '*'}|${q.audit === true}`;
    o.guard.watch(ctx, sse, async (now) => {
      access.authorize(now.principal, READ_RULE);
      const next = await now.once(key, () => filterFor(access, now.principal, q));
      if (reach(next) !== reach(filter)) {
        filter = next;
        matches = compileFilter(next);
      }
    });
    if (after === null) return;

    // Backfill runs after this handler returns: Koa only starts piping the stream then.
    const backfill = async () => {
      for (;;) {
        const from = lastSent;
        const asked = filter;
        const { events: rows, scannedTo, complete } = await events.backfill(asked, from, BACKFILL_PAGE);
        if (sse.closed) return;
        for (const e of rows) {
          // The filter changed while this page was read: it is applied to the page too.
          if (filter !== asked && !matches(e)) continue;
          // Backfilled rows are this client's alone: formatted directly, not cached.
          if (
            !sse.write(
              formatFrame({
                id: cursors.encode(e.projectId, e.position),
                event: e.type,
                data: filter.redactActor ? redactActor(e.json) : e.json,
              }),
            )
          )
            return;
        }
        lastSent = Math.max(lastSent, scannedTo);
        // A read that reached the end of the log as it was: what came later is in `pending` or
        // still on its way.
        if (complete) break;
        // Let the socket drain before the next page, so a resume does not look like a slow client.
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (sse.needsDrain) await sse.drained();
      }
      const held = pending ?? [];
      pending = null;
      for (const e of held) {
        // Matched when it arrived; matched again in case the filter changed since.
        if (e.position <= lastSent || !matches(e)) continue;
        lastSent = e.position;
        if (!sse.write(frameOf(e, filter.redactActor))) return;
      }
    };
    backfill().catch((err: unknown) => {
      o.log?.warn({ err }, 'event stream backfill failed');
      sse.close('server');
    });
  }

  return (router: AppRouter): void => {
    router.get('/event-types', allow(access, { token: 'any', session: true }), async (ctx) => {
      const p = ctx.state.principal;
      // Tokens also get their project's own ext.* types (docs/api.md, "Events").
      ctx.body = { eventTypes: await events.catalog(p.kind === 'token' ? p.projectId : null) };
    });

    router.post('/event-types', allow(access, { token: 'events:write', session: false }), async (ctx) => {
      const body = bodyAs<NewEventType>(validator, `${SCHEMA}#/$defs/NewEventType`, await readJson(ctx, TYPE_BODY_LIMIT));
      ctx.status = 201;
      ctx.body = await events.registerType(ctx.state.principal.projectId, body);
    });

    router.post('/events', allow(access, { token: 'events:write', session: false }), async (ctx) => {
      const p = ctx.state.principal;
      const key = ctx.get('idempotency-key');
      if (ctx.headers['idempotency-key'] !== undefined && (key.length === 0 || key.length > 255 || !/^[\x21-\x7e]+$/.test(key))) {
        throw invalid('Idempotency-Key must be 1 to 255 visible ASCII characters');
      }
      // The byte limit refuses an oversized body while it streams in, before any parsing.
      let raw: unknown;
      try {
        raw = await readJson(ctx, EVENT_BODY_LIMIT);
      } catch (err) {
        if (isDomainError(err) && err.kind === 'too-large') throw tooLarge(`data is over ${MAX_DATA_BYTES} bytes`);
        throw err;
      }
      // docs/api.md, "Events": a key used within 24 hours returns the first event, whatever this body holds.
      const result = await publishKeyed(events, p.projectId, key || undefined, () =>
        publishAs(events, access, p, bodyAs<PublishRequest>(validator, `${SCHEMA}#/$defs/NewEvent`, raw), key),
      );
      if (result.duplicate) {
        ctx.status = 200;
        ctx.body = { id: result.id, duplicate: true };
      } else {
        ctx.status = 201;
        ctx.body = { id: result.id, cursor: result.cursor };
      }
    });

    router.get('/events', allow(access, READ_RULE), async (ctx) => {
      const p = ctx.state.principal;
      const q = validator.query<EventsQuery>(`${SCHEMA}#/$defs/EventsQuery`, ctx.query);
      const filter = await filterFor(access, p, q);
      const cursors = await events.cursors();
      // Reading backwards (docs/events.md, "Reading backwards"): an extension of version 1.
      if (q.order === 'desc' || q.before !== undefined) {
        if (q.order === 'asc') throw invalid('before reads newest first: leave out order=asc');
        if (q.after !== undefined) throw invalid('after and before cannot be combined: after reads oldest first, before newest first');
        if (wantsStream(ctx)) throw invalid('a live stream reads forwards: order=desc and before are for paged reads');
        const before = await startPosition(events, p, q.before, cursors, 'before');
        await page(ctx, filter, 0, q.limit, { before });
        return;
      }
      if (wantsStream(ctx)) {
        // EventSource resends the original URL on reconnect, so Last-Event-ID wins over `after`.
        const resume = ctx.get('last-event-id') || q.after;
        live(ctx, q, filter, await startPosition(events, p, resume, cursors), cursors);
        return;
      }
      await page(ctx, filter, (await startPosition(events, p, q.after, cursors)) ?? 0, q.limit);
    });
  };
}
