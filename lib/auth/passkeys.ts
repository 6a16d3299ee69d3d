// Passkey enrollment and sign-in (WebAuthn). Staff invite a member; the invite link registers a
// passkey; a discoverable passkey signs in and gets a web session (the same `ses_…` sessions
// staff can issue). Every ceremony is checked against the one configured origin and its RP ID,
// each challenge is answered at most once and lives CHALLENGE_TTL_MS, and a signature counter
// that does not grow disables the passkey (WebAuthn §6.1.1: a possibly cloned authenticator).
// A session is not enough to widen what it can reach: adding a passkey or replacing the member's
// key needs a fresh assertion (re-authentication) from one of the member's passkeys, answering a
// challenge issued for that operation at most `reauthMaxAgeSeconds` before (docs/app.md).
import {
  generateAuthenticationOptions,
  generateRegistrationOptions,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
  type AuthenticationResponseJSON,
  type PublicKeyCredentialCreationOptionsJSON,
  type PublicKeyCredentialRequestOptionsJSON,
  type RegistrationResponseJSON,
} from '@simplewebauthn/server';
import type { Passkey, Session, SignedIn } from '../../schemas/wire.ts';
import type { DirectoryStore } from '../directory/ports.ts';
import { DuplicateError } from '../directory/ports.ts';
import type { Member } from '../directory/types.ts';
import { type DomainError, conflict, forbidden, gone, invalid, notFound, rateLimited, unauthenticated } from '../errors.ts';
import { isId, newId, parseId } from '../ids.ts';
import { mintInvite, mintSession, parseInvite, secretMatches } from './credentials.ts';
import type { EventLog } from '../events/log.ts';
import type { CeremonyKind, ChallengeRecord, MemberSession, PasskeyRecord, PasskeyStore, ReauthOperation } from './ports.ts';

export const CHALLENGE_TTL_MS = 5 * 60_000;
/** POSTERN_REAUTH_MAX_AGE's default. */
export const REAUTH_MAX_AGE_SECONDS = 300;
/** Unanswered challenges at most: sign-in options are public, so they must not fill the store. */
export const MAX_PENDING_CHALLENGES = 10_000;

export interface PasskeyOptions {
  /** POSTERN_APP_ORIGIN: the only origin ceremonies are accepted from; its host is the RP ID. */
  origin: string;
  rpName: string;
  sessionTtlSeconds: number;
  inviteTtlSeconds: number;
  /** POSTERN_REAUTH_MAX_AGE: how old a re-authentication challenge (and a "fresh" session) may be. */
  reauthMaxAgeSeconds?: number;
  /** The project log, where every passkey added is recorded (lib/wiring/passkeys.ts builds both the server's and the staff commands'). */
  events: EventLog;
  now?: () => number;
}

/** How a key change was confirmed: a fresh assertion, or (the first key only) a fresh session. */
export type KeyChangeProof = { confirmedBy: 'passkey'; passkeyId: string } | { confirmedBy: 'fresh-session'; passkeyId: string | null };

const OPERATION_WORDS: Record<ReauthOperation, string> = {
  'replace-key': 'replacing your encryption key',
  'add-passkey': 'adding a passkey',
};

const iso = (ms: number) => new Date(ms).toISOString();

export function passkeyView(p: PasskeyRecord): Passkey {
  return {
    id: p.id,
    name: p.name,
    createdAt: iso(p.createdAt),
    lastUsedAt: p.lastUsedAt === null ? null : iso(p.lastUsedAt),
    backedUp: p.backedUp,
    disabled: p.disabledAt !== null,
  };
}

/** The challenge a response answers, read from its clientDataJSON (verified again by the library). */
function answeredChallenge(clientDataJSON: string): string {
  try {
    const data = JSON.parse(Buffer.from(clientDataJSON, 'base64url').toString('utf8')) as { challenge?: unknown };
    if (typeof data.challenge === 'string' && data.challenge) return data.challenge;
  } catch {
    // fall through
  }
  throw invalid('clientDataJSON is not a WebAuthn client data object');
}

export class Passkeys {
  readonly origin: string;
  readonly rpId: string;
  private readonly now: () => number;
  private readonly reauthMaxAgeMs: number;

