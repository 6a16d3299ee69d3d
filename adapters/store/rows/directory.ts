// The directory's rows as both engines return them (same tables and columns), and their mapping
// to the domain's records. Lists differ by engine: SQLite joins them into space-separated text,
// PostgreSQL returns arrays; so a row's list columns are typed by the engine (`L`) and each
// adapter turns them into lists itself before the shared mapping.
import type { Grant, Inbox, InboxMode, SessionRecord, TokenRecord } from '../../../lib/directory/types.ts';

/** An inbox with its addresses (`L`: the engine's list). */
export interface InboxRow<L> {
  id: string;
  project_id: string;
  imap_user: string;
  mode: InboxMode;
  created_at: number;
  addresses: L;
}

/** An inbox row with the member's grant on it (listGrants). */
export type GrantedInboxRow<L> = InboxRow<L> & { role: string; grant_created_at: number };

/** A token with the inboxes it is narrowed to, null for none (`L`: the engine's list). */
export interface TokenRow<L> {
  id: string;
  project_id: string;
  member_id: string;
  scopes: string;
  secret_hash: Buffer;
  created_at: number;
  expires_at: number | null;
  revoked_at: number | null;
  inboxes: L | null;
}

export interface SessionRow {
  id: string;
  member_id: string;
  secret_hash: Buffer;
  created_at: number;
  expires_at: number;
  revoked_at: number | null;
}

/** The record of a row whose addresses the engine's adapter has read as `addresses`. */
export const inboxOf = (r: InboxRow<unknown>, addresses: string[]): Inbox => ({
  id: r.id,
  projectId: r.project_id,
  imapUser: r.imap_user,
  mode: r.mode,
  createdAt: r.created_at,
  addresses,
});

export const grantOf = (memberId: string, r: GrantedInboxRow<unknown>): Grant => ({
  memberId,
  inboxId: r.id,
  role: r.role,
  createdAt: r.grant_created_at,
});

/** The record of a row whose narrowing the engine's adapter has read as `inboxes`. */
export const tokenOf = (r: TokenRow<unknown>, inboxes: string[] | null): TokenRecord => ({
  id: r.id,
  projectId: r.project_id,
  memberId: r.member_id,
  scopes: r.scopes ? r.scopes.split(' ') : [],
  inboxes,
  secretHash: r.secret_hash,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  revokedAt: r.revoked_at,
});

export const toSession = (r: SessionRow): SessionRecord => ({
  id: r.id,
  memberId: r.member_id,
  secretHash: r.secret_hash,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
  revokedAt: r.revoked_at,
});
