// The one place that decides who the caller is and what they may do. Every endpoint goes
// through `authenticate*`, then `authorize` for its operation, then `inboxAccess` for a path
// inbox. Grants are read at every request, so a revoked grant takes effect at once.
import type { DirectoryStore } from '../directory/ports.ts';
import type { Inbox, TokenRecord } from '../directory/types.ts';
import { forbidden, notFound, unauthenticated } from '../errors.ts';
import { isId } from '../ids.ts';
import { parseSession, parseToken, secretMatches } from './credentials.ts';
import { isScope, roleAllows, type MailScope, type Scope } from './scopes.ts';

export interface Principal {
  kind: 'token' | 'session';
  /** tok_… or ses_… */
  credentialId: string;
  /** Who acts, as events record it: the token for tokens, the member for sessions. */
  actor: string;
  projectId: string;
  memberId: string;
  /** A token's scopes; empty for sessions, whose reach is set per operation. */
  scopes: ReadonlySet<Scope>;
  /** Inboxes a token is narrowed to; null when not narrowed. */
  inboxes: ReadonlySet<string> | null;
}

/** What an operation requires (docs/api.md, "Endpoints summary"): a token scope (or any token), and whether sessions may call it. */
export interface AccessRule {
  token: Scope | 'any';
  session: boolean;
}

function tokenPrincipal(token: TokenRecord): Principal {
  return {
    kind: 'token',
    credentialId: token.id,
    actor: token.id,
    projectId: token.projectId,
    memberId: token.memberId,
    scopes: new Set(token.scopes.filter(isScope)),
    inboxes: token.inboxes ? new Set(token.inboxes) : null,
  };
}

/** How often a session's last use is written: the member's list shows it to the minute. */
const SESSION_USE_EVERY_MS = 60_000;
/** Sessions whose last write this process remembers; past this, it starts over (a write each). */
const SESSION_USE_KEPT = 10_000;

export class Access {
  /** When this process last wrote each session's last use. */
  private readonly sessionUse = new Map<string, number>();

  constructor(
    private readonly store: DirectoryStore,
    private readonly now: () => number = Date.now,
  ) {}

  /** `Authorization: Bearer svc_…` on {base_url}. */
  async authenticateToken(authorization: string | undefined): Promise<Principal> {
    if (!authorization) throw unauthenticated('missing credential: send Authorization: Bearer <API token>');
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!m) throw unauthenticated('malformed Authorization header: expected Bearer <API token>');
    const parsed = parseToken(m[1]!);
    if (!parsed) throw unauthenticated('malformed API token');
    const token = await this.store.getToken(parsed.id);
    if (!token || !secretMatches(parsed.secret, token.secretHash)) throw unauthenticated('invalid API token');
    if (token.revokedAt !== null) throw unauthenticated('API token revoked');
    if (token.expiresAt !== null && token.expiresAt <= this.now()) throw unauthenticated('API token expired');
    return tokenPrincipal(token);
  }

  /**
   * What a token may do now, by its id, without its secret: for work done later on its behalf
   * (a webhook's deliveries). Null once it is revoked, expired or gone.
   */
  async principalOfToken(id: string): Promise<Principal | null> {
    const token = await this.store.getToken(id);
    if (!token || token.revokedAt !== null || (token.expiresAt !== null && token.expiresAt <= this.now())) return null;
    return tokenPrincipal(token);
  }

  /** `x-svc-token: <session token>` on {app_url}. */
  async authenticateSession(header: string | undefined): Promise<Principal> {
    if (!header) throw unauthenticated('missing credential: send x-svc-token: <session access token>');
    const parsed = parseSession(header.trim());
    if (!parsed) throw unauthenticated('malformed session token');
    const session = await this.store.getSession(parsed.id);
    if (!session || !secretMatches(parsed.secret, session.secretHash)) throw unauthenticated('invalid session token');
    if (session.revokedAt !== null) throw unauthenticated('session ended');
    if (session.expiresAt <= this.now()) throw unauthenticated('session expired');
    const member = await this.store.getMember(session.memberId);
    if (!member) throw unauthenticated('invalid session token');
    await this.noteSessionUse(session.id);
    return {
      kind: 'session',
      credentialId: session.id,
      actor: member.id,
      projectId: member.projectId,
      memberId: member.id,
      scopes: new Set(),
      inboxes: null,
    };
  }

  /** Writes the session's last use at most once a minute (per process): not a write per request. */
  private async noteSessionUse(id: string): Promise<void> {
    const now = this.now();
    const last = this.sessionUse.get(id);
    if (last !== undefined && now - last < SESSION_USE_EVERY_MS) return;
    if (this.sessionUse.size >= SESSION_USE_KEPT) this.sessionUse.clear();
    this.sessionUse.set(id, now);
    await this.store.touchSession(id, now);
  }

  /** 403 unless the caller's kind of credential and scopes allow the operation. */
  authorize(p: Principal, rule: AccessRule): void {
    if (p.kind === 'session') {
      if (!rule.session) throw forbidden('this operation is for API tokens only');
      return;
    }
    if (rule.token !== 'any' && !p.scopes.has(rule.token)) {
      throw forbidden(`token lacks the ${rule.token} scope`);
    }
  }

  /** True when the caller holds the scope (sessions hold none). */
  hasScope(p: Principal, scope: Scope): boolean {
    return p.kind === 'token' && p.scopes.has(scope);
  }

  /**
   * The inbox behind a path id, if the caller may use it; 404 otherwise, whether it does not
   * exist or is someone else's. `need` is the mail capability the operation uses; the caller's
   * role in the inbox must allow it (403 when it does not).
   */
  async inboxAccess(p: Principal, inboxId: string, need: MailScope): Promise<{ inbox: Inbox; role: string }> {
    // Built only when thrown: an error's stack trace is costly on the hottest path there is.
    const hidden = () => notFound('inbox not found');
    if (!isId('ibx', inboxId)) throw hidden();
    if (p.inboxes && !p.inboxes.has(inboxId)) throw hidden();
    const grant = await this.store.getGrant(p.memberId, inboxId);
    if (!grant) throw hidden();
    const inbox = await this.store.getInbox(inboxId);
    if (!inbox || inbox.projectId !== p.projectId) throw hidden();
    if (!roleAllows(grant.role, need)) {
      throw forbidden(`your role in this inbox (${grant.role}) does not allow ${need}`);
    }
    return { inbox, role: grant.role };
  }

  /** The inboxes the caller may use, with its role in each (GET /inboxes). */
  async grantedInboxes(p: Principal): Promise<Array<{ inbox: Inbox; role: string }>> {
    const all = await this.store.listGrants(p.memberId);
    return all
      .filter(({ inbox }) => inbox.projectId === p.projectId && (!p.inboxes || p.inboxes.has(inbox.id)))
      .map(({ grant, inbox }) => ({ inbox, role: grant.role }));
  }
}
