// Staff operations: what `postern admin …` does. Tokens are issued by staff for now (docs/api.md, "Authentication", rule 4).
import { mintSession, mintToken } from '../auth/credentials.ts';
import { isRole, isScope, ROLES, SCOPES } from '../auth/scopes.ts';
import type { EpochKeys } from '../crypto/epoch-keys.ts';
import { invalid, conflict, notFound } from '../errors.ts';
import { isId, newId } from '../ids.ts';
import { DuplicateError, type DirectoryStore, type MailUsers, type ProjectErased } from './ports.ts';
import { INBOX_MODES, isInboxMode, type Inbox, type Member, type SessionRecord, type TokenRecord } from './types.ts';

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

/** A credential's standing at `now`: ended by staff or its owner, past its expiry, or usable. */
const standing = (c: { revokedAt: number | null; expiresAt: number | null }, now: number) =>
  c.revokedAt !== null ? 'revoked' : c.expiresAt !== null && c.expiresAt <= now ? 'expired' : 'live';

/** An inbox as staff lists print it. */
const inboxView = (i: Inbox) => ({
  id: i.id,
  projectId: i.projectId,
  imapUser: i.imapUser,
  addresses: i.addresses,
  mode: i.mode,
  createdAt: iso(i.createdAt),
});

const memberView = (m: Member) => ({ id: m.id, projectId: m.projectId, email: m.email, createdAt: iso(m.createdAt) });

/** A token as staff see it: never its secret or the secret's hash. */
const tokenView = (t: TokenRecord, now: number) => ({
  id: t.id,
  projectId: t.projectId,
  memberId: t.memberId,
  scopes: t.scopes,
  inboxes: t.inboxes,
  state: standing(t, now),
  createdAt: iso(t.createdAt),
  expiresAt: iso(t.expiresAt),
  revokedAt: iso(t.revokedAt),
});

const sessionView = (s: SessionRecord, now: number) => ({
  id: s.id,
  memberId: s.memberId,
  state: standing(s, now),
  createdAt: iso(s.createdAt),
  expiresAt: iso(s.expiresAt),
  revokedAt: iso(s.revokedAt),
});

