// The member's OpenPGP key pair, made in this browser. The private key is stored on the server
// only encrypted: a random data key (AES-256-GCM) encrypts it, and that data key is wrapped once
// per unlock method: under a key derived (HKDF-SHA256) from a passkey's PRF output, or under one
// derived (scrypt) from a passphrase the member chooses. The server sees none of these keys.
import { bufferToBase64URLString as b64u, base64URLStringToBuffer } from '@simplewebauthn/browser';
import { scryptAsync } from '@noble/hashes/scrypt.js';
import { generateKey, readKey } from 'openpgp';
import type { KeyBackup, UserKeySet } from '../schemas/wire.ts';
import { api, ApiError, SIGNED_OUT } from './api.ts';
import { confirmWithPasskey, unlockingWith, type Unlocking } from './passkey.ts';

/** scrypt at OWASP's recommended minimum (N=2^17, r=8, p=1: 128 MiB, about a second). */
export const SCRYPT = { N: 2 ** 17, r: 8, p: 1 } as const;

type Wrap =
  | { kind: 'prf'; credentialId: string; iv: string; wrapped: string }
  | { kind: 'passphrase'; kdf: 'scrypt'; N: number; r: number; p: number; salt: string; iv: string; wrapped: string };

interface Envelope {
  v: 1;
  fingerprint: string;
  /** The armored private key, encrypted under the data key. */
  key: { iv: string; data: string };
  wraps: Wrap[];
}

export interface UnlockedKey {
  fingerprint: string;
  privateKey: string;
  /** Where the public key went: PUT /me/key (the crypto part of the API) may not exist yet. */
  publicKeyStatus: string;
  methods: Array<Wrap['kind']>;
}

/**
 * Asks the member for a passphrase: to choose one (`create`) or to unlock (`unlock`, with the last
 * error); `device` when there is none and only a signed-in device can hand the key over. Rejects
 * with KeyHandedOver when another device handed the key over instead (adoptKey).
 */
export type AskPassphrase = (mode: 'create' | 'unlock' | 'device', error?: string) => Promise<string>;

const enc = new TextEncoder();
const dec = new TextDecoder();
const bytes = (s: string) => new Uint8Array(base64URLStringToBuffer(s));
const random = (n: number) => crypto.getRandomValues(new Uint8Array(n));
const WRAP_AAD = enc.encode('postern/data-key/v1');

async function aesKey(raw: Uint8Array, usages: KeyUsage[]): Promise<CryptoKey> {
  return crypto.subtle.importKey('raw', raw as BufferSource, 'AES-GCM', false, usages);
}

async function prfKey(prf: Uint8Array): Promise<CryptoKey> {
  const base = await crypto.subtle.importKey('raw', prf as BufferSource, 'HKDF', false, ['deriveKey']);
  return crypto.subtle.deriveKey(
    { name: 'HKDF', hash: 'SHA-256', salt: new Uint8Array(0), info: enc.encode('postern/key-wrap/prf/v1') },
    base,
    { name: 'AES-GCM', length: 256 },
    false,
    ['encrypt', 'decrypt'],
  );
}

async function passphraseKey(passphrase: string, salt: Uint8Array, params: { N: number; r: number; p: number }): Promise<CryptoKey> {
  const raw = await scryptAsync(enc.encode(passphrase.normalize('NFKC')), salt, { ...params, dkLen: 32 });
  return aesKey(raw, ['encrypt', 'decrypt']);
}

async function wrapWith(kek: CryptoKey, dataKey: Uint8Array): Promise<{ iv: string; wrapped: string }> {
  const iv = random(12);
  const wrapped = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: WRAP_AAD }, kek, dataKey as BufferSource);
  return { iv: b64u(iv.buffer), wrapped: b64u(wrapped) };
}

