// Who and what Postern knows about: projects, their members, inboxes, who may use which inbox,
// and the credentials members act through. Times are milliseconds since the epoch.

export type InboxMode = 'compatible' | 'zero-access';
export const INBOX_MODES: readonly InboxMode[] = ['compatible', 'zero-access'];

export function isInboxMode(value: string): value is InboxMode {
  return (INBOX_MODES as readonly string[]).includes(value);
}

export interface Project {
  id: string;
  name: string;
  createdAt: number;
}

export interface Member {
  id: string;
  projectId: string;
  email: string;
  createdAt: number;
}

export interface Inbox {
  id: string;
  projectId: string;
  imapUser: string;
  /** Addresses the inbox receives on and may send as; the first is its main address. */
  addresses: string[];
  mode: InboxMode;
  createdAt: number;
}

export interface Grant {
  memberId: string;
  inboxId: string;
  role: string;
  createdAt: number;
}

export interface TokenRecord {
  id: string;
  projectId: string;
  memberId: string;
  scopes: string[];
  /** null: every inbox the member may use; otherwise only these. */
  inboxes: string[] | null;
  secretHash: Buffer;
  createdAt: number;
  expiresAt: number | null;
  revokedAt: number | null;
}

export interface SessionRecord {
  id: string;
  memberId: string;
  secretHash: Buffer;
  createdAt: number;
  expiresAt: number;
  revokedAt: number | null;
}