  constructor(
    private readonly store: PasskeyStore,
    private readonly directory: DirectoryStore,
    private readonly options: PasskeyOptions,
  ) {
    const url = new URL(options.origin);
    this.origin = url.origin;
    this.rpId = url.hostname;
    this.now = options.now ?? Date.now;
    this.reauthMaxAgeMs = (options.reauthMaxAgeSeconds ?? REAUTH_MAX_AGE_SECONDS) * 1000;
  }

  /** Staff: a one-time enrollment link for the member. */
  async invite(memberId: string, expiresInSeconds?: number): Promise<{ inviteId: string; link: string; expiresAt: string }> {
    const member = await this.member(memberId);
    const ttl = expiresInSeconds ?? this.options.inviteTtlSeconds;
    if (!Number.isSafeInteger(ttl) || ttl <= 0) throw invalid('expiry must be a positive whole number of seconds');
    const now = this.now();
    const minted = mintInvite();
    const expiresAt = now + ttl * 1000;
    await this.store.createInvite({
      id: minted.id,
      memberId: member.id,
      secretHash: minted.secretHash,
      createdAt: now,
      expiresAt,
      usedAt: null,
    });
    // In the fragment: browsers send it to no server, so it stays out of logs and Referer headers.
    return { inviteId: minted.id, link: `${this.origin}/app/#enroll=${minted.credential}`, expiresAt: iso(expiresAt) };
  }