const EMAIL = /^[^\s@<>()",;:\\[\]]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*$/;

export function isEmail(value: string): boolean {
  return value.length <= 254 && EMAIL.test(value);
}

export interface AdminOptions {
  tokenTtlSeconds: number;
  sessionTtlSeconds: number;
  /** Makes each new inbox's epoch 1 (and rotates epochs). */
  keys: EpochKeys;
  now?: () => number;
  /** Told of every inbox added, once stored (the mail watch starts on it). */
  onInboxAdded?: (inbox: { id: string; imapUser: string; addresses: readonly string[] }) => void;
  /** Told of every inbox removed, once deleted (its watch stops, its index goes). */
  onInboxRemoved?: (inboxId: string) => Promise<void>;
  /** When set, `addInbox` refuses an IMAP user the mail server does not have (the staff CLI). */
  mailUsers?: MailUsers;
}

export class Admin {
  private readonly now: () => number;

  constructor(
    private readonly store: DirectoryStore,
    private readonly options: AdminOptions,
  ) {
    this.now = options.now ?? Date.now;
  }

  async createProject(name: string): Promise<{ id: string }> {
    const trimmed = name.trim();
    if (!trimmed || trimmed.length > 200) throw invalid('project name must be 1 to 200 characters');
    const id = newId('prj');
    await this.store.createProject({ id, name: trimmed, createdAt: this.now() });
    return { id };
  }

  async listProjects() {
    return (await this.store.listProjects()).map((p) => ({ id: p.id, name: p.name, createdAt: iso(p.createdAt) }));
  }

  /** The project with its members (and the inboxes each may use) and its inboxes. */
  async showProject(id: string) {
    const project = await this.project(id);
    return {
      id: project.id,
      name: project.name,
      createdAt: iso(project.createdAt),
      members: await this.listMembers(id),
      inboxes: await this.listInboxes(id),
    };
  }

  /**
   * Deletes the project and everything in it (docs/api.md, "Project event log": its events are kept until then), in one
   * store transaction. Mail stays in the mail server. A running server stops watching its inboxes
   * within POSTERN_WATCH_CATALOG_POLL_MS (the store's inbox list version moves with the delete).
   */
  async deleteProject(id: string): Promise<{ id: string; deleted: true; removed: Omit<ProjectErased, 'projects'> }> {
    await this.project(id);
    const erased = await this.store.deleteProject(id, this.now());
    if (!erased) throw notFound(`no project ${id}`);
    const { projects: _, ...removed } = erased;
    return { id, deleted: true, removed };
  }

  /** The project's members, each with the inboxes it may use and its role there. */
  async listMembers(projectId: string) {
    await this.project(projectId);
    const members = await this.store.listMembers(projectId);
    return Promise.all(
      members.map(async (m) => ({
        ...memberView(m),
        inboxes: (await this.store.listGrants(m.id)).map(({ grant }) => ({ inboxId: grant.inboxId, role: grant.role })),
      })),
    );
  }

  /** Deletes the member with their grants, sessions, tokens (and their webhooks), passkeys and keys. */
  async removeMember(id: string): Promise<{ id: string; removed: true }> {
    await this.member(id);
    if (!(await this.store.deleteMember(id))) throw notFound(`no member ${id}`);
    return { id, removed: true };
  }

  /** Every inbox, or the project's. */
  async listInboxes(projectId?: string) {
    if (projectId !== undefined) await this.project(projectId);
    const all = await this.store.listInboxes();
    return all.filter((i) => projectId === undefined || i.projectId === projectId).map(inboxView);
  }

  /** The inbox and who may use it. */
  async showInbox(id: string) {
    const inbox = isId('ibx', id) ? await this.store.getInbox(id) : null;
    if (!inbox) throw notFound(`no inbox ${id}`);
    const members: Array<{ memberId: string; role: string }> = [];
    for (const m of await this.store.listMembers(inbox.projectId)) {
      const grant = await this.store.getGrant(m.id, inbox.id);
      if (grant) members.push({ memberId: m.id, role: grant.role });
    }
    return { ...inboxView(inbox), members };
  }

  /** Tokens of a project, or of one member (revoked and expired ones too, with their state). */
  async listTokens(filter: { projectId?: string; memberId?: string }) {
    const projectId = await this.credentialOwner(filter);
    const now = this.now();
    return (await this.store.listTokens({ projectId, ...(filter.memberId ? { memberId: filter.memberId } : {}) })).map((t) =>
      tokenView(t, now),
    );
  }

  /** Web sessions of a project, or of one member (ended and expired ones too, with their state). */
  async listSessions(filter: { projectId?: string; memberId?: string }) {
    const projectId = await this.credentialOwner(filter);
    const now = this.now();
    return (await this.store.listSessions({ projectId, ...(filter.memberId ? { memberId: filter.memberId } : {}) })).map((s) =>
      sessionView(s, now),
    );
  }

  /** Ends a web session now: its next request is refused (401). */
  async revokeSession(id: string): Promise<{ id: string; revoked: boolean }> {
    const session = isId('ses', id) ? await this.store.getSession(id) : null;
    if (!session) throw notFound(`no session ${id}`);
    return { id, revoked: await this.store.revokeSession(id, this.now()) };
  }

  async addMember(projectId: string, email: string): Promise<{ id: string }> {
    await this.project(projectId);
    if (!isEmail(email)) throw invalid(`not an e-mail address: ${email}`);
    const id = newId('mem');
    await this.unique(() => this.store.createMember({ id, projectId, email: email.toLowerCase(), createdAt: this.now() }));
    return { id };
  }

  /**
   * Everything is checked before anything is written (docs/operations.md, "Staff commands"): the project, the names,
   * that the IMAP user and addresses are free, that keys can be made (the master key), and, with
   * `mailUsers`, that the mail server has the user. `createImapUser`, when given, makes the
   * mail server's user after those checks and before the inbox is written. A key that still
   * cannot be stored takes the inbox row back out: no inbox is ever left without a key.
   */
  async addInbox(input: {
    projectId: string;
    imapUser: string;
    addresses: string[];
    mode?: string;
    createImapUser?: () => Promise<void>;
  }): Promise<{ id: string }> {
    await this.project(input.projectId);
    if (!input.imapUser.trim() || /\s/.test(input.imapUser)) throw invalid('IMAP user must be a non-empty name without spaces');
    if (input.addresses.length === 0) throw invalid('an inbox needs at least one address');
    const addresses = input.addresses.map((a) => a.trim().toLowerCase());
    for (const a of addresses) if (!isEmail(a)) throw invalid(`not an e-mail address: ${a}`);
    if (new Set(addresses).size !== addresses.length) throw invalid('addresses repeat');
    const mode = input.mode ?? 'compatible';
    if (!isInboxMode(mode)) throw invalid(`mode must be one of ${INBOX_MODES.join(', ')}`);
    // Taken already: said before the mail server is asked or a user made (the store's unique
    // constraints still decide a race between two staff).
    if (await this.store.getInboxByImapUser(input.imapUser)) throw conflict('inbox for this IMAP user already exists');
    for (const a of addresses) if (await this.store.findInboxByAddress(a)) throw conflict(`address ${a} already exists`);
    await this.options.keys.check();
    if (input.createImapUser) await input.createImapUser();
    else if (this.options.mailUsers && !(await this.options.mailUsers.exists(input.imapUser))) {
      throw notFound(
        `the mail server has no IMAP user ${input.imapUser} (or POSTERN_IMAP_MASTER_USER/PASSWORD cannot log in as it): create the user first`,
      );
    }
    const id = newId('ibx');
    const createdAt = this.now();
    await this.unique(() =>
      this.store.createInbox({ id, projectId: input.projectId, imapUser: input.imapUser, addresses, mode, createdAt }),
    );
    // Made right away, so an inbox never exists without a key to seal its mail to.
    try {
      await this.options.keys.ensure(id);
    } catch (err) {
      await this.store.deleteInbox(id, this.now());
      throw err;
    }
    this.options.onInboxAdded?.({ id, imapUser: input.imapUser, addresses });
    return { id };
  }

  /** Starts a new epoch: new mail is sealed to it, older epochs stay readable. */
  async rotateKey(inboxId: string): Promise<{ inboxId: string; epoch: number; fingerprint: string }> {
    const inbox = isId('ibx', inboxId) ? await this.store.getInbox(inboxId) : null;
    if (!inbox) throw notFound(`no inbox ${inboxId}`);
    const { epoch, fingerprint } = await this.options.keys.rotate(inbox.id);
    return { inboxId: inbox.id, epoch, fingerprint };
  }

  /** Removes the inbox (docs/api.md, "Project event log": its events stay in the project's log). */
  async removeInbox(id: string): Promise<{ id: string; removed: true }> {
    const inbox = isId('ibx', id) ? await this.store.getInbox(id) : null;
    if (!inbox) throw notFound(`no inbox ${id}`);
    await this.store.deleteInbox(id, this.now());
    await this.options.onInboxRemoved?.(id);
    return { id, removed: true };
  }

  async grant(memberId: string, inboxId: string, role: string): Promise<{ memberId: string; inboxId: string; role: string }> {
    if (!isRole(role)) throw invalid(`role must be one of ${ROLES.join(', ')}`);
    await this.sameProject(memberId, inboxId);
    await this.store.putGrant({ memberId, inboxId, role, createdAt: this.now() });
    return { memberId, inboxId, role };
  }

  async revoke(memberId: string, inboxId: string): Promise<{ revoked: boolean }> {
    await this.sameProject(memberId, inboxId);
    return { revoked: await this.store.deleteGrant(memberId, inboxId) };
  }

  async createToken(input: {
    memberId: string;
    scopes: string[];
    inboxes?: string[];
    expiresInSeconds?: number;
  }): Promise<{ id: string; token: string; expiresAt: string | null }> {
    const member = await this.member(input.memberId);
    const unknown = input.scopes.filter((s) => !isScope(s));
    if (unknown.length) throw invalid(`unknown scope ${unknown.join(', ')}; scopes are ${SCOPES.join(', ')}`);
    if (input.inboxes) {
      if (input.inboxes.length === 0) throw invalid('--inboxes needs at least one inbox id');
      for (const inboxId of input.inboxes) {
        const inbox = isId('ibx', inboxId) ? await this.store.getInbox(inboxId) : null;
        if (!inbox || inbox.projectId !== member.projectId) throw notFound(`no inbox ${inboxId} in the member's project`);
      }
    }
    const ttl = input.expiresInSeconds ?? this.options.tokenTtlSeconds;
    if (!Number.isSafeInteger(ttl) || ttl < 0) throw invalid('expiry must be a whole number of seconds');
    const now = this.now();
    const minted = mintToken();
    const expiresAt = ttl === 0 ? null : now + ttl * 1000;
    await this.store.createToken({
      id: minted.id,
      projectId: member.projectId,
      memberId: member.id,
      scopes: [...new Set(input.scopes)],
      inboxes: input.inboxes ? [...new Set(input.inboxes)] : null,
      secretHash: minted.secretHash,
      createdAt: now,
      expiresAt,
      revokedAt: null,
    });
    return { id: minted.id, token: minted.credential, expiresAt: expiresAt === null ? null : new Date(expiresAt).toISOString() };
  }

  async revokeToken(id: string): Promise<{ id: string; revoked: boolean }> {
    const token = isId('tok', id) ? await this.store.getToken(id) : null;
    if (!token) throw notFound(`no token ${id}`);
    return { id, revoked: await this.store.revokeToken(id, this.now()) };
  }

  async createSession(memberId: string, expiresInSeconds?: number): Promise<{ id: string; token: string; expiresAt: string }> {
    const member = await this.member(memberId);
    const ttl = expiresInSeconds ?? this.options.sessionTtlSeconds;
    if (!Number.isSafeInteger(ttl) || ttl <= 0) throw invalid('expiry must be a positive whole number of seconds');
    const now = this.now();
    const minted = mintSession();
    const expiresAt = now + ttl * 1000;
    await this.store.createSession({
      id: minted.id,
      memberId: member.id,
      secretHash: minted.secretHash,
      createdAt: now,
      expiresAt,
      revokedAt: null,
    });
    return { id: minted.id, token: minted.credential, expiresAt: new Date(expiresAt).toISOString() };
  }

  private async project(id: string) {
    const project = isId('prj', id) ? await this.store.getProject(id) : null;
    if (!project) throw notFound(`no project ${id}`);
    return project;
  }

  /** The project a credential list covers: the one named, or the member's (which must agree). */
  private async credentialOwner(filter: { projectId?: string; memberId?: string }): Promise<string> {
    if (filter.memberId !== undefined) {
      const member = await this.member(filter.memberId);
      if (filter.projectId !== undefined && filter.projectId !== member.projectId)
        throw invalid(`member ${member.id} is not in project ${filter.projectId}`);
      return member.projectId;
    }
    if (filter.projectId === undefined) throw invalid('name a project or a member');
    return (await this.project(filter.projectId)).id;
  }

  private async member(id: string) {
    const member = isId('mem', id) ? await this.store.getMember(id) : null;
    if (!member) throw notFound(`no member ${id}`);
    return member;
  }

  private async sameProject(memberId: string, inboxId: string) {
    const member = await this.member(memberId);
    const inbox = isId('ibx', inboxId) ? await this.store.getInbox(inboxId) : null;
    if (!inbox) throw notFound(`no inbox ${inboxId}`);
    if (inbox.projectId !== member.projectId) throw invalid('member and inbox belong to different projects');
    return { member, inbox };
  }

  private async unique(write: () => Promise<void>): Promise<void> {
    try {
      await write();
    } catch (err) {
      if (err instanceof DuplicateError) throw conflict(err.message);
      throw err;
    }
  }
}
