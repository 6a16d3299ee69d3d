// Token scopes (docs/api.md, "Authentication", rule 3) and inbox roles. A role bounds what any credential of
// the member can do in that inbox; a token's scopes narrow it further.

export const MAIL_SCOPES = ['messages:read', 'content:read', 'flags:write', 'send'] as const;
export const PROJECT_SCOPES = ['events:write', 'events:read', 'project:read', 'audit:read', 'webhooks:write'] as const;
export const SCOPES = [...MAIL_SCOPES, ...PROJECT_SCOPES] as const;

export type MailScope = (typeof MAIL_SCOPES)[number];
export type Scope = (typeof SCOPES)[number];

export function isScope(value: string): value is Scope {
  return (SCOPES as readonly string[]).includes(value);
}

/**
 * Roles in an inbox. The contract names `owner` (docs/api.md, "InboxGrant") and leaves the rest open; see docs/access.md.
 * - owner:  everything, and is the inbox's accountable person
 * - member: reads, changes flags, sends
 * - reader: reads only (metadata, and decrypted content through a content:read token)
 */
export const ROLES = ['owner', 'member', 'reader'] as const;
export type Role = (typeof ROLES)[number];

const ROLE_ALLOWS: Record<Role, ReadonlySet<MailScope>> = {
  owner: new Set(MAIL_SCOPES),
  member: new Set(MAIL_SCOPES),
  reader: new Set<MailScope>(['messages:read', 'content:read']),
};

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

/** A role stored before a role was retired allows nothing rather than everything. */
export function roleAllows(role: string, what: MailScope): boolean {
  return isRole(role) && ROLE_ALLOWS[role].has(what);
}
