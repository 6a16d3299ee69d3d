// DirectoryStore on PostgreSQL: the statements of the SQLite adapter (adapters/store/sqlite/directory.ts),
// one for one, with lists as arrays rather than space-joined strings.
import type { Pool } from 'pg';
import { DuplicateError, type CredentialFilter, type DirectoryStore, type ProjectErased } from '../../../lib/directory/ports.ts';
import type { Grant, Inbox, Member, Project, SessionRecord, TokenRecord } from '../../../lib/directory/types.ts';
import { KeptReads, type PgChanges } from './changes.ts';
import { changed, inTransaction, isUniqueViolation, rowOf, rowsOf, statements } from './sql.ts';
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
import { MEMBER_ERASE, parameterCount, PROJECT_ERASE, tally, type EraseStep } from '../erase.ts';

const INBOX_SELECT = `SELECT i.id, i.project_id, i.imap_user, i.mode, i.created_at,
  array(SELECT address FROM inbox_addresses a WHERE a.inbox_id = i.id ORDER BY position) AS addresses
  FROM inboxes i`;

// Lists come back as arrays on this engine.
const toInbox = (r: InboxRow<string[]>): Inbox => inboxOf(r, r.addresses);

const toToken = (r: TokenRow<string[]>): TokenRecord => tokenOf(r, r.inboxes);

const stmt = statements('directory');

// No rows: an unnarrowed token (array_agg of nothing is NULL).
const TOKEN_SELECT = `SELECT t.*, (SELECT array_agg(inbox_id ORDER BY inbox_id) FROM token_inboxes WHERE token_id = t.id) AS inboxes
  FROM tokens t`;

