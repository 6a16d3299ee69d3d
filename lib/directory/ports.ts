// The port the directory needs from storage. Asynchronous so a PostgreSQL adapter can implement
// it without changing the domain; the SQLite adapter answers synchronously underneath.
import type { Grant, Inbox, Member, Project, SessionRecord, TokenRecord } from './types.ts';

export interface DirectoryStore {
  createProject(project: Project): Promise<void>;
  getProject(id: string): Promise<Project | null>;
  /** Every project, by id. */
  listProjects(): Promise<Project[]>;
  /**
   * Deletes the project and everything that names it, in every port, in one transaction: members
   * and their credentials, passkeys and keys; inboxes with their keys and what the mail index,
   * outbox and sealing kept of them; events, event types and idempotency keys; webhooks and their
   * deliveries. Removed inboxes stay tombstoned in the mail index (as after `dropInbox`). Null
   * when there was no such project.
   */
  deleteProject(id: string, at: number): Promise<ProjectErased | null>;

  createMember(member: Member): Promise<void>;
  getMember(id: string): Promise<Member | null>;
  /** The project's members, by id. */
  listMembers(projectId: string): Promise<Member[]>;
  /**
   * Deletes the member with their grants, sessions, passkeys and invites, member key and key
   * backup, and tokens (with the webhooks those tokens made), in one transaction. The project's
   * events and mail stay. False when there was no such member.
   */
  deleteMember(id: string): Promise<boolean>;

  /** Fails with a DuplicateError when the IMAP user or an address is already taken. */
  createInbox(inbox: Inbox): Promise<void>;
  getInbox(id: string): Promise<Inbox | null>;
  /** The inbox receiving on this address (compared without regard to case), if any. */
  findInboxByAddress(address: string): Promise<Inbox | null>;
  /** The inbox of this IMAP user (compared case-insensitively, as Dovecot does), if any. */
  getInboxByImapUser(imapUser: string): Promise<Inbox | null>;
  /**
   * Deletes the inbox, its addresses and grants. A token narrowed to this inbox alone is revoked
   * (dropping its only narrowing would widen it to every inbox); one narrowed to several loses
   * this one. True when the inbox existed.
   */
  deleteInbox(id: string, at: number): Promise<boolean>;
  /** Every inbox of every project, by id: what the mail watch covers. */
  listInboxes(): Promise<Inbox[]>;
  /**
   * Goes up whenever an inbox is added or removed, by any process sharing the store: one cheap
   * read tells a running server whether `listInboxes` changed.
   */
  inboxesVersion(): Promise<number>;

  /** Creates or replaces the member's role in the inbox. */
  putGrant(grant: Grant): Promise<void>;
  /** True when a grant existed. */
  deleteGrant(memberId: string, inboxId: string): Promise<boolean>;
  getGrant(memberId: string, inboxId: string): Promise<Grant | null>;
  /** The member's grants joined with their inboxes, in grant order. */
  listGrants(memberId: string): Promise<Array<{ grant: Grant; inbox: Inbox }>>;

  createToken(token: TokenRecord): Promise<void>;
  getToken(id: string): Promise<TokenRecord | null>;
  /** True when a live token was revoked now. */
  revokeToken(id: string, at: number): Promise<boolean>;
  /** Tokens of the project and, when given, of one member; revoked and expired ones too, by id. */
  listTokens(filter: CredentialFilter): Promise<TokenRecord[]>;

  createSession(session: SessionRecord): Promise<void>;
  getSession(id: string): Promise<SessionRecord | null>;
  /** Sessions of the project and, when given, of one member; ended and expired ones too, by id. */
  listSessions(filter: CredentialFilter): Promise<SessionRecord[]>;
  /** True when a session not yet ended was ended now (an expired one too: it stays ended). */
  revokeSession(id: string, at: number): Promise<boolean>;
  /** Records a request made with the session at `at` (never moving its last use back). */
  touchSession(id: string, at: number): Promise<void>;
}

/** Whose credentials a list covers. */
export interface CredentialFilter {
  projectId: string;
  memberId?: string;
}

/** What deleting a project removed, by kind. */
export interface ProjectErased {
  projects: number;
  members: number;
  inboxes: number;
  tokens: number;
  sessions: number;
  webhooks: number;
  events: number;
}

/** A unique constraint refused the write; `what` names the field in the caller's terms. */
export class DuplicateError extends Error {
  constructor(readonly what: string) {
    super(`${what} already exists`);
    this.name = 'DuplicateError';
  }
}

/** The mail server's users (adapters/imap/users.ts): an inbox is added only over one that exists. */
export interface MailUsers {
  /** False when the mail server has no such user; throws (503) when it cannot be asked. */
  exists(user: string): Promise<boolean>;
}
