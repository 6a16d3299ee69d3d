// An endpoint's signing secrets for its deliveries' headers (docs/webhooks.md), opened once per
// change of the endpoint and again when a rotation's overlap ends, not once per attempt.
import type { WebhookEndpoints } from './endpoints.ts';
import type { WebhookEndpointRecord } from './ports.ts';

export class SigningSecrets {
  private readonly opened = new Map<string, { updatedAt: number; until: number; list: string[] }>();

  constructor(
    private readonly endpoints: Pick<WebhookEndpoints, 'signingSecrets'>,
    private readonly now: () => number,
  ) {}

  of(e: WebhookEndpointRecord): string[] {
    const now = this.now();
    const known = this.opened.get(e.id);
    if (known && known.updatedAt === e.updatedAt && now < known.until) return known.list;
    const list = this.endpoints.signingSecrets(e, now);
    const until = e.previousExpiresAt !== null && e.previousExpiresAt > now ? e.previousExpiresAt : Number.POSITIVE_INFINITY;
    this.opened.set(e.id, { updatedAt: e.updatedAt, until, list });
    return list;
  }
}