const S = {
  insertProject: stmt('insertProject', 'INSERT INTO projects (id, name, created_at) VALUES ($1, $2, $3)'),
  getProject: stmt('getProject', 'SELECT id, name, created_at AS "createdAt" FROM projects WHERE id = $1'),
  insertMember: stmt('insertMember', 'INSERT INTO members (id, project_id, email, created_at) VALUES ($1, $2, $3, $4)'),
  getMember: stmt('getMember', 'SELECT id, project_id AS "projectId", email, created_at AS "createdAt" FROM members WHERE id = $1'),
  insertInbox: stmt('insertInbox', 'INSERT INTO inboxes (id, project_id, imap_user, mode, created_at) VALUES ($1, $2, $3, $4, $5)'),
  insertAddress: stmt('insertAddress', 'INSERT INTO inbox_addresses (address, inbox_id, position) VALUES ($1, $2, $3)'),
  getInbox: stmt('getInbox', `${INBOX_SELECT} WHERE i.id = $1`),
  // lower() on both sides uses the unique indexes of 001_directory.sql (ASCII case only, as SQLite's lower()).
  findInboxByAddress: stmt(
    'findInboxByAddress',
    `${INBOX_SELECT} WHERE i.id = (SELECT inbox_id FROM inbox_addresses WHERE lower(address) = lower($1))`,
  ),
  getInboxByImapUser: stmt('getInboxByImapUser', `${INBOX_SELECT} WHERE lower(i.imap_user) = lower($1)`),
  listInboxes: stmt('listInboxes', `${INBOX_SELECT} ORDER BY i.id`),
  // deleteInbox, in one transaction, takes two locks before it writes (SQLite's one writer needs
  // neither). The inbox row: a writer naming the inbox (a narrowed token, a grant, a key) holds a
  // key-share lock on it until its commit, so the statements after this see every such row and
  // delete it, and later writers find the inbox gone. Then the tokens narrowed to the inbox, in
  // id order (two deletions never wait on each other in a cycle): a deletion of another inbox of
  // the same token has then committed, and the next statement's snapshot sees its narrowing gone.
  // Counting in the snapshot alone, two deletions of a token's only two inboxes would each see
  // two, neither would revoke, and the token would be left narrowed to nothing: every inbox.
  lockInbox: stmt('lockInbox', 'SELECT 1 FROM inboxes WHERE id = $1 FOR UPDATE'),
  lockNarrowed: stmt(
    'lockNarrowed',
    'SELECT id FROM tokens WHERE id IN (SELECT token_id FROM token_inboxes WHERE inbox_id = $1) ORDER BY id FOR UPDATE',
  ),
  // One statement: the RI checks of `inboxes` run at its end, when the rows naming it are gone.
  // Every CTE reads the statement's snapshot, so the narrowing count is the one before
  // token_inboxes loses this inbox's rows.
  deleteInbox: stmt(
    'deleteInbox',
    `WITH revoked AS (
       UPDATE tokens SET revoked_at = $2 WHERE revoked_at IS NULL
         AND id IN (SELECT token_id FROM token_inboxes WHERE inbox_id = $1)
         AND (SELECT count(*) FROM token_inboxes t WHERE t.token_id = tokens.id) = 1),
     mk AS (DELETE FROM message_keys WHERE inbox_id = $1),
     ek AS (DELETE FROM epoch_keys WHERE inbox_id = $1),
     ti AS (DELETE FROM token_inboxes WHERE inbox_id = $1),
     g AS (DELETE FROM grants WHERE inbox_id = $1),
     ii AS (DELETE FROM inbox_identities WHERE inbox_id = $1),
     a AS (DELETE FROM inbox_addresses WHERE inbox_id = $1)
     DELETE FROM inboxes WHERE id = $1`,
  ),
  // Raised by triggers on `inboxes` (003_mail.sql) in the writer's transaction.
  inboxesVersion: stmt('inboxesVersion', 'SELECT version FROM inbox_catalog WHERE id = 1'),
  putGrant: stmt(
    'putGrant',
    `INSERT INTO grants (member_id, inbox_id, role, created_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (member_id, inbox_id) DO UPDATE SET role = excluded.role`,
  ),
  deleteGrant: stmt('deleteGrant', 'DELETE FROM grants WHERE member_id = $1 AND inbox_id = $2'),
  getGrant: stmt(
    'getGrant',
    `SELECT member_id AS "memberId", inbox_id AS "inboxId", role, created_at AS "createdAt"
     FROM grants WHERE member_id = $1 AND inbox_id = $2`,
  ),
  listGrants: stmt(
    'listGrants',
    `SELECT g.role, g.created_at AS grant_created_at, x.*
     FROM grants g JOIN (${INBOX_SELECT}) x ON x.id = g.inbox_id
     WHERE g.member_id = $1 ORDER BY g.created_at, x.id`,
  ),
  insertToken: stmt(
    'insertToken',
    `INSERT INTO tokens (id, project_id, member_id, scopes, secret_hash, created_at, expires_at, revoked_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  ),
  insertTokenInboxes: stmt('insertTokenInboxes', 'INSERT INTO token_inboxes (token_id, inbox_id) SELECT $1, unnest($2::text[])'),
  getToken: stmt('getToken', `${TOKEN_SELECT} WHERE t.id = $1`),
  listTokens: stmt('listTokens', `${TOKEN_SELECT} WHERE t.project_id = $1 AND ($2::text IS NULL OR t.member_id = $2) ORDER BY t.id`),
  revokeToken: stmt('revokeToken', 'UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL'),
  insertSession: stmt(
    'insertSession',
    'INSERT INTO sessions (id, member_id, secret_hash, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6)',
  ),
  getSession: stmt('getSession', 'SELECT id, member_id, secret_hash, created_at, expires_at, revoked_at FROM sessions WHERE id = $1'),
  listSessions: stmt(
    'listSessions',
    `SELECT s.id, s.member_id, s.secret_hash, s.created_at, s.expires_at, s.revoked_at FROM sessions s JOIN members m ON m.id = s.member_id
     WHERE m.project_id = $1 AND ($2::text IS NULL OR s.member_id = $2) ORDER BY s.id`,
  ),
  revokeSession: stmt('revokeSession', 'UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL'),
  touchSession: stmt('touchSession', 'UPDATE sessions SET last_used_at = $1 WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)'),
  listProjects: stmt('listProjects', 'SELECT id, name, created_at AS "createdAt" FROM projects ORDER BY id'),
  listMembers: stmt(
    'listMembers',
    'SELECT id, project_id AS "projectId", email, created_at AS "createdAt" FROM members WHERE project_id = $1 ORDER BY id',
  ),
  // Before a deletion writes, the rows other writers name in their foreign keys, parents first
  // and each kind in id order (as deleteInbox: inbox, then tokens): a writer adding a member, an
  // inbox, a grant, a key or an event has committed, or waits and then finds its parent gone.
  lockProject: stmt('lockProject', 'SELECT 1 FROM projects WHERE id = $1 FOR UPDATE'),
  lockMembers: stmt('lockMembers', 'SELECT 1 FROM members WHERE project_id = $1 ORDER BY id FOR UPDATE'),
  lockInboxes: stmt('lockInboxes', 'SELECT 1 FROM inboxes WHERE project_id = $1 ORDER BY id FOR UPDATE'),
  lockMember: stmt('lockMember', 'SELECT 1 FROM members WHERE id = $1 FOR UPDATE'),
  lockTokens: stmt('lockTokens', 'SELECT 1 FROM tokens WHERE project_id = $1 ORDER BY id FOR UPDATE'),
  lockMemberTokens: stmt('lockMemberTokens', 'SELECT 1 FROM tokens WHERE member_id = $1 ORDER BY id FOR UPDATE'),
};

/** The erase steps as named statements, each given the values it takes. */
const eraseStatements = (name: string, steps: readonly EraseStep[]) =>
  steps.map((step, i) => ({ step, statement: stmt(`${name}.${i}`, step.sql), takes: parameterCount(step.sql) }));
const ERASE_PROJECT = eraseStatements('eraseProject', PROJECT_ERASE);
const ERASE_MEMBER = eraseStatements('eraseMember', MEMBER_ERASE);

export class PgDirectoryStore implements DirectoryStore {
  /**
   * Tokens read, kept for every request's authentication (one round trip each otherwise) and
   * dropped when any process changes them (changes.ts); none without `changes`.
   */
  private readonly tokens: KeptReads<TokenRecord> | null;
  /** Grants ("member inbox") and inboxes, kept the same way: every request on an inbox reads both. */
  private readonly grants: KeptReads<Grant> | null;
  private readonly inboxes: KeptReads<Inbox> | null;

  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(
    private readonly pool: Pool,
    changes: PgChanges | null = null,
    keepMs = 0,
  ) {
    const keep = changes && keepMs > 0;
    this.tokens = keep ? new KeptReads<TokenRecord>(changes, keepMs) : null;
    this.grants = keep ? new KeptReads<Grant>(changes, keepMs) : null;
    this.inboxes = keep ? new KeptReads<Inbox>(changes, keepMs) : null;
    changes?.on('postern_tokens', (id) => this.tokens?.drop(id));
    changes?.on('postern_grants', (key) => this.grants?.drop(key));
    changes?.on('postern_inboxes', (id) => this.inboxes?.drop(id));
  }

  /** After a write that may change tokens: what this process kept goes at once, before its notice. */
  private dropTokens<T>(id: string | null, written: T): T {
    this.tokens?.drop(id);
    return written;
  }

  /** After a write that may change grants or inboxes (rare): everything kept of them goes at once. */
  private dropAccess<T>(written: T): T {
    this.grants?.drop(null);
    this.inboxes?.drop(null);
    return written;
  }

  async createProject(p: Project): Promise<void> {
    await this.pool.query(S.insertProject([p.id, p.name, p.createdAt]));
  }

  async getProject(id: string): Promise<Project | null> {
    return rowOf<Project>(this.pool, S.getProject([id]));
  }

  async createMember(m: Member): Promise<void> {
    try {
      await this.pool.query(S.insertMember([m.id, m.projectId, m.email, m.createdAt]));
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError('member with this email');
      throw err;
    }
  }

  async getMember(id: string): Promise<Member | null> {
    return rowOf<Member>(this.pool, S.getMember([id]));
  }

  async createInbox(inbox: Inbox): Promise<void> {
    await inTransaction(this.pool, async (c) => {
      try {
        await c.query(S.insertInbox([inbox.id, inbox.projectId, inbox.imapUser, inbox.mode, inbox.createdAt]));
      } catch (err) {
        if (isUniqueViolation(err)) throw new DuplicateError('inbox for this IMAP user');
        throw err;
      }
      // One at a time, as on SQLite, so the error names the address that is taken.
      for (const [position, address] of inbox.addresses.entries()) {
        try {
          await c.query(S.insertAddress([address, inbox.id, position]));
        } catch (err) {
          if (isUniqueViolation(err)) throw new DuplicateError(`address ${address}`);
          throw err;
        }
      }
    });
  }

  async getInbox(id: string): Promise<Inbox | null> {
    const read = async () => {
      const r = await rowOf<InboxRow<string[]>>(this.pool, S.getInbox([id]));
      return r ? toInbox(r) : null;
    };
    return this.inboxes ? this.inboxes.get(id, read) : read();
  }

  async findInboxByAddress(address: string): Promise<Inbox | null> {
    const r = await rowOf<InboxRow<string[]>>(this.pool, S.findInboxByAddress([address]));
    return r ? toInbox(r) : null;
  }

  async getInboxByImapUser(imapUser: string): Promise<Inbox | null> {
    const r = await rowOf<InboxRow<string[]>>(this.pool, S.getInboxByImapUser([imapUser]));
    return r ? toInbox(r) : null;
  }

  async deleteInbox(id: string, at: number): Promise<boolean> {
    const deleted = await inTransaction(this.pool, async (c) => {
      await c.query(S.lockInbox([id]));
      await c.query(S.lockNarrowed([id]));
      return (await changed(c, S.deleteInbox([id, at]))) > 0;
    });
    return this.dropAccess(this.dropTokens(null, deleted));
  }

  async inboxesVersion(): Promise<number> {
    return (await rowOf<{ version: number }>(this.pool, S.inboxesVersion([])))!.version;
  }

  async listInboxes(): Promise<Inbox[]> {
    return (await rowsOf<InboxRow<string[]>>(this.pool, S.listInboxes([]))).map(toInbox);
  }

  async putGrant(g: Grant): Promise<void> {
    await this.pool.query(S.putGrant([g.memberId, g.inboxId, g.role, g.createdAt]));
    this.dropAccess(null);
  }

  async deleteGrant(memberId: string, inboxId: string): Promise<boolean> {
    return this.dropAccess((await changed(this.pool, S.deleteGrant([memberId, inboxId]))) > 0);
  }

  async getGrant(memberId: string, inboxId: string): Promise<Grant | null> {
    const read = () => rowOf<Grant>(this.pool, S.getGrant([memberId, inboxId]));
    return this.grants ? this.grants.get(`${memberId} ${inboxId}`, read) : read();
  }

  async listGrants(memberId: string): Promise<Array<{ grant: Grant; inbox: Inbox }>> {
    const rows = await rowsOf<GrantedInboxRow<string[]>>(this.pool, S.listGrants([memberId]));
    return rows.map((r) => ({
      grant: grantOf(memberId, r),
      inbox: toInbox(r),
    }));
  }

  async createToken(t: TokenRecord): Promise<void> {
    const insert = S.insertToken([t.id, t.projectId, t.memberId, t.scopes.join(' '), t.secretHash, t.createdAt, t.expiresAt, t.revokedAt]);
    if (!t.inboxes?.length) {
      await this.pool.query(insert);
      return;
    }
    await inTransaction(this.pool, async (c) => {
      await c.query(insert);
      await c.query(S.insertTokenInboxes([t.id, t.inboxes]));
    });
  }

  async getToken(id: string): Promise<TokenRecord | null> {
    const read = async () => {
      const r = await rowOf<TokenRow<string[]>>(this.pool, S.getToken([id]));
      return r ? toToken(r) : null;
    };
    return this.tokens ? this.tokens.get(id, read) : read();
  }

  async revokeToken(id: string, at: number): Promise<boolean> {
    return this.dropTokens(id, (await changed(this.pool, S.revokeToken([at, id]))) > 0);
  }

  async createSession(s: SessionRecord): Promise<void> {
    await this.pool.query(S.insertSession([s.id, s.memberId, s.secretHash, s.createdAt, s.expiresAt, s.revokedAt]));
  }

  async listSessions(filter: CredentialFilter): Promise<SessionRecord[]> {
    return (await rowsOf<SessionRow>(this.pool, S.listSessions([filter.projectId, filter.memberId ?? null]))).map(toSession);
  }

  async revokeSession(id: string, at: number): Promise<boolean> {
    return (await changed(this.pool, S.revokeSession([at, id]))) > 0;
  }

  async touchSession(id: string, at: number): Promise<void> {
    await this.pool.query(S.touchSession([at, id]));
  }

  async listTokens(filter: CredentialFilter): Promise<TokenRecord[]> {
    return (await rowsOf<TokenRow<string[]>>(this.pool, S.listTokens([filter.projectId, filter.memberId ?? null]))).map(toToken);
  }

  async listProjects(): Promise<Project[]> {
    return rowsOf<Project>(this.pool, S.listProjects([]));
  }

  async listMembers(projectId: string): Promise<Member[]> {
    return rowsOf<Member>(this.pool, S.listMembers([projectId]));
  }

  async deleteProject(id: string, at: number): Promise<ProjectErased | null> {
    return this.dropAccess(
      this.dropTokens(
        null,
        await inTransaction(this.pool, async (c) => {
          if ((await changed(c, S.lockProject([id]))) === 0) return null;
          for (const lock of [S.lockMembers, S.lockInboxes, S.lockTokens]) await c.query(lock([id]));
          // As MailIndexStore.dropInbox: a tombstone's version starts at the clock, in microseconds.
          const values = [id, at * 1000, at];
          const counted: Array<{ step: EraseStep; rows: number }> = [];
          for (const { step, statement, takes } of ERASE_PROJECT)
            counted.push({ step, rows: await changed(c, statement(values.slice(0, takes))) });
          return tally(counted);
        }),
      ),
    );
  }

  async deleteMember(id: string): Promise<boolean> {
    return this.dropAccess(
      this.dropTokens(
        null,
        await inTransaction(this.pool, async (c) => {
          if ((await changed(c, S.lockMember([id]))) === 0) return false;
          await c.query(S.lockMemberTokens([id]));
          const counted: Array<{ step: EraseStep; rows: number }> = [];
          for (const { step, statement, takes } of ERASE_MEMBER)
            counted.push({ step, rows: await changed(c, statement([id].slice(0, takes))) });
          return tally(counted).members > 0;
        }),
      ),
    );
  }

  async getSession(id: string): Promise<SessionRecord | null> {
    const r = await rowOf<SessionRow>(this.pool, S.getSession([id]));
    return r ? toSession(r) : null;
  }
}
