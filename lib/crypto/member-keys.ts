// Members' OpenPGP public keys (member keys; docs/encryption.md, "Keys"): what `/keys` seals each epoch's
// private key to. Armored or binary; a key that cannot encrypt is refused with the reason.
import type { EpochKey, UserKeySet } from '../../schemas/wire.ts';
import * as openpgp from 'openpgp';
import { invalid, conflict } from '../errors.ts';
import type { EpochKeys } from './epoch-keys.ts';
import type { MemberKeyStore } from './ports.ts';

/** Most a member key may weigh: a certificate with a few subkeys and signatures is a few KB. */
export const MAX_MEMBER_KEY_BYTES = 64 * 1024;

/** Reads a public key; throws a 400 saying why it is not one Postern can seal to. */
export async function readMemberKey(bytes: Uint8Array): Promise<openpgp.PublicKey> {
  if (bytes.length === 0) throw invalid('the public key is empty');
  if (bytes.length > MAX_MEMBER_KEY_BYTES) throw invalid(`the public key is over ${MAX_MEMBER_KEY_BYTES / 1024} KB`);
  const text = Buffer.from(bytes).toString('latin1');
  let key: openpgp.Key;
  try {
    key = text.includes('-----BEGIN PGP') ? await openpgp.readKey({ armoredKey: text }) : await openpgp.readKey({ binaryKey: bytes });
  } catch (err) {
    throw invalid(`not an OpenPGP public key: ${(err as Error).message}`);
  }
  if (key.isPrivate()) throw invalid('that is a private key: send only the public key');
  try {
    await key.getEncryptionKey();
  } catch (err) {
    throw invalid(`the key cannot encrypt: ${(err as Error).message}`);
  }
  return key;
}

export class MemberKeys {
  constructor(
    private readonly store: MemberKeyStore,
    private readonly epochs: EpochKeys,
    private readonly now: () => number = Date.now,
  ) {}

  async set(memberId: string, bytes: Uint8Array): Promise<UserKeySet> {
    const key = await readMemberKey(bytes);
    const fingerprint = key.getFingerprint().toUpperCase();
    await this.store.putMemberKey({ memberId, publicKey: key.write(), fingerprint, updatedAt: this.now() });
    return { fingerprint };
  }

  /** The fingerprint of the member's key (upper-case hex), or null before they set one. */
  async fingerprint(memberId: string): Promise<string | null> {
    return (await this.store.getMemberKey(memberId))?.fingerprint ?? null;
  }

  /** docs/api.md, "Epoch keys": every epoch's private key, each sealed to the member's key; 409 without one. */
  async sealedEpochs(memberId: string, inboxId: string): Promise<EpochKey[]> {
    const record = await this.store.getMemberKey(memberId);
    if (!record) throw conflict('you have not set up your encryption key yet (PUT /me/key from the web app)');
    const memberKey = await openpgp.readKey({ binaryKey: record.publicKey });
    const out: Array<{ epoch: number; wrapped: string }> = [];
    for (const epoch of await this.epochs.epochs(inboxId)) {
      const priv = await this.epochs.privateKey(inboxId, epoch);
      const message = await openpgp.createMessage({ binary: priv.write(), format: 'binary' });
      const sealed = await openpgp.encrypt({ message, encryptionKeys: memberKey, format: 'binary' });
      out.push({ epoch, wrapped: Buffer.from(sealed).toString('base64') });
    }
    return out;
  }
}
