// The port passkey sign-in needs from storage: invites, passkeys, ceremony challenges, and the
// sessions a passkey opens. Asynchronous like every store port (PostgreSQL comes later).
import type { ReauthOperation } from '../../schemas/wire.ts';

export interface InviteRecord {
  id: string;
  memberId: string;
  secretHash: Buffer;
  createdAt: number;
  expiresAt: number;
  usedAt: number | null;
}

export interface PasskeyRecord {
  id: string;
  memberId: string;
  /** base64url, as the authenticator names the credential. */
  credentialId: string;
  /** COSE public key. */
  publicKey: Buffer;
  counter: number;
  transports: string[];
  name: string;
  backedUp: boolean;
  createdAt: number;
  lastUsedAt: number | null;
  /** Set when a sign-in showed a signature counter that did not grow (a possible clone). */
  disabledAt: number | null;
}

export type CeremonyKind = 'enroll' | 'add' | 'sign-in' | 'reauth';

/** What a re-authentication confirms: each needs a challenge issued for it (docs/app.md). */
export type { ReauthOperation };

export interface ChallengeRecord {
  challenge: string;
  kind: CeremonyKind;
  inviteId: string | null;
  memberId: string | null;
  /** The operation a `reauth` challenge was issued for; null for the other kinds. */
  operation: ReauthOperation | null;
  expiresAt: number;
}

export interface MemberSession {
  id: string;
  memberId: string;
  passkeyId: string | null;
  createdAt: number;
  expiresAt: number;
  revokedAt: number | null;
  /** The device it was opened on, named from its User-Agent ("Chrome on Linux"); null when unknown. */
  device: string | null;
  /** When a request last used it (to the minute: lib/auth/access.ts); null before the first. */
  lastUsedAt: number | null;
}

export interface PasskeyStore {
  createInvite(invite: InviteRecord): Promise<void>;
  getInvite(id: string): Promise<InviteRecord | null>;
  /** Marks the invite used; false when it already was (another enrollment won the race). */
  useInvite(id: string, at: number): Promise<boolean>;

  /**
   * Stores a challenge after dropping expired ones; false (and nothing stored) when `limit`
   * unexpired challenges are already waiting, so unauthenticated callers cannot fill the store.
   */
  putChallenge(challenge: ChallengeRecord, now: number, limit: number): Promise<boolean>;
  /** Removes and returns the challenge: each is answered at most once. */
  takeChallenge(challenge: string): Promise<ChallengeRecord | null>;

  /** Fails with a DuplicateError when the credential is already registered. */
  createPasskey(passkey: PasskeyRecord): Promise<void>;
  getPasskeyByCredential(credentialId: string): Promise<PasskeyRecord | null>;
  getPasskey(id: string): Promise<PasskeyRecord | null>;
  listPasskeys(memberId: string): Promise<PasskeyRecord[]>;
  /** Records a verified sign-in's counter; false when the stored counter moved meanwhile. */
  recordUse(id: string, fromCounter: number, toCounter: number, at: number): Promise<boolean>;
  disablePasskey(id: string, at: number): Promise<void>;
  /** Deletes the passkey and ends the sessions it opened; false when there was none. */
  deletePasskey(id: string, at: number): Promise<boolean>;

  createSession(session: MemberSession & { secretHash: Buffer }): Promise<void>;
  /** The member's sessions that have not ended or expired, newest first. */
  listLiveSessions(memberId: string, now: number): Promise<MemberSession[]>;
  getSessionOwner(id: string): Promise<string | null>;
  getSession(id: string): Promise<MemberSession | null>;
  /** True when a live session was ended now. */
  endSession(id: string, at: number): Promise<boolean>;
}