/** The data key, or null when this key-encryption key is not the one (AES-GCM refuses). */
async function unwrapWith(kek: CryptoKey, wrap: { iv: string; wrapped: string }): Promise<Uint8Array | null> {
  try {
    return new Uint8Array(
      await crypto.subtle.decrypt(
        { name: 'AES-GCM', iv: bytes(wrap.iv) as BufferSource, additionalData: WRAP_AAD },
        kek,
        bytes(wrap.wrapped),
      ),
    );
  } catch {
    return null;
  }
}

async function prfWrap(unlocking: Unlocking & { prf: Uint8Array }, dataKey: Uint8Array): Promise<Wrap> {
  return { kind: 'prf', credentialId: unlocking.credentialId, ...(await wrapWith(await prfKey(unlocking.prf), dataKey)) };
}

async function passphraseWrap(passphrase: string, dataKey: Uint8Array): Promise<Wrap> {
  const salt = random(16);
  const kek = await passphraseKey(passphrase, salt, SCRYPT);
  return { kind: 'passphrase', kdf: 'scrypt', ...SCRYPT, salt: b64u(salt.buffer), ...(await wrapWith(kek, dataKey)) };
}

const encode = (e: Envelope) => b64u(enc.encode(JSON.stringify(e)).buffer);
const decode = (blob: string) => JSON.parse(dec.decode(bytes(blob))) as Envelope;

async function stored(): Promise<{ envelope: Envelope; version: number } | null> {
  try {
    const r = await api<KeyBackup>('GET', '/me/key-backup');
    return { envelope: decode(r.blob), version: r.version };
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

async function save(envelope: Envelope, replaces: number): Promise<number> {
  const r = await api<KeyBackup>('PUT', '/me/key-backup', { blob: encode(envelope), replaces });
  return r.version;
}

/**
 * PUT /me/key. The first key rides on the sign-in that just happened; replacing a key the server
 * already has (this member's key backup was lost, say), or a first key set long after sign-in,
 * is refused with 403 until a passkey confirms it: then the ceremony runs and the request again.
 */
async function putPublicKey(publicKey: string): Promise<UserKeySet> {
  try {
    return await api<UserKeySet>('PUT', '/me/key', { publicKey });
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 403)) throw err;
  }
  return api<UserKeySet>('PUT', '/me/key', { publicKey, reauth: await confirmWithPasskey('replace-key') });
}

async function registerPublicKey(publicKey: string, fingerprint: string): Promise<string> {
  try {
    const r = await putPublicKey(publicKey);
    return r.fingerprint?.toLowerCase() === fingerprint.toLowerCase()
      ? 'published'
      : 'published, but the server reports another fingerprint';
  } catch (err) {
    if (err instanceof ApiError && (err.status === 404 || err.status === 405)) return 'not published: this server cannot keep it yet';
    return `not published: ${(err as Error).message}`;
  }
}

/** Current state, kept between the member's actions on the home screen. */
let current: { envelope: Envelope; version: number; dataKey: Uint8Array; unlocked: UnlockedKey } | null = null;

export const unlockedKey = (): UnlockedKey | null => current?.unlocked ?? null;
export const forgetKey = (): void => {
  // The data key is ours to wipe; the key's text is a JS string and goes with the last reference.
  current?.dataKey.fill(0);
  current = null;
};
window.addEventListener(SIGNED_OUT, forgetKey);

/**
 * After sign-in: makes the key pair on the member's first sign-in, else unlocks the stored key
 * with this passkey's PRF output, or the passphrase. A passkey with PRF that has no wrapping yet
 * gets one, so next time it unlocks without the passphrase.
 */
