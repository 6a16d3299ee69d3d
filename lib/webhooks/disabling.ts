// The dispatcher stops sending to an endpoint (docs/webhooks.md): its token was revoked or
// expired, the receiver answered 410 Gone, or every attempt failed for `disableAfterMs`. The
// endpoint is marked disabled by the dispatcher and webhook.endpoint.disabled is recorded, once
// per spell however many processes see it.
import type { Logger } from 'pino';
import { type RecordInput, SYSTEM_ACTOR } from '../events/log.ts';
import type { WebhookEndpointRecord, WebhookStore } from './ports.ts';

export type DisableReason = 'failing' | 'gone' | 'token';

const WORDS: Record<DisableReason, string> = {
  failing: 'every attempt failed for too long',
  gone: 'the receiver answered 410 Gone',
  token: 'its token was revoked or expired',
};

export interface EndpointDisablingOptions {
  store: Pick<WebhookStore, 'get' | 'setDisabled'>;
  /** EventLog.record (lib/events/log.ts). */
  events: { record(input: RecordInput): Promise<unknown> };
  log: Logger;
  now: () => number;
}

export class EndpointDisabling {
  constructor(private readonly o: EndpointDisablingOptions) {}

  /** Disables it unless it is gone or already disabled (by anyone), and records why. */
  async disable(e: WebhookEndpointRecord, reason: DisableReason, detail: string): Promise<void> {
    const current = await this.o.store.get(e.projectId, e.id);
    if (!current || current.disabledAt !== null) return;
    const at = this.o.now();
    await this.o.store.setDisabled(e.projectId, e.id, { at, by: 'dispatcher', reason: WORDS[reason] }, at);
    this.o.log.warn({ webhook: e.id, reason, detail }, 'webhook endpoint disabled');
    await this.o.events.record({
      type: 'webhook.endpoint.disabled',
      projectId: e.projectId,
      actor: SYSTEM_ACTOR,
      subject: e.id,
      data: { webhookId: e.id, reason, detail: detail.slice(0, 500) },
      // One event per spell, across processes: the spell is named by when it began.
      dedupeKey: `webhook.endpoint.disabled ${e.id} ${reason} ${e.failingSince ?? current.updatedAt}`,
    });
  }
}
