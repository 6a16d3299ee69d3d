// Token scopes (docs/api.md, "Authentication", rule 3) and inbox roles. A role bounds what any credential of
// the member can do in that inbox; a token's scopes narrow it further.

// messages:write (an extension of version 1: docs/organize.md) files a message into and out of labels. It is
// granted only when asked for at token creation: no token made before it holds it. drafts:write (an extension
// too: docs/sending.md, "Drafts") writes drafts without sending them, for an agent that proposes what a person sends.
// messages:destroy (also an extension: docs/organize.md, "Delete forever") expunges mail for good; no other scope implies it.
export const MAIL_SCOPES = [
  'messages:read',
  'content:read',
  'flags:write',
  'messages:write',
  'messages:destroy',
  'drafts:write',
  'send',
] as const;
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
 * - member: reads, changes flags, files messages into labels (messages:write), deletes forever (messages:destroy), writes drafts, sends
 * - reader: reads only (metadata, and decrypted content through a content:read token)
 */
export const ROLES = ['owner', 'member', 'reader'] as const;
export type Role = (typeof ROLES)[number];

const ROLE_ALLOWS: Record<Role, ReadonlySet<MailScope>> = {
  owner: new Set(MAIL_SCOPES),
  member: new Set(MAIL_SCOPES),
  reader: new Set<MailScope>(['messages:read', 'content:read']), // never organizes: docs/organize.md
};

export function isRole(value: string): value is Role {
  return (ROLES as readonly string[]).includes(value);
}

/** A role stored before a role was retired allows nothing rather than everything. */
export function roleAllows(role: string, what: MailScope): boolean {
  return isRole(role) && ROLE_ALLOWS[role].has(what);
}
