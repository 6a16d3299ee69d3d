// What staff do to webhook endpoints from the server (`postern admin webhook list|disable|enable`):
// every project's endpoints at a glance, stopping one without its owner's token, and sending to
// it again once staff are satisfied (its owner cannot, docs/webhooks.md).
import { conflict, notFound } from '../errors.ts';
import { isId } from '../ids.ts';
import type { EventLog } from '../events/log.ts';
import { SYSTEM_ACTOR } from '../events/log.ts';
import type { WebhookStore } from './ports.ts';

export interface StaffWebhook {
  id: string;
  projectId: string;
  tokenId: string;
  url: string;
  types: string[] | null;
  inboxes: string[] | null;
  enabled: boolean;
  /** `owner`, `dispatcher` or `staff`; null while enabled. */
  disabledBy: string | null;
  disabledAt: string | null;
  disabledReason: string | null;
  failingSince: string | null;
  createdAt: string;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export class WebhookStaff {
  constructor(
    private readonly store: WebhookStore,
    private readonly events: EventLog,
    private readonly now: () => number = Date.now,
  ) {}

  /** Every endpoint, or one project's, oldest first. */
  async list(projectId?: string): Promise<StaffWebhook[]> {
    const all = projectId ? await this.store.list(projectId) : await this.store.all();
    return all.map((e) => ({
      id: e.id,
      projectId: e.projectId,
      tokenId: e.tokenId,
      url: e.url,
      types: e.types,
      inboxes: e.inboxes,
      enabled: e.disabledAt === null,
      disabledBy: e.disabledBy,
      disabledAt: iso(e.disabledAt),
      disabledReason: e.disabledReason,
      failingSince: iso(e.failingSince),
      createdAt: iso(e.createdAt)!,
    }));
  }

  /**
   * Disables it (its deliveries wait) and records webhook.endpoint.disabled. Its owner cannot
   * enable it again (docs/webhooks.md): one already disabled (by its owner or after failing) is
   * marked as staff's too.
   */
  async disable(id: string, reason: string): Promise<StaffWebhook> {
    const e = await this.find(id);
    if (e.disabledBy !== 'staff') {
      const at = this.now();
      await this.store.setDisabled(e.projectId, e.id, { at, by: 'staff', reason: `disabled by staff: ${reason}` }, at);
      await this.events.record({
        type: 'webhook.endpoint.disabled',
        projectId: e.projectId,
        actor: SYSTEM_ACTOR,
        subject: e.id,
        data: { webhookId: e.id, reason: 'staff', detail: reason.slice(0, 500) },
      });
    }
    return (await this.list(e.projectId)).find((x) => x.id === id)!;
  }

  /**
   * Enables an endpoint staff disabled: its deliveries are sent again (those waiting first). One
   * enabled already is left so; one its owner or the dispatcher disabled is its owner's to enable
   * (PATCH {enabled: true}), not staff's, so staff do not override the owner's choice.
   */
  async enable(id: string): Promise<StaffWebhook> {
    const e = await this.find(id);
    if (e.disabledAt !== null) {
      if (e.disabledBy !== 'staff') {
        throw conflict(
          `webhook endpoint ${id} was disabled by its ${e.disabledBy === 'owner' ? 'owner' : 'dispatcher'}, not by staff; its owner enables it`,
        );
      }
      await this.store.setDisabled(e.projectId, e.id, null, this.now());
    }
    return (await this.list(e.projectId)).find((x) => x.id === id)!;
  }

  private async find(id: string) {
    const e = isId('whk', id) ? (await this.store.all()).find((x) => x.id === id) : undefined;
    if (!e) throw notFound(`no webhook endpoint ${id}`);
    return e;
  }
}
