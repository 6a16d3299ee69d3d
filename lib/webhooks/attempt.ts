// One attempt of one delivery (docs/webhooks.md): the endpoint's token checked again, the body
// made and signed, the POST, and what its answer comes to: delivered, retried on the schedule
// (lib/webhooks/retry.ts; 429 and 503 honour Retry-After), given up, or the endpoint disabled
// (410 Gone, or its token revoked). The answer is the outcome to write; nothing is written here.
import type { Cursors } from '../events/cursor.ts';
import type { EventLog } from '../events/log.ts';
import type { StoredEvent } from '../events/types.ts';
import type { Config } from '../config.ts';
import type { WebhookMetrics } from '../metrics.ts';
import { deliveryBody } from './delivery-body.ts';
import type { DisableReason } from './disabling.ts';
import { handedBack, outcomeOf } from './outcomes.ts';
import { nextAttempt } from './retry.ts';
import { deliveryHeaders } from './signature.ts';
import type { SigningSecrets } from './signing-secrets.ts';
import type { DeliveryOutcome, DeliveryRecord, Poster, WebhookEndpointRecord, WebhookStore } from './ports.ts';
import type { TokenStandings } from './token-standing.ts';

export interface AttemptsOptions {
  /** The endpoint as this process knows it (enabled), else null. */
  known: (id: string) => WebhookEndpointRecord | null;
  store: Pick<WebhookStore, 'get'>;
  events: Pick<EventLog, 'cursors'>;
  standings: Pick<TokenStandings, 'recent' | 'of'>;
  secrets: Pick<SigningSecrets, 'of'>;
  /** Stops sending to the endpoint (lib/webhooks/disabling.ts, through the dispatcher's cache). */
  disable: (e: WebhookEndpointRecord, reason: DisableReason, detail: string) => Promise<void>;
  post: Poster;
  settings: Pick<Config['webhooks'], 'scheduleMs'>;
  metrics: WebhookMetrics;
  /** The lease name the outcomes carry. */
  owner: string;
  now: () => number;
  random?: () => number;
}

export class Attempts {
  private cursors: Cursors | null = null;

  constructor(private readonly o: AttemptsOptions) {}

  /** One attempt of `d`, whose event is `ev` (null: no longer in the log); `signal` abandons it. */
  async attempt(d: DeliveryRecord, ev: StoredEvent | null, signal: AbortSignal): Promise<DeliveryOutcome> {
    const o = this.o;
    const e = o.known(d.endpointId) ?? (await o.store.get(d.projectId, d.endpointId));
    if (!e || e.disabledAt !== null) return handedBack(d, o.owner, o.now());
    // The token's standing as last read, when that is recent (no await: most attempts use it).
    const standing = o.standings.recent(e) ?? (await o.standings.of(e));
    if (!standing.principal) {
      await o.disable(e, 'token', 'the token that created it was revoked or expired');
      return handedBack(d, o.owner, o.now());
    }
    if (ev === null) {
      o.metrics.attempted('failed');
      return outcomeOf(d, o.owner, 'failed', d.nextAttemptAt, o.now(), null, 'the event is no longer in the log', null, null);
    }
    // The event's containerid is its row's inbox (lib/events/log.ts writes it from the same value).
    if (ev.inboxId !== null && !standing.readable.has(ev.inboxId)) {
      o.metrics.attempted('failed');
      return outcomeOf(
        d,
        o.owner,
        'failed',
        d.nextAttemptAt,
        o.now(),
        null,
        "the endpoint's token may no longer read this inbox",
        null,
        null,
      );
    }
    this.cursors ??= await o.events.cursors();
    const body = deliveryBody(this.cursors, d, ev.json, o.now());
    const headers = deliveryHeaders(o.secrets.of(e), d.eventId, body, new Date(o.now()));
    const r = await o.post(e.url, headers, body, signal, e.projectId);
    if (!r.ok && r.cancelled) return handedBack(d, o.owner, o.now());
    const at = o.now();
    const attempts = d.attempts + 1;
    if (r.ok && r.status >= 200 && r.status < 300) {
      o.metrics.attempted('delivered');
      return outcomeOf(d, o.owner, 'delivered', d.nextAttemptAt, at, r.status, null, r.ms, 'up');
    }
    const status = r.ok ? r.status : null;
    const error = r.ok ? `the receiver answered HTTP ${r.status}` : r.error;
    if (status === 410) {
      o.metrics.attempted('gone');
      await o.disable(e, 'gone', 'the receiver answered 410 Gone');
      // Kept for when the endpoint is enabled again.
      return outcomeOf(d, o.owner, 'pending', at, at, status, error, r.ms, 'down');
    }
    const retryAfter = r.ok && (status === 429 || status === 503) ? r.retryAfterSeconds : null;
    const next = nextAttempt({ scheduleMs: o.settings.scheduleMs, random: o.random }, attempts, at, retryAfter);
    o.metrics.attempted(next === null ? 'failed' : 'retrying');
    return outcomeOf(d, o.owner, next === null ? 'failed' : 'pending', next ?? at, at, status, error, r.ms, 'down');
  }
}
