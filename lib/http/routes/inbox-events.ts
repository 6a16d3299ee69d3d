// GET /inboxes/{inbox}/events (docs/api.md, "Inbox change stream"): the inbox's live changes as Server-Sent Events.
import type { Access } from '../../auth/access.ts';
import type { Config } from '../../config.ts';
import type { MailService } from '../../mail/service.ts';
import { publicChange, type LiveChange } from '../../mail/types.ts';
import { type Unwatch } from '../../mail/ports.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';
import { framer, SseStream } from '../sse.ts';
import type { StreamGuard } from '../stream-guard.ts';
import type { StreamQuota } from '../stream-quota.ts';

// Every subscriber of an inbox receives the same change object: serialize it once for all,
// as docs/api.md, "LiveChange" has it (without the internal `at`).
const frameOf = framer((change: LiveChange) => ({ event: change.type, data: JSON.stringify(publicChange(change)) }));

/** Why a stream ends when other processes' changes may have been lost on the way here. */
const GAP = 'changes may have been missed (the link between Postern processes was interrupted); reconnect and read the inbox again';

export function inboxEventRoutes(access: Access, mail: MailService, stream: Config['stream'], guard: StreamGuard, quota: StreamQuota) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/events', allow(access, DEFAULT_RULE), async (ctx) => {
      // Access is settled before anything is streamed: errors are still plain JSON responses.
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      const options = { heartbeatMs: stream.heartbeatMs, maxDurationMs: stream.maxDurationMs };
      // HEAD: the stream's headers, and no watcher started for a stream that never runs.
      if (ctx.method === 'HEAD') {
        new SseStream(ctx, options);
        return;
      }
      // Counted before a watcher is started for it: over a cap, the caller gets a 429 and no
      // connection of the pool is taken.
      const release = quota.take('inbox', ctx.state.principal);
      const pending: string[] = [];
      let sse: SseStream | null = null;
      let missed = false;
      let unwatch: Unwatch;
      try {
        unwatch = await mail.watch(
          inbox,
          (change) => {
            if (sse) sse.enqueue(frameOf(change));
            else pending.push(frameOf(change));
          },
          () => {
            missed = true;
            sse?.endWith(GAP);
          },
        );
      } catch (err) {
        release();
        throw err;
      }
      if (ctx.req.destroyed) {
        release();
        await unwatch();
        return;
      }
      sse = new SseStream(ctx, options);
      sse.onClose(() => {
        release();
        void unwatch();
      });
      // While it runs, the stream is re-checked as a new request would be (same rule, same inbox
      // check): a revoked or expired credential (401), a lost scope (403) or a withdrawn grant
      // (404) ends it with that error.
      const inboxId = inbox.id;
      guard.watch(ctx, sse, async (now) => {
        access.authorize(now.principal, DEFAULT_RULE);
        await now.once(`inbox|${inboxId}`, () => access.inboxAccess(now.principal, inboxId, 'messages:read'));
      });
      for (const text of pending) sse.write(text);
      if (missed) sse.endWith(GAP);
    });
  };
}
