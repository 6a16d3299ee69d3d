// DirectoryStore on SQLite.
import { DuplicateError, type CredentialFilter, type DirectoryStore, type ProjectErased } from '../../../lib/directory/ports.ts';
import type { Grant, Inbox, Member, Project, SessionRecord, TokenRecord } from '../../../lib/directory/types.ts';
import type { Statement } from 'better-sqlite3';
import { isUniqueViolation, rowOrNull, type Db } from './db.ts';
import {
  grantOf,
  inboxOf,
  tokenOf,
  toSession,
  type GrantedInboxRow,
  type InboxRow,
  type SessionRow,
  type TokenRow,
} from '../rows/directory.ts';
import { KeptRows } from './kept-rows.ts';
import { MEMBER_ERASE, PROJECT_ERASE, sqliteText, tally, type EraseStep } from '../erase.ts';

const INBOX_SELECT = `SELECT i.id, i.project_id, i.imap_user, i.mode, i.created_at,
  (SELECT group_concat(address, ' ') FROM (SELECT address FROM inbox_addresses a
     WHERE a.inbox_id = i.id ORDER BY position)) AS addresses
  FROM inboxes i`;

// Lists come back as space-joined text on this engine (group_concat). Addresses never contain
// spaces (they are validated as e-mail addresses at the edge).
const toInbox = (r: InboxRow<string>): Inbox => inboxOf(r, r.addresses ? r.addresses.split(' ') : []);

const toToken = (r: TokenRow<string>): TokenRecord => tokenOf(r, r.inboxes === null ? null : r.inboxes.split(' '));

const TOKEN_SELECT = `SELECT t.*, CASE WHEN EXISTS (SELECT 1 FROM token_inboxes WHERE token_id = t.id)
  THEN (SELECT group_concat(inbox_id, ' ') FROM token_inboxes WHERE token_id = t.id) END AS inboxes
  FROM tokens t`;

export class SqliteDirectoryStore implements DirectoryStore {
  private readonly q;
  /** The token, grant and inbox every request reads; every write below that may change one drops them. */
  private readonly kept: KeptRows;

