// What an endpoint may receive is what its creating token may read now (docs/webhooks.md): the
// token's standing, read at most once a second per token, and GET /events' filter made from it.
import type { Access, Principal } from '../auth/access.ts';
import type { EventFilter } from '../events/query.ts';
import type { Visibility } from '../events/types.ts';
import type { WebhookEndpointRecord } from './ports.ts';

/** A token's standing is read again after this long (revocation reaches deliveries within it). */
export const STANDING_TTL_MS = 1000;

export interface Standing {
  /** Null: the token is revoked, expired, of another project, or without events:read. */
  principal: Principal | null;
  /** Inboxes it may read now (ids). */
  readable: Set<string>;
  at: number;
}

/** What of Access (lib/auth/access.ts) a standing is read through. */
export interface StandingAccess {
  principalOfToken: Access['principalOfToken'];
  hasScope: Access['hasScope'];
  grantedInboxes(p: Principal): Promise<Array<{ inbox: { id: string } }>>;
}

export class TokenStandings {
  private readonly standings = new Map<string, Standing>();

  constructor(
    private readonly access: StandingAccess,
    private readonly now: () => number,
  ) {}

  /** The token's standing as last read, when that is recent (no await: most attempts use it). */
  recent(e: WebhookEndpointRecord): Standing | null {
    const known = this.standings.get(e.tokenId);
    return known && this.now() - known.at < STANDING_TTL_MS ? known : null;
  }

  /** The endpoint's token as it stands now (read at most once a second per token). */
  async of(e: WebhookEndpointRecord): Promise<Standing> {
    const known = this.recent(e);
    if (known) return known;
    const principal = await this.access.principalOfToken(e.tokenId);
    const usable = principal !== null && principal.projectId === e.projectId && this.access.hasScope(principal, 'events:read');
    const readable = usable ? new Set((await this.access.grantedInboxes(principal)).map((g) => g.inbox.id)) : new Set<string>();
    const s: Standing = { principal: usable ? principal : null, readable, at: this.now() };
    this.standings.set(e.tokenId, s);
    return s;
  }

  /** GET /events' filter for the endpoint's token, narrowed to the endpoint's types and inboxes. */
  filterOf(e: WebhookEndpointRecord, principal: Principal, readable: Set<string>): EventFilter {
    const visibilities: Visibility[] = ['inbox'];
    if (this.access.hasScope(principal, 'project:read')) visibilities.push('project');
    return {
      projectId: e.projectId,
      inboxes: e.inboxes ? e.inboxes.filter((i) => readable.has(i)) : null,
      allowedInboxes: [...readable],
      visibilities,
      types: e.types,
      redactActor: false,
    };
  }
}
