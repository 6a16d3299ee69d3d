// PasskeyStore on PostgreSQL: the statements of adapters/store/sqlite/passkeys.ts one for one.
import type { Pool } from 'pg';
import { DuplicateError } from '../../../lib/directory/ports.ts';
import type { ChallengeRecord, InviteRecord, MemberSession, PasskeyRecord, PasskeyStore } from '../../../lib/auth/ports.ts';
import { passkeyOf, type PasskeyRow as EnginePasskeyRow } from '../rows/passkeys.ts';
import { changed, inTransaction, isUniqueViolation, rowOf, rowsOf, statements } from './sql.ts';

// backed_up is a BOOLEAN on this engine.
type PasskeyRow = EnginePasskeyRow<boolean>;
const toPasskey = (r: PasskeyRow): PasskeyRecord => passkeyOf(r, r.backed_up);

const PASSKEY_COLUMNS =
  'id, member_id, credential_id, public_key, counter, transports, name, backed_up, created_at, last_used_at, disabled_at';
const SESSION_COLUMNS =
  'id, member_id AS "memberId", passkey_id AS "passkeyId", created_at AS "createdAt", expires_at AS "expiresAt", revoked_at AS "revokedAt", device, last_used_at AS "lastUsedAt"';

/**
 * Taken by every putChallenge for its transaction: the count and the insert must not interleave
 * with another's (SQLite's immediate transaction), or two callers could both see limit − 1.
 * Takes are not held up: a challenge taken meanwhile only lowers the count.
 */
const CHALLENGE_LOCK = '7342914530152170018';

const stmt = statements('passkeys');

const S = {
  insertInvite: stmt(
    'insertInvite',
    'INSERT INTO passkey_invites (id, member_id, secret_hash, created_at, expires_at, used_at) VALUES ($1, $2, $3, $4, $5, $6)',
  ),
  getInvite: stmt(
    'getInvite',
    'SELECT id, member_id AS "memberId", secret_hash AS "secretHash", created_at AS "createdAt", expires_at AS "expiresAt", used_at AS "usedAt" FROM passkey_invites WHERE id = $1',
  ),
  useInvite: stmt('useInvite', 'UPDATE passkey_invites SET used_at = $1 WHERE id = $2 AND used_at IS NULL'),
  lockChallenges: stmt('lockChallenges', 'SELECT pg_advisory_xact_lock($1::bigint)'),
  pruneChallenges: stmt('pruneChallenges', 'DELETE FROM webauthn_challenges WHERE expires_at <= $1'),
  countChallenges: stmt('countChallenges', 'SELECT count(*)::int AS n FROM webauthn_challenges'),
  insertChallenge: stmt(
    'insertChallenge',
    'INSERT INTO webauthn_challenges (challenge, kind, invite_id, member_id, operation, expires_at) VALUES ($1, $2, $3, $4, $5, $6)',
  ),
  takeChallenge: stmt(
    'takeChallenge',
    'DELETE FROM webauthn_challenges WHERE challenge = $1 RETURNING challenge, kind, invite_id AS "inviteId", member_id AS "memberId", operation, expires_at AS "expiresAt"',
  ),
  insertPasskey: stmt('insertPasskey', `INSERT INTO passkeys (${PASSKEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`),
  byCredential: stmt('byCredential', `SELECT ${PASSKEY_COLUMNS} FROM passkeys WHERE credential_id = $1`),
  byId: stmt('byId', `SELECT ${PASSKEY_COLUMNS} FROM passkeys WHERE id = $1`),
  byMember: stmt('byMember', `SELECT ${PASSKEY_COLUMNS} FROM passkeys WHERE member_id = $1 ORDER BY created_at, id`),
  recordUse: stmt('recordUse', 'UPDATE passkeys SET counter = $1, last_used_at = $2 WHERE id = $3 AND counter = $4'),
  disable: stmt('disable', 'UPDATE passkeys SET disabled_at = coalesce(disabled_at, $1) WHERE id = $2'),
  // One statement: the sessions it opened end as it goes.
  deletePasskey: stmt(
    'deletePasskey',
    `WITH ended AS (UPDATE sessions SET revoked_at = $2 WHERE passkey_id = $1 AND revoked_at IS NULL)
     DELETE FROM passkeys WHERE id = $1`,
  ),
  insertSession: stmt(
    'insertSession',
    'INSERT INTO sessions (id, member_id, secret_hash, created_at, expires_at, revoked_at, passkey_id, device, last_used_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)',
  ),
  liveSessions: stmt(
    'liveSessions',
    `SELECT ${SESSION_COLUMNS} FROM sessions WHERE member_id = $1 AND revoked_at IS NULL AND expires_at > $2
     ORDER BY created_at DESC, id DESC`,
  ),
  sessionOwner: stmt('sessionOwner', 'SELECT member_id FROM sessions WHERE id = $1'),
  session: stmt('session', `SELECT ${SESSION_COLUMNS} FROM sessions WHERE id = $1`),
  endSession: stmt('endSession', 'UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL AND expires_at > $1'),
};