  constructor(private readonly db: Db) {
    this.kept = new KeptRows(db);
    this.q = {
      insertProject: db.prepare('INSERT INTO projects (id, name, created_at) VALUES (?, ?, ?)'),
      getProject: db.prepare('SELECT id, name, created_at AS createdAt FROM projects WHERE id = ?'),
      insertMember: db.prepare('INSERT INTO members (id, project_id, email, created_at) VALUES (?, ?, ?, ?)'),
      getMember: db.prepare('SELECT id, project_id AS projectId, email, created_at AS createdAt FROM members WHERE id = ?'),
      insertInbox: db.prepare('INSERT INTO inboxes (id, project_id, imap_user, mode, created_at) VALUES (?, ?, ?, ?, ?)'),
      insertAddress: db.prepare('INSERT INTO inbox_addresses (address, inbox_id, position) VALUES (?, ?, ?)'),
      getInbox: db.prepare(`${INBOX_SELECT} WHERE i.id = ?`),
      // lower() on both sides uses the index of migration 010 (ASCII case only, as SQLite's lower()).
      findInboxByAddress: db.prepare(
        `${INBOX_SELECT} WHERE i.id = (SELECT inbox_id FROM inbox_addresses WHERE lower(address) = lower(?) LIMIT 1)`,
      ),
      getInboxByImapUser: db.prepare(`${INBOX_SELECT} WHERE i.imap_user = ? COLLATE NOCASE`),
      listInboxes: db.prepare(`${INBOX_SELECT} ORDER BY i.id`),
      putGrant: db.prepare(`INSERT INTO grants (member_id, inbox_id, role, created_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (member_id, inbox_id) DO UPDATE SET role = excluded.role`),
      deleteGrant: db.prepare('DELETE FROM grants WHERE member_id = ? AND inbox_id = ?'),
      getGrant: db.prepare(`SELECT member_id AS memberId, inbox_id AS inboxId, role, created_at AS createdAt
        FROM grants WHERE member_id = ? AND inbox_id = ?`),
      listGrants: db.prepare(`SELECT g.role, g.created_at AS grant_created_at, x.*
        FROM grants g JOIN (${INBOX_SELECT}) x ON x.id = g.inbox_id
        WHERE g.member_id = ? ORDER BY g.created_at, x.id`),
      insertToken: db.prepare(`INSERT INTO tokens
        (id, project_id, member_id, scopes, secret_hash, created_at, expires_at, revoked_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
      insertTokenInbox: db.prepare('INSERT INTO token_inboxes (token_id, inbox_id) VALUES (?, ?)'),
      getToken: db.prepare(`${TOKEN_SELECT} WHERE t.id = ?`),
      listTokens: db.prepare(
        `${TOKEN_SELECT} WHERE t.project_id = @projectId AND (@memberId IS NULL OR t.member_id = @memberId) ORDER BY t.id`,
      ),
      revokeToken: db.prepare('UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
      insertSession: db.prepare(`INSERT INTO sessions (id, member_id, secret_hash, created_at, expires_at, revoked_at)
        VALUES (?, ?, ?, ?, ?, ?)`),
      getSession: db.prepare('SELECT * FROM sessions WHERE id = ?'),
      listSessions: db.prepare(`SELECT s.* FROM sessions s JOIN members m ON m.id = s.member_id
        WHERE m.project_id = @projectId AND (@memberId IS NULL OR s.member_id = @memberId) ORDER BY s.id`),
      revokeSession: db.prepare('UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
      touchSession: db.prepare('UPDATE sessions SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)'),
      listProjects: db.prepare('SELECT id, name, created_at AS createdAt FROM projects ORDER BY id'),
      listMembers: db.prepare(
        'SELECT id, project_id AS projectId, email, created_at AS createdAt FROM members WHERE project_id = ? ORDER BY id',
      ),
    };
  }

  // Prepared on first use, like versionQuery: they name tables older schemas do not have.
  private erasers: { project: (id: string, at: number) => ProjectErased | null; member: (id: string) => boolean } | null = null;

  private erase() {
    if (this.erasers) return this.erasers;
    const prepare = (steps: readonly EraseStep[]) => steps.map((step) => ({ step, statement: this.db.prepare(sqliteText(step.sql)) }));
    const projectSteps = prepare(PROJECT_ERASE);
    const memberSteps = prepare(MEMBER_ERASE);
    // IMMEDIATE: the write lock before the first read, so another process's write in between
    // cannot make the upgrade fail (SQLITE_BUSY_SNAPSHOT, which the busy timeout does not wait out).
    this.erasers = {
      project: this.db.transaction((id: string, at: number): ProjectErased | null => {
        if (!this.q.getProject.get(id)) return null;
        // As MailIndexStore.dropInbox: a tombstone's version starts at the clock, in microseconds.
        const params = { p1: id, p2: at * 1000, p3: at };
        return tally(projectSteps.map(({ step, statement }) => ({ step, rows: statement.run(params).changes })));
      }).immediate,
      member: this.db.transaction((id: string): boolean => {
        const counted = memberSteps.map(({ step, statement }) => ({ step, rows: statement.run({ p1: id }).changes }));
        return tally(counted).members > 0;
      }).immediate,
    };
    return this.erasers;
  }

  async listProjects(): Promise<Project[]> {
    return this.q.listProjects.all() as Project[];
  }

  async deleteProject(id: string, at: number): Promise<ProjectErased | null> {
    try {
      return this.erase().project(id, at);
    } finally {
      this.kept.drop();
    }
  }

  async listMembers(projectId: string): Promise<Member[]> {
    return this.q.listMembers.all(projectId) as Member[];
  }

  async deleteMember(id: string): Promise<boolean> {
    try {
      return this.erase().member(id);
    } finally {
      this.kept.drop();
    }
  }

  async listTokens(filter: CredentialFilter): Promise<TokenRecord[]> {
    return (this.q.listTokens.all({ projectId: filter.projectId, memberId: filter.memberId ?? null }) as TokenRow<string>[]).map(toToken);
  }

  async listSessions(filter: CredentialFilter): Promise<SessionRecord[]> {
    return (this.q.listSessions.all({ projectId: filter.projectId, memberId: filter.memberId ?? null }) as SessionRow[]).map(toSession);
  }

  async revokeSession(id: string, at: number): Promise<boolean> {
    return this.q.revokeSession.run(at, id).changes > 0;
  }

  async touchSession(id: string, at: number): Promise<void> {
    this.q.touchSession.run(at, id, at);
  }

  async createProject(p: Project): Promise<void> {
    this.q.insertProject.run(p.id, p.name, p.createdAt);
  }

  async getProject(id: string): Promise<Project | null> {
    return (this.q.getProject.get(id) as Project | undefined) ?? null;
  }

  async createMember(m: Member): Promise<void> {
    try {
      this.q.insertMember.run(m.id, m.projectId, m.email, m.createdAt);
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError('member with this email');
      throw err;
    }
  }

  async getMember(id: string): Promise<Member | null> {
    return (this.q.getMember.get(id) as Member | undefined) ?? null;
  }

  async createInbox(inbox: Inbox): Promise<void> {
    const insert = this.db.transaction(() => {
      try {
        this.q.insertInbox.run(inbox.id, inbox.projectId, inbox.imapUser, inbox.mode, inbox.createdAt);
      } catch (err) {
        if (isUniqueViolation(err)) throw new DuplicateError('inbox for this IMAP user');
        throw err;
      }
      inbox.addresses.forEach((address, position) => {
        try {
          this.q.insertAddress.run(address, inbox.id, position);
        } catch (err) {
          if (isUniqueViolation(err)) throw new DuplicateError(`address ${address}`);
          throw err;
        }
      });
    });
    try {
      insert();
    } finally {
      this.kept.drop();
    }
  }

  async getInbox(id: string): Promise<Inbox | null> {
    return rowOrNull(
      this.kept.get(`inbox ${id}`, () => this.q.getInbox.get(id)),
      toInbox,
    );
  }

  async findInboxByAddress(address: string): Promise<Inbox | null> {
    return rowOrNull(this.q.findInboxByAddress.get(address), toInbox);
  }

  async getInboxByImapUser(imapUser: string): Promise<Inbox | null> {
    return rowOrNull(this.q.getInboxByImapUser.get(imapUser), toInbox);
  }

  async deleteInbox(id: string, at: number): Promise<boolean> {
    try {
      return this.deleteInboxRows(id, at);
    } finally {
      this.kept.drop();
    }
  }

  private deleteInboxRows(id: string, at: number): boolean {
    return this.db.transaction(() => {
      this.db
        .prepare(`UPDATE tokens SET revoked_at = ? WHERE revoked_at IS NULL
          AND id IN (SELECT token_id FROM token_inboxes WHERE inbox_id = ?)
          AND (SELECT count(*) FROM token_inboxes t WHERE t.token_id = tokens.id) = 1`)
        .run(at, id);
      // Its keys go with it: nothing may open its mail through Postern any more, and a sealed
      // private key kept for an inbox that no longer exists is only a liability.
      for (const table of ['message_keys', 'epoch_keys', 'token_inboxes', 'grants', 'inbox_identities', 'inbox_addresses'])
        this.db.prepare(`DELETE FROM ${table} WHERE inbox_id = ?`).run(id);
      return this.db.prepare('DELETE FROM inboxes WHERE id = ?').run(id).changes > 0;
    })();
  }

  // Raised by triggers on `inboxes` in the same transaction as the insert or delete (migration
  // 020), so every writer bumps it. Prepared on first use: the store also opens older schemas.
  private versionQuery: Statement | null = null;

  async inboxesVersion(): Promise<number> {
    this.versionQuery ??= this.db.prepare('SELECT version FROM inbox_catalog WHERE id = 1').pluck();
    return this.versionQuery.get() as number;
  }

  async listInboxes(): Promise<Inbox[]> {
    return (this.q.listInboxes.all() as InboxRow<string>[]).map(toInbox);
  }

  async putGrant(g: Grant): Promise<void> {
    try {
      this.q.putGrant.run(g.memberId, g.inboxId, g.role, g.createdAt);
    } finally {
      this.kept.drop();
    }
  }

  async deleteGrant(memberId: string, inboxId: string): Promise<boolean> {
    try {
      return this.q.deleteGrant.run(memberId, inboxId).changes > 0;
    } finally {
      this.kept.drop();
    }
  }

  async getGrant(memberId: string, inboxId: string): Promise<Grant | null> {
    const row = this.kept.get(`grant ${memberId} ${inboxId}`, () => this.q.getGrant.get(memberId, inboxId)) as Grant | undefined;
    return row === undefined ? null : { ...row };
  }

  async listGrants(memberId: string): Promise<Array<{ grant: Grant; inbox: Inbox }>> {
    const rows = this.q.listGrants.all(memberId) as GrantedInboxRow<string>[];
    return rows.map((r) => ({
      grant: grantOf(memberId, r),
      inbox: toInbox(r),
    }));
  }

  async createToken(t: TokenRecord): Promise<void> {
    try {
      this.db.transaction(() => {
        this.q.insertToken.run(t.id, t.projectId, t.memberId, t.scopes.join(' '), t.secretHash, t.createdAt, t.expiresAt, t.revokedAt);
        for (const inboxId of t.inboxes ?? []) this.q.insertTokenInbox.run(t.id, inboxId);
      })();
    } finally {
      this.kept.drop();
    }
  }

  async getToken(id: string): Promise<TokenRecord | null> {
    return rowOrNull(
      this.kept.get(`token ${id}`, () => this.q.getToken.get(id)),
      toToken,
    );
  }

  async revokeToken(id: string, at: number): Promise<boolean> {
    try {
      return this.q.revokeToken.run(at, id).changes > 0;
    } finally {
      this.kept.drop();
    }
  }

  async createSession(s: SessionRecord): Promise<void> {
    this.q.insertSession.run(s.id, s.memberId, s.secretHash, s.createdAt, s.expiresAt, s.revokedAt);
  }

  async getSession(id: string): Promise<SessionRecord | null> {
    return rowOrNull(this.q.getSession.get(id), toSession);
  }
}
