// Opening a message in the browser: the server never decrypts for the web app (docs/api.md, "What the service does"). Three
// reads: the detail (keyEpoch, wrappedDek: the PKESK sealing the message's session key to an
// epoch key), /keys (each epoch's private key sealed to the member's key), and /raw (the
// encrypted-data packet). readMessage(wrappedDek ‖ raw), decrypted with the epoch key, is the
// RFC 5322 message. Both inbox modes give exactly this shape (docs/encryption.md): compatible
// inboxes derive /raw from Dovecot's plaintext, zero-access ones store it, so one path opens both.
import { decrypt, readMessage, readPrivateKey, type PrivateKey } from 'openpgp';
import type { EpochKeyList, MessageDetail } from '../../schemas/wire.ts';
import { api, apiFetch, SIGNED_OUT } from '../api.ts';
import { concatBytes, fromBase64 } from '../bytes.ts';
import { unlockedKey } from '../keys.ts';

/** Opened epoch keys per inbox, for the member key that opened them: memory only, like that key. */
const epochCache = new Map<string, { fingerprint: string; keys: Map<number, PrivateKey> }>();
window.addEventListener(SIGNED_OUT, () => epochCache.clear());

async function memberKey(): Promise<{ fingerprint: string; key: PrivateKey }> {
  const unlocked = unlockedKey();
  if (!unlocked) throw new Error('Your encryption key is locked on this device: sign out and sign in again to unlock it.');
  // Made without a passphrase: its protection is the wrapped envelope (keys.ts), not OpenPGP's S2K.
  return { fingerprint: unlocked.fingerprint, key: await readPrivateKey({ armoredKey: unlocked.privateKey }) };
}

/** Every epoch key of the inbox, opened with the member's key; `refresh` after a rotation. */
async function epochKeys(inboxId: string, refresh: boolean): Promise<Map<number, PrivateKey>> {
  const { fingerprint, key } = await memberKey();
  const cached = epochCache.get(inboxId);
  if (cached && cached.fingerprint === fingerprint && !refresh) return cached.keys;
  const { epochs } = await api<EpochKeyList>('GET', `/inboxes/${inboxId}/keys`);
  const keys = new Map<number, PrivateKey>();
  for (const { epoch, wrapped } of epochs) {
    const message = await readMessage({ binaryMessage: fromBase64(wrapped) });
    const { data } = await decrypt({ message, decryptionKeys: key, format: 'binary' });
    keys.set(epoch, await readPrivateKey({ binaryKey: data }));
  }
  epochCache.set(inboxId, { fingerprint, keys });
  return keys;
}

/** The message's detail (metadata, keyEpoch, wrappedDek). */
export function messageDetail(inboxId: string, msgId: string): Promise<MessageDetail> {
  return api<MessageDetail>('GET', `/inboxes/${inboxId}/messages/${msgId}`);
}

/**
 * The message's original RFC 5322 bytes, decrypted in this browser with the member's unlocked key.
 * Pass the detail when already fetched, to save a request. Throws when the key is locked, the
 * member has no key registered (the server's 409), or the message is not there (404).
 */
export async function openMessage(inboxId: string, msgId: string, detail?: MessageDetail): Promise<Uint8Array> {
  const [d, rawResponse] = await Promise.all([
    detail ?? messageDetail(inboxId, msgId),
    // /raw is immutable (docs/api.md, "Messages"): the browser's private cache may answer it.
    apiFetch(`/inboxes/${inboxId}/messages/${msgId}/raw`),
  ]);
  let keys = await epochKeys(inboxId, false);
  // A message sealed to an epoch newer than the cached keys: the inbox rotated since.
  if (!keys.has(d.keyEpoch)) keys = await epochKeys(inboxId, true);
  const epochKey = keys.get(d.keyEpoch);
  if (!epochKey) throw new Error('This message is encrypted with a key of this inbox that you have not been given.');
  const raw = new Uint8Array(await rawResponse.arrayBuffer());
  const message = await readMessage({ binaryMessage: concatBytes([fromBase64(d.wrappedDek), raw]) });
  const { data } = await decrypt({ message, decryptionKeys: epochKey, format: 'binary' });
  return data;
}

/**
 * A message the member sealed to the inbox's epoch key `epoch` (a zero-access draft, docs/sending.md,
 * "Drafts"), opened in this browser: the same packets as a stored message, in two fields.
 */
export async function openSealed(inboxId: string, sealed: { epoch: number; wrappedDek: string; ciphertext: string }): Promise<Uint8Array> {
  let keys = await epochKeys(inboxId, false);
  if (!keys.has(sealed.epoch)) keys = await epochKeys(inboxId, true);
  const epochKey = keys.get(sealed.epoch);
  if (!epochKey) throw new Error('This draft is encrypted with a key of this inbox that you have not been given.');
  const message = await readMessage({ binaryMessage: concatBytes([fromBase64(sealed.wrappedDek), fromBase64(sealed.ciphertext)]) });
  const { data } = await decrypt({ message, decryptionKeys: epochKey, format: 'binary' });
  return data;
}