  /** Creation options for the member an invite names (400/404/410 for a bad invite). */
  async enrollOptions(invite: string): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const { record, member } = await this.openInvite(invite);
    return this.creationOptions(member, 'enroll', record.id);
  }

  /** Registers the passkey, uses up the invite and signs the member in. */
  async enroll(
    invite: string,
    response: RegistrationResponseJSON,
    name: string | undefined,
    device: string | null = null,
  ): Promise<SignedIn & { passkey: Passkey }> {
    const { record, member } = await this.openInvite(invite);
    const challenge = await this.take(response.response.clientDataJSON, 'enroll', invalid);
    if (challenge.inviteId !== record.id) throw invalid('this challenge was issued for another invite');
    const passkey = await this.register(member, response, name, challenge.challenge);
    await this.save(passkey);
    // The invite is spent only by a registration that verified; of two racing ones, the first wins.
    if (!(await this.store.useInvite(record.id, this.now()))) {
      await this.store.deletePasskey(passkey.id, this.now());
      throw gone('this invite has already been used');
    }
    await this.recordAdded(member, passkey, { via: 'invite' });
    const session = await this.openSession(member, passkey.id, device);
    return { ...session, passkey: passkeyView(passkey) };
  }

  /** Creation options for one more passkey of a signed-in member. */
  async addOptions(memberId: string): Promise<PublicKeyCredentialCreationOptionsJSON> {
    return this.creationOptions(await this.member(memberId), 'add', null);
  }

  /**
   * Registers one more passkey: a passkey signs in for as long as it exists, so a stolen session
   * must not be able to add its own. `reauth` is a fresh assertion for 'add-passkey' (403 without).
   */
  async add(
    memberId: string,
    response: RegistrationResponseJSON,
    name: string | undefined,
    reauth: AuthenticationResponseJSON | undefined,
  ): Promise<Passkey> {
    const member = await this.member(memberId);
    const confirmedWith = await this.confirm(member.id, 'add-passkey', reauth);
    const challenge = await this.take(response.response.clientDataJSON, 'add', invalid);
    if (challenge.memberId !== member.id) throw invalid('this challenge was issued to another member');
    const passkey = await this.register(member, response, name, challenge.challenge);
    await this.save(passkey);
    await this.recordAdded(member, passkey, { via: 'session', confirmedWith: confirmedWith.id });
    return passkeyView(passkey);
  }

  /**
   * Request options for re-authentication before `operation`: one of the member's own passkeys
   * (listed, so the browser offers no other), user verification required. 409 when the member
   * has none to answer with (a staff-issued session of a member who never enrolled).
   */
  async reauthOptions(memberId: string, operation: ReauthOperation): Promise<PublicKeyCredentialRequestOptionsJSON> {
    const member = await this.member(memberId);
    const usable = (await this.store.listPasskeys(member.id)).filter((p) => p.disabledAt === null);
    if (usable.length === 0)
      throw conflict(
        `${OPERATION_WORDS[operation]} needs one of your passkeys to confirm it, and you have none: enroll one from a staff invitation`,
      );
    const maxAge = this.reauthMaxAgeMs;
    const options = await generateAuthenticationOptions({
      rpID: this.rpId,
      userVerification: 'required',
      timeout: maxAge,
      allowCredentials: usable.map((p) => ({ id: p.credentialId, transports: p.transports as never })),
    });
    await this.keep({
      challenge: options.challenge,
      kind: 'reauth',
      inviteId: null,
      memberId: member.id,
      operation,
      expiresAt: this.now() + maxAge,
    });
    return options;
  }

  /**
   * The member's passkey that just confirmed `operation`: `response` answers a challenge issued
   * to this member for this operation, at most reauthMaxAgeSeconds ago, unused, with user
   * verification. Every failure is a 403: the session stays good, only this operation is refused.
   */
  async confirm(memberId: string, operation: ReauthOperation, response: AuthenticationResponseJSON | undefined): Promise<PasskeyRecord> {
    if (!response) {
      throw forbidden(
        `re-authentication required: ${OPERATION_WORDS[operation]} needs a fresh passkey confirmation (POST /me/reauth/options with operation "${operation}", then send the passkey's answer as "reauth")`,
      );
    }
    const refused = (message: string) => forbidden(`re-authentication refused: ${message}`);
    const challenge = await this.take(response.response.clientDataJSON, 'reauth', refused);
    if (challenge.memberId !== memberId) throw refused('this challenge was issued to another member');
    if (challenge.operation !== operation) throw refused(`this challenge was issued for another operation (${challenge.operation})`);
    const { passkey } = await this.verifyAssertion(response, challenge.challenge, 're-authentication', forbidden);
    if (passkey.memberId !== memberId) throw refused('the passkey is not one of yours');
    return passkey;
  }

  /**
   * Whether the member's key may become another one. Replacing a key always needs a fresh
   * assertion for 'replace-key'. The first key (none set yet) may instead rely on the session
   * being at most reauthMaxAgeSeconds old: the web app sets it right after the enrollment or
   * sign-in ceremony that opened the session, and a first key seals nothing the member could
   * read before (docs/app.md says what this leaves open).
   */
  async authorizeKeyChange(
    memberId: string,
    sessionId: string,
    first: boolean,
    reauth: AuthenticationResponseJSON | undefined,
  ): Promise<KeyChangeProof> {
    if (first && !reauth) {
      const session = await this.store.getSession(sessionId);
      if (session && session.memberId === memberId && session.createdAt >= this.now() - this.reauthMaxAgeMs) {
        return { confirmedBy: 'fresh-session', passkeyId: session.passkeyId };
      }
    }
    const passkey = await this.confirm(memberId, 'replace-key', reauth);
    return { confirmedBy: 'passkey', passkeyId: passkey.id };
  }

  /** Request options for a discoverable credential: no account is named before the passkey answers. */
  async signInOptions(): Promise<PublicKeyCredentialRequestOptionsJSON> {
    const options = await generateAuthenticationOptions({ rpID: this.rpId, userVerification: 'required', timeout: CHALLENGE_TTL_MS });
    await this.keep({
      challenge: options.challenge,
      kind: 'sign-in',
      inviteId: null,
      memberId: null,
      operation: null,
      expiresAt: this.now() + CHALLENGE_TTL_MS,
    });
    return options;
  }

  async signIn(response: AuthenticationResponseJSON, device: string | null = null): Promise<SignedIn> {
    // Taken first: a challenge is spent by any answer, so a failed attempt cannot be retried.
    const challenge = await this.take(response.response.clientDataJSON, 'sign-in', unauthenticated);
    const { passkey, member } = await this.verifyAssertion(response, challenge.challenge, 'sign-in', unauthenticated);
    return this.openSession(member, passkey.id, device);
  }

  /**
   * Checks an assertion (sign-in or re-authentication) by a registered passkey against the
   * challenge it answers, and records its counter; `status` builds the error for a bad one.
   */
  private async verifyAssertion(
    response: AuthenticationResponseJSON,
    expectedChallenge: string,
    what: 'sign-in' | 're-authentication',
    status: (message: string) => DomainError,
  ): Promise<{ passkey: PasskeyRecord; member: Member }> {
    const fail = (message: string) => status(`${what} refused: ${message}`);
    const passkey = await this.store.getPasskeyByCredential(response.id);
    if (!passkey) throw fail('unknown passkey: it is not registered here (or was removed)');
    if (passkey.disabledAt !== null) {
      throw forbidden(
        'this passkey is disabled: a sign-in showed a signature counter that went backwards (a possible clone); remove it and enroll again',
      );
    }
    const member = await this.directory.getMember(passkey.memberId);
    if (!member) throw fail('unknown passkey');
    const handle = response.response.userHandle;
    if (handle && handle !== this.userId(member).toString('base64url')) throw fail('the passkey answered for another account');
    let verified;
    try {
      // Counter 0 here: the library's own counter check would refuse a clone without telling it
      // apart from a bad signature; ours runs below, once the signature is known to be good.
      verified = await verifyAuthenticationResponse({
        response,
        expectedChallenge,
        expectedOrigin: this.origin,
        expectedRPID: this.rpId,
        credential: { id: passkey.credentialId, publicKey: new Uint8Array(passkey.publicKey), counter: 0, transports: passkey.transports },
        requireUserVerification: true,
      });
    } catch (err) {
      throw fail((err as Error).message);
    }
    if (!verified.verified) throw fail('the signature does not verify');
    const counter = verified.authenticationInfo.newCounter;
    const now = this.now();
    // WebAuthn §7.2 step 21: a counter that does not grow (when either side uses counters)
    // means another copy of the credential signed meanwhile. Refuse, and stop trusting it.
    if ((counter > 0 || passkey.counter > 0) && counter <= passkey.counter) {
      await this.store.disablePasskey(passkey.id, now);
      throw forbidden(
        `${what} refused: the signature counter went backwards (a possibly cloned authenticator); the passkey is now disabled`,
      );
    }
    if (!(await this.store.recordUse(passkey.id, passkey.counter, counter, now))) {
      // Another use with the same counter value got there first: the same clone signal.
      await this.store.disablePasskey(passkey.id, now);
      throw forbidden(`${what} refused: two uses of the passkey had the same signature counter; the passkey is now disabled`);
    }
    return { passkey, member };
  }

  async listPasskeys(memberId: string): Promise<Passkey[]> {
    return (await this.store.listPasskeys(memberId)).map(passkeyView);
  }

  /** Removes one of the member's passkeys and ends the sessions it opened. */
  async removePasskey(memberId: string, passkeyId: string): Promise<void> {
    const passkey = isId('pky', passkeyId) ? await this.store.getPasskey(passkeyId) : null;
    if (!passkey || passkey.memberId !== memberId) throw notFound('passkey not found');
    await this.store.deletePasskey(passkey.id, this.now());
  }

  async listSessions(memberId: string, currentSessionId: string): Promise<Session[]> {
    const sessions = await this.store.listLiveSessions(memberId, this.now());
    return sessions.map((s: MemberSession) => ({
      id: s.id,
      passkeyId: s.passkeyId,
      createdAt: iso(s.createdAt),
      expiresAt: iso(s.expiresAt),
      device: s.device,
      lastUsedAt: s.lastUsedAt === null ? null : iso(s.lastUsedAt),
      current: s.id === currentSessionId,
    }));
  }

  /** Ends one of the member's sessions at once (sign-out is this for the current one). */
  async endSession(memberId: string, sessionId: string): Promise<void> {
    const owner = isId('ses', sessionId) ? await this.store.getSessionOwner(sessionId) : null;
    if (owner !== memberId) throw notFound('session not found');
    if (!(await this.store.endSession(sessionId, this.now()))) throw notFound('session not found (it has already ended)');
  }

  private async creationOptions(
    member: Member,
    kind: CeremonyKind,
    inviteId: string | null,
  ): Promise<PublicKeyCredentialCreationOptionsJSON> {
    const existing = await this.store.listPasskeys(member.id);
    const options = await generateRegistrationOptions({
      rpName: this.options.rpName,
      rpID: this.rpId,
      userName: member.email,
      userID: new Uint8Array(this.userId(member)),
      timeout: CHALLENGE_TTL_MS,
      attestationType: 'none',
      excludeCredentials: existing.map((p) => ({ id: p.credentialId, transports: p.transports })),
      // Discoverable: sign-in names no account. Verified: the passkey is the only factor.
      authenticatorSelection: { residentKey: 'required', requireResidentKey: true, userVerification: 'required' },
    });
    await this.keep({
      challenge: options.challenge,
      kind,
      inviteId,
      memberId: member.id,
      operation: null,
      expiresAt: this.now() + CHALLENGE_TTL_MS,
    });
    return options;
  }

  /** Verifies a registration response against the origin and RP ID; the passkey is not stored yet. */
  private async register(
    member: Member,
    response: RegistrationResponseJSON,
    name: string | undefined,
    challenge: string,
  ): Promise<PasskeyRecord> {
    let verified;
    try {
      verified = await verifyRegistrationResponse({
        response,
        expectedChallenge: challenge,
        expectedOrigin: this.origin,
        expectedRPID: this.rpId,
        requireUserVerification: true,
      });
    } catch (err) {
      throw invalid(`passkey registration refused: ${(err as Error).message}`);
    }
    if (!verified.verified) throw invalid('passkey registration refused: the attestation does not verify');
    const info = verified.registrationInfo;
    const now = this.now();
    return {
      id: newId('pky'),
      memberId: member.id,
      credentialId: info.credential.id,
      publicKey: Buffer.from(info.credential.publicKey),
      counter: info.credential.counter,
      transports: info.credential.transports ?? response.response.transports ?? [],
      name: name?.trim() || `Passkey ${new Date(now).toISOString().slice(0, 10)}`,
      backedUp: info.credentialBackedUp,
      createdAt: now,
      lastUsedAt: null,
      disabledAt: null,
    };
  }

  private async save(passkey: PasskeyRecord): Promise<void> {
    try {
      await this.store.createPasskey(passkey);
    } catch (err) {
      if (err instanceof DuplicateError) throw conflict('this passkey is already registered');
      throw err;
    }
  }

  /** Every passkey a member gains is in the project log: one the member did not add is seen there. */
  private async recordAdded(
    member: Member,
    passkey: PasskeyRecord,
    how: { via: 'invite' } | { via: 'session'; confirmedWith: string },
  ): Promise<void> {
    await this.options.events.record({
      type: 'access.passkey.added',
      projectId: member.projectId,
      actor: member.id,
      subject: member.id,
      data: {
        memberId: member.id,
        passkeyId: passkey.id,
        name: passkey.name,
        via: how.via,
        ...(how.via === 'session' ? { confirmedWith: how.confirmedWith } : {}),
      },
    });
  }

  private async keep(challenge: ChallengeRecord): Promise<void> {
    if (!(await this.store.putChallenge(challenge, this.now(), MAX_PENDING_CHALLENGES))) {
      throw rateLimited('too many passkey ceremonies in progress; try again in a few minutes', 60);
    }
  }

  /** The stored challenge this response answers, spent now; `fail` builds the error for a bad one. */
  private async take(clientDataJSON: string, kind: CeremonyKind, fail: (message: string) => DomainError): Promise<ChallengeRecord> {
    const record = await this.store.takeChallenge(answeredChallenge(clientDataJSON));
    if (!record) throw fail('unknown or already answered challenge: ask for new options');
    if (record.expiresAt <= this.now()) throw fail('challenge expired: ask for new options');
    if (record.kind !== kind) throw fail(`this challenge was issued for another ceremony (${record.kind})`);
    return record;
  }

  private async openInvite(invite: string) {
    const parsed = parseInvite(invite);
    if (!parsed) throw invalid('malformed invite: use the whole enrollment link staff sent');
    const record = await this.store.getInvite(parsed.id);
    if (!record || !secretMatches(parsed.secret, record.secretHash)) throw notFound('invite not found');
    if (record.usedAt !== null) throw gone('this invite has already been used: ask staff for a new one');
    if (record.expiresAt <= this.now()) throw gone('this invite has expired: ask staff for a new one');
    const member = await this.member(record.memberId);
    return { record, member };
  }

  private async openSession(member: Member, passkeyId: string, device: string | null): Promise<SignedIn> {
    const now = this.now();
    const minted = mintSession();
    const expiresAt = now + this.options.sessionTtlSeconds * 1000;
    await this.store.createSession({
      id: minted.id,
      memberId: member.id,
      passkeyId,
      secretHash: minted.secretHash,
      createdAt: now,
      expiresAt,
      revokedAt: null,
      device,
      lastUsedAt: now,
    });
    return { session: minted.credential, expiresAt: iso(expiresAt), memberId: member.id, email: member.email, passkeyId };
  }

  /** WebAuthn user handle: the member id's 16 bytes (no e-mail address in the authenticator's handle). */
  private userId(member: Member): Buffer {
    return parseId('mem', member.id)!;
  }

  private async member(id: string): Promise<Member> {
    const member = isId('mem', id) ? await this.directory.getMember(id) : null;
    if (!member) throw notFound(`no member ${id}`);
    return member;
  }
}
