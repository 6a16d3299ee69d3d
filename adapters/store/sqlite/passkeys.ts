// PasskeyStore on SQLite.
import { DuplicateError } from '../../../lib/directory/ports.ts';
import type { ChallengeRecord, InviteRecord, MemberSession, PasskeyRecord, PasskeyStore } from '../../../lib/auth/ports.ts';
import { passkeyOf, type PasskeyRow as EnginePasskeyRow } from '../rows/passkeys.ts';
import { isUniqueViolation, rowOrNull, type Db } from './db.ts';

// backed_up is a 0/1 INTEGER on this engine (SQLite has no booleans).
type PasskeyRow = EnginePasskeyRow<number>;
const toPasskey = (r: PasskeyRow): PasskeyRecord => passkeyOf(r, r.backed_up === 1);

const SESSION_COLUMNS =
  'id, member_id AS memberId, passkey_id AS passkeyId, created_at AS createdAt, expires_at AS expiresAt, revoked_at AS revokedAt, device, last_used_at AS lastUsedAt';

export class SqlitePasskeyStore implements PasskeyStore {
  private readonly q;

  constructor(private readonly db: Db) {
    this.q = {
      insertInvite: db.prepare(
        'INSERT INTO passkey_invites (id, member_id, secret_hash, created_at, expires_at, used_at) VALUES (?, ?, ?, ?, ?, ?)',
      ),
      getInvite: db.prepare(
        'SELECT id, member_id AS memberId, secret_hash AS secretHash, created_at AS createdAt, expires_at AS expiresAt, used_at AS usedAt FROM passkey_invites WHERE id = ?',
      ),
      useInvite: db.prepare('UPDATE passkey_invites SET used_at = ? WHERE id = ? AND used_at IS NULL'),
      pruneChallenges: db.prepare('DELETE FROM webauthn_challenges WHERE expires_at <= ?'),
      countChallenges: db.prepare('SELECT count(*) FROM webauthn_challenges').pluck(),
      insertChallenge: db.prepare(
        'INSERT INTO webauthn_challenges (challenge, kind, invite_id, member_id, operation, expires_at) VALUES (?, ?, ?, ?, ?, ?)',
      ),
      takeChallenge: db.prepare(
        'DELETE FROM webauthn_challenges WHERE challenge = ? RETURNING challenge, kind, invite_id AS inviteId, member_id AS memberId, operation, expires_at AS expiresAt',
      ),
      insertPasskey:
        db.prepare(`INSERT INTO passkeys (id, member_id, credential_id, public_key, counter, transports, name, backed_up, created_at, last_used_at, disabled_at)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
      byCredential: db.prepare('SELECT * FROM passkeys WHERE credential_id = ?'),
      byId: db.prepare('SELECT * FROM passkeys WHERE id = ?'),
      byMember: db.prepare('SELECT * FROM passkeys WHERE member_id = ? ORDER BY created_at, id'),
      recordUse: db.prepare('UPDATE passkeys SET counter = ?, last_used_at = ? WHERE id = ? AND counter = ?'),
      disable: db.prepare('UPDATE passkeys SET disabled_at = coalesce(disabled_at, ?) WHERE id = ?'),
      deletePasskey: db.prepare('DELETE FROM passkeys WHERE id = ?'),
      endPasskeySessions: db.prepare('UPDATE sessions SET revoked_at = ? WHERE passkey_id = ? AND revoked_at IS NULL'),
      insertSession: db.prepare(
        'INSERT INTO sessions (id, member_id, secret_hash, created_at, expires_at, revoked_at, passkey_id, device, last_used_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
      ),
      liveSessions: db.prepare(`SELECT ${SESSION_COLUMNS} FROM sessions
        WHERE member_id = ? AND revoked_at IS NULL AND expires_at > ? ORDER BY created_at DESC, id DESC`),
      sessionOwner: db.prepare('SELECT member_id FROM sessions WHERE id = ?').pluck(),
      session: db.prepare(`SELECT ${SESSION_COLUMNS} FROM sessions WHERE id = ?`),
      endSession: db.prepare('UPDATE sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL AND expires_at > ?'),
    };
  }

  async createInvite(i: InviteRecord): Promise<void> {
    this.q.insertInvite.run(i.id, i.memberId, i.secretHash, i.createdAt, i.expiresAt, i.usedAt);
  }

  async getInvite(id: string): Promise<InviteRecord | null> {
    return (this.q.getInvite.get(id) as InviteRecord | undefined) ?? null;
  }

  async useInvite(id: string, at: number): Promise<boolean> {
    return this.q.useInvite.run(at, id).changes > 0;
  }

  async putChallenge(c: ChallengeRecord, now: number, limit: number): Promise<boolean> {
    return this.db
      .transaction(() => {
        this.q.pruneChallenges.run(now);
        if ((this.q.countChallenges.get() as number) >= limit) return false;
        this.q.insertChallenge.run(c.challenge, c.kind, c.inviteId, c.memberId, c.operation, c.expiresAt);
        return true;
      })
      .immediate();
  }

  async takeChallenge(challenge: string): Promise<ChallengeRecord | null> {
    return (this.q.takeChallenge.get(challenge) as ChallengeRecord | undefined) ?? null;
  }

  async createPasskey(p: PasskeyRecord): Promise<void> {
    try {
      this.q.insertPasskey.run(
        p.id,
        p.memberId,
        p.credentialId,
        p.publicKey,
        p.counter,
        p.transports.join(' '),
        p.name,
        p.backedUp ? 1 : 0,
        p.createdAt,
        p.lastUsedAt,
        p.disabledAt,
      );
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError('passkey');
      throw err;
    }
  }

  async getPasskeyByCredential(credentialId: string): Promise<PasskeyRecord | null> {
    return rowOrNull(this.q.byCredential.get(credentialId), toPasskey);
  }

  async getPasskey(id: string): Promise<PasskeyRecord | null> {
    return rowOrNull(this.q.byId.get(id), toPasskey);
  }

  async listPasskeys(memberId: string): Promise<PasskeyRecord[]> {
    return (this.q.byMember.all(memberId) as PasskeyRow[]).map(toPasskey);
  }

  async recordUse(id: string, fromCounter: number, toCounter: number, at: number): Promise<boolean> {
    return this.q.recordUse.run(toCounter, at, id, fromCounter).changes > 0;
  }

  async disablePasskey(id: string, at: number): Promise<void> {
    this.q.disable.run(at, id);
  }

  async deletePasskey(id: string, at: number): Promise<boolean> {
    return this.db
      .transaction(() => {
        this.q.endPasskeySessions.run(at, id);
        return this.q.deletePasskey.run(id).changes > 0;
      })
      .immediate();
  }

  async createSession(s: MemberSession & { secretHash: Buffer }): Promise<void> {
    this.q.insertSession.run(s.id, s.memberId, s.secretHash, s.createdAt, s.expiresAt, s.revokedAt, s.passkeyId, s.device, s.lastUsedAt);
  }

  async listLiveSessions(memberId: string, now: number): Promise<MemberSession[]> {
    return this.q.liveSessions.all(memberId, now) as MemberSession[];
  }

  async getSessionOwner(id: string): Promise<string | null> {
    return (this.q.sessionOwner.get(id) as string | undefined) ?? null;
  }

  async getSession(id: string): Promise<MemberSession | null> {
    return (this.q.session.get(id) as MemberSession | undefined) ?? null;
  }

  async endSession(id: string, at: number): Promise<boolean> {
    return this.q.endSession.run(at, id, at).changes > 0;
  }
}