export async function openKey(email: string, unlocking: Unlocking, ask: AskPassphrase): Promise<UnlockedKey> {
  const found = await stored();
  if (!found) {
    const { privateKey, publicKey } = await generateKey({ type: 'curve25519', userIDs: [{ email }], format: 'armored' });
    const fingerprint = (await readKey({ armoredKey: publicKey })).getFingerprint();
    const dataKey = random(32);
    const iv = random(12);
    const data = await crypto.subtle.encrypt({ name: 'AES-GCM', iv }, await aesKey(dataKey, ['encrypt']), enc.encode(privateKey));
    const wrap = unlocking.prf
      ? await prfWrap({ ...unlocking, prf: unlocking.prf }, dataKey)
      : await passphraseWrap(await ask('create'), dataKey);
    const envelope: Envelope = { v: 1, fingerprint, key: { iv: b64u(iv.buffer), data: b64u(data) }, wraps: [wrap] };
    const version = await save(envelope, 0);
    const unlocked = {
      fingerprint,
      privateKey,
      publicKeyStatus: await registerPublicKey(publicKey, fingerprint),
      methods: methodsOf([wrap]),
    };
    current = { envelope, version, dataKey, unlocked };
    return unlocked;
  }
  return unlockStored(found, unlocking, ask);
}

/** The unlock methods in use, each kind once (several passkeys are still "passkeys"). */
const methodsOf = (wraps: Wrap[]): Array<Wrap['kind']> => [...new Set(wraps.map((w) => w.kind))];

/** Opens the stored key with this passkey's PRF output (when it has a wrapping), else the passphrase. */
async function unlockStored(
  found: { envelope: Envelope; version: number },
  unlocking: Unlocking | null,
  ask: AskPassphrase,
): Promise<UnlockedKey> {
  let { envelope, version } = found;
  let dataKey: Uint8Array | null = null;
  const own = unlocking && envelope.wraps.find((w) => w.kind === 'prf' && w.credentialId === unlocking.credentialId);
  if (unlocking?.prf && own) dataKey = await unwrapWith(await prfKey(unlocking.prf), own);
  const byPassphrase = envelope.wraps.find((w): w is Extract<Wrap, { kind: 'passphrase' }> => w.kind === 'passphrase');
  let error: string | undefined;
  asking = unlocking;
  while (!dataKey && byPassphrase) {
    const passphrase = await ask('unlock', error);
    dataKey = await unwrapWith(await passphraseKey(passphrase, bytes(byPassphrase.salt), byPassphrase), byPassphrase);
    error = 'That passphrase does not unlock your key.';
  }
  // No passphrase either: only a signed-in device can hand the key over (this rejects).
  if (!dataKey) await ask('device');
  if (!dataKey) throw new Error('This passkey cannot unlock your key on this device.');
  if (unlocking?.prf && !own) {
    envelope = { ...envelope, wraps: [...envelope.wraps, await prfWrap({ ...unlocking, prf: unlocking.prf }, dataKey)] };
    version = await save(envelope, version);
  }
  const key = await crypto.subtle.decrypt(
    { name: 'AES-GCM', iv: bytes(envelope.key.iv) as BufferSource },
    await aesKey(dataKey, ['decrypt']),
    bytes(envelope.key.data),
  );
  const unlocked = {
    fingerprint: envelope.fingerprint,
    privateKey: dec.decode(key),
    publicKeyStatus: 'published earlier',
    methods: methodsOf(envelope.wraps),
  };
  current = { envelope, version, dataKey, unlocked };
  return unlocked;
}

/** What can unlock the stored key again (a passkey prompt, the passphrase); null when there is no key. */
export async function howToUnlock(): Promise<{ passkey: boolean; passphrase: boolean } | null> {
  const found = await stored();
  if (!found) return null;
  return {
    passkey: found.envelope.wraps.some((w) => w.kind === 'prf'),
    passphrase: found.envelope.wraps.some((w) => w.kind === 'passphrase'),
  };
}

/**
 * Unlocks the key again in a tab whose session survived (a reload, a tab opened from this one):
 * one passkey prompt for the PRF output of a passkey the key is wrapped for, or the passphrase
 * when none is (or `usePassphrase`). The key itself was never stored in the browser
 * (docs/app.md, "A reload: one passkey prompt, never a sign-out").
 */