export class PgPasskeyStore implements PasskeyStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async createInvite(i: InviteRecord): Promise<void> {
    await this.pool.query(S.insertInvite([i.id, i.memberId, i.secretHash, i.createdAt, i.expiresAt, i.usedAt]));
  }

  async getInvite(id: string): Promise<InviteRecord | null> {
    return rowOf<InviteRecord>(this.pool, S.getInvite([id]));
  }

  async useInvite(id: string, at: number): Promise<boolean> {
    return (await changed(this.pool, S.useInvite([at, id]))) > 0;
  }

  async putChallenge(ch: ChallengeRecord, now: number, limit: number): Promise<boolean> {
    return inTransaction(this.pool, async (c) => {
      await c.query(S.lockChallenges([CHALLENGE_LOCK]));
      await c.query(S.pruneChallenges([now]));
      if ((await rowOf<{ n: number }>(c, S.countChallenges([])))!.n >= limit) return false;
      await c.query(S.insertChallenge([ch.challenge, ch.kind, ch.inviteId, ch.memberId, ch.operation, ch.expiresAt]));
      return true;
    });
  }

  async takeChallenge(challenge: string): Promise<ChallengeRecord | null> {
    return rowOf<ChallengeRecord>(this.pool, S.takeChallenge([challenge]));
  }

  async createPasskey(p: PasskeyRecord): Promise<void> {
    try {
      await this.pool.query(
        S.insertPasskey([
          p.id,
          p.memberId,
          p.credentialId,
          p.publicKey,
          p.counter,
          p.transports.join(' '),
          p.name,
          p.backedUp,
          p.createdAt,
          p.lastUsedAt,
          p.disabledAt,
        ]),
      );
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError('passkey');
      throw err;
    }
  }

  async getPasskeyByCredential(credentialId: string): Promise<PasskeyRecord | null> {
    const r = await rowOf<PasskeyRow>(this.pool, S.byCredential([credentialId]));
    return r ? toPasskey(r) : null;
  }

  async getPasskey(id: string): Promise<PasskeyRecord | null> {
    const r = await rowOf<PasskeyRow>(this.pool, S.byId([id]));
    return r ? toPasskey(r) : null;
  }

  async listPasskeys(memberId: string): Promise<PasskeyRecord[]> {
    return (await rowsOf<PasskeyRow>(this.pool, S.byMember([memberId]))).map(toPasskey);
  }

  async recordUse(id: string, fromCounter: number, toCounter: number, at: number): Promise<boolean> {
    return (await changed(this.pool, S.recordUse([toCounter, at, id, fromCounter]))) > 0;
  }

  async disablePasskey(id: string, at: number): Promise<void> {
    await this.pool.query(S.disable([at, id]));
  }

  async deletePasskey(id: string, at: number): Promise<boolean> {
    return (await changed(this.pool, S.deletePasskey([id, at]))) > 0;
  }

  async createSession(s: MemberSession & { secretHash: Buffer }): Promise<void> {
    await this.pool.query(
      S.insertSession([s.id, s.memberId, s.secretHash, s.createdAt, s.expiresAt, s.revokedAt, s.passkeyId, s.device, s.lastUsedAt]),
    );
  }

  async listLiveSessions(memberId: string, now: number): Promise<MemberSession[]> {
    return rowsOf<MemberSession>(this.pool, S.liveSessions([memberId, now]));
  }

  async getSessionOwner(id: string): Promise<string | null> {
    return (await rowOf<{ member_id: string }>(this.pool, S.sessionOwner([id])))?.member_id ?? null;
  }

  async getSession(id: string): Promise<MemberSession | null> {
    return rowOf<MemberSession>(this.pool, S.session([id]));
  }

  async endSession(id: string, at: number): Promise<boolean> {
    return (await changed(this.pool, S.endSession([at, id]))) > 0;
  }
}
