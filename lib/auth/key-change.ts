// PUT /me/key: the member's OpenPGP key is what `/keys` seals every epoch key to, so whoever sets
// it can read the member's zero-access mail. A session alone may not replace it: that needs a
// fresh passkey assertion (Passkeys.authorizeKeyChange), and every change is in the project log.
// Staff set a member's key without one (`postern admin member set-key`: setKeyByStaff), logged the same way.
import type { UserKeySet } from '../../schemas/wire.ts';
import type { AuthenticationResponseJSON } from '@simplewebauthn/server';
import { readMemberKey, type MemberKeys } from '../crypto/member-keys.ts';
import type { DirectoryStore } from '../directory/ports.ts';
import { notFound } from '../errors.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import { isId } from '../ids.ts';
import type { Principal } from './access.ts';
import type { Passkeys } from './passkeys.ts';

export class MemberKeyChange {
  constructor(
    private readonly passkeys: Passkeys,
    private readonly memberKeys: MemberKeys,
    private readonly events: EventLog,
  ) {}

  /** Sets the session's member's key; `reauth` answers a 'replace-key' challenge (403 when needed and missing). */
  async set(session: Principal, bytes: Uint8Array, reauth: AuthenticationResponseJSON | undefined): Promise<UserKeySet> {
    // The key is checked before the challenge is spent: a typo does not cost a ceremony.
    const fingerprint = (await readMemberKey(bytes)).getFingerprint().toUpperCase();
    const previous = await this.memberKeys.fingerprint(session.memberId);
    // The same key again changes nothing anyone can read.
    if (previous === fingerprint) return { fingerprint };
    const proof = await this.passkeys.authorizeKeyChange(session.memberId, session.credentialId, previous === null, reauth);
    const set = await this.memberKeys.set(session.memberId, bytes);
    await this.events.record({
      type: 'access.key.set',
      projectId: session.projectId,
      actor: session.actor,
      subject: session.memberId,
      data: {
        memberId: session.memberId,
        fingerprint: set.fingerprint,
        ...(previous ? { previousFingerprint: previous } : {}),
        confirmedBy: proof.confirmedBy,
        ...(proof.passkeyId ? { passkeyId: proof.passkeyId } : {}),
      },
    });
    return set;
  }
}

/**
 * Staff set a member's key (`postern admin member set-key`): no ceremony, but in the project log
 * like a member's own change, since it widens who can read the member's mail.
 */
export async function setKeyByStaff(
  o: { directory: DirectoryStore; memberKeys: MemberKeys; events: EventLog },
  memberId: string,
  /** The key's bytes, read once the member is known to exist. */
  readKey: () => Uint8Array,
): Promise<UserKeySet & { memberId: string }> {
  const member = isId('mem', memberId) ? await o.directory.getMember(memberId) : null;
  if (!member) throw notFound(`no member ${memberId}`);
  const bytes = readKey();
  const previous = await o.memberKeys.fingerprint(memberId);
  const set = await o.memberKeys.set(memberId, bytes);
  if (set.fingerprint !== previous) {
    await o.events.record({
      type: 'access.key.set',
      projectId: member.projectId,
      actor: SYSTEM_ACTOR,
      subject: memberId,
      data: { memberId, fingerprint: set.fingerprint, ...(previous ? { previousFingerprint: previous } : {}), confirmedBy: 'staff' },
    });
  }
  return { memberId, ...set };
}