export async function unlockAgain(ask: AskPassphrase, usePassphrase = false): Promise<UnlockedKey> {
  const found = await stored();
  if (!found) throw new Error('You have no encryption key yet: sign out and sign in again to make one.');
  const ids = found.envelope.wraps.flatMap((w) => (w.kind === 'prf' ? [w.credentialId] : []));
  const unlocking = ids.length && !usePassphrase ? await unlockingWith(ids) : null;
  return unlockStored(found, unlocking, ask);
}

/**
 * A passkey just added on this device, while the key is unlocked here: its PRF output wraps the
 * data key at once, so it unlocks without the passphrase from now on. False when it gave no PRF
 * output (the passphrase stays its way in) or the key is locked here.
 */
export async function addUnlockingPasskey(unlocking: Unlocking): Promise<boolean> {
  if (!current || !unlocking.prf) return false;
  const wrap = await prfWrap({ ...unlocking, prf: unlocking.prf }, current.dataKey);
  const withWrap = (e: Envelope): Envelope => ({
    ...e,
    wraps: [...e.wraps.filter((w) => !(w.kind === 'prf' && w.credentialId === unlocking.credentialId)), wrap],
  });
  let envelope = withWrap(current.envelope);
  try {
    current.version = await save(envelope, current.version);
  } catch (err) {
    // Another device wrote its own unlock method meanwhile: add ours to what it wrote.
    if (!(err instanceof ApiError && err.status === 409)) throw err;
    const found = await stored();
    if (!found || found.envelope.fingerprint !== current.envelope.fingerprint) throw err;
    envelope = withWrap(found.envelope);
    current.version = await save(envelope, found.version);
  }
  current.envelope = envelope;
  current.unlocked = { ...current.unlocked, methods: methodsOf(envelope.wraps) };
  return true;
}

/** Thrown in place of a passphrase when the key came from another device (adoptKey) instead. */
export class KeyHandedOver extends Error {}

/** The passkey that signed in while the passphrase is asked for: the key received is wrapped for it. */
let asking: Unlocking | null = null;

/** What a signed-in device seals to a new one: a copy of the data key, or null when the key is locked here. */
export const handoverSecret = (): Uint8Array | null => (current ? current.dataKey.slice() : null);

/**
 * On a new device: the data key another device sealed to it (web/handover.ts) opens the stored
 * key here; AES-GCM refuses a wrong one, and the key opened must be the one the backup names.
 * Wrapped at once for the passkey that signed in, when it gives PRF output (as "Add a passkey").
 */
export async function adoptKey(dataKey: Uint8Array): Promise<UnlockedKey> {
  const found = await stored();
  if (!found) throw new Error('You have no encryption key yet: sign out and sign in again to make one.');
  const { envelope, version } = found;
  const key = await crypto.subtle.decrypt(
    { name: 'AES-GCM', iv: bytes(envelope.key.iv) as BufferSource },
    await aesKey(dataKey, ['decrypt']),
    bytes(envelope.key.data),
  );
  const privateKey = dec.decode(key);
  if ((await readKey({ armoredKey: privateKey })).getFingerprint().toLowerCase() !== envelope.fingerprint.toLowerCase())
    throw new Error('The key from the other device is not your key: refuse the request there.');
  const unlocked = {
    fingerprint: envelope.fingerprint,
    privateKey,
    publicKeyStatus: 'published earlier',
    methods: methodsOf(envelope.wraps),
  };
  current = { envelope, version, dataKey, unlocked };
  if (asking) await addUnlockingPasskey(asking);
  asking = null;
  return current.unlocked;
}

/** Adds (or replaces) the passphrase that unlocks the key where no passkey PRF is available. */
export async function setPassphrase(passphrase: string): Promise<UnlockedKey> {
  if (!current) throw new Error('unlock your key first');
  const wraps = [...current.envelope.wraps.filter((w) => w.kind !== 'passphrase'), await passphraseWrap(passphrase, current.dataKey)];
  const envelope = { ...current.envelope, wraps };
  current.version = await save(envelope, current.version);
  current.envelope = envelope;
  current.unlocked = { ...current.unlocked, methods: methodsOf(wraps) };
  return current.unlocked;
}
