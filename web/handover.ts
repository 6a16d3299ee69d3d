// Handing the member's key from a signed-in device to a new one (docs/encryption.md, "Handing the
// key to a new device"), with WebCrypto alone: the new device makes an ephemeral ECDH P-256 key
// pair and posts the public half; the signed-in device makes its own, derives an AES-GCM key with
// HKDF-SHA-256 from the shared secret, and seals the key to it. The server relays public keys and
// ciphertext. The short code both screens show is made from the new device's public key, so a
// server that put its own key in the request would show another code on the signed-in device.
import { bufferToBase64URLString as b64u, base64URLStringToBuffer } from '@simplewebauthn/browser';
import { concatBytes } from './bytes.ts';

const INFO = new TextEncoder().encode('postern key handover v1');
const CODE_PREFIX = new TextEncoder().encode('postern key handover code v1\0');
const ECDH = { name: 'ECDH', namedCurve: 'P-256' } as const;

const base64url = (bytes: Uint8Array): string => b64u(bytes.slice().buffer);
const fromBase64url = (text: string) => new Uint8Array(base64URLStringToBuffer(text));
/** Joined into a fresh buffer, as WebCrypto takes it. */
const joined = (...parts: Uint8Array[]) => new Uint8Array(concatBytes(parts));
type Key = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

/** An ephemeral key pair: the private half stays in this tab and cannot be exported. */
export interface HandoverKeys {
  privateKey: Key;
  /** The raw uncompressed point, base64url: what the request carries. */
  publicKey: string;
}

async function keyPair(): Promise<HandoverKeys> {
  const pair = await crypto.subtle.generateKey(ECDH, false, ['deriveBits']);
  return { privateKey: pair.privateKey, publicKey: base64url(new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey))) };
}

/** The new device's request keys. */
export const requestKeys = keyPair;

/** Six digits, grouped "123 456", that both screens show for one request. */
export async function shortCode(requesterKey: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', joined(CODE_PREFIX, fromBase64url(requesterKey))));
  const n = new DataView(digest.buffer).getUint32(0) % 1_000_000;
  const digits = n.toString().padStart(6, '0');
  return `${digits.slice(0, 3)} ${digits.slice(3)}`;
}

/** The AES-GCM key both ends derive; both public keys are bound in (salt, and additional data). */
async function sharedKey(privateKey: Key, peerKey: string, requesterKey: string, approverKey: string): Promise<Key> {
  const peer = await crypto.subtle.importKey('raw', fromBase64url(peerKey), ECDH, false, []);
  const secret = await crypto.subtle.deriveBits({ name: 'ECDH', public: peer }, privateKey, 256);
  const hkdf = await crypto.subtle.importKey('raw', secret, 'HKDF', false, ['deriveKey']);
  const salt = joined(fromBase64url(requesterKey), fromBase64url(approverKey));
  return crypto.subtle.deriveKey({ name: 'HKDF', hash: 'SHA-256', salt, info: INFO }, hkdf, { name: 'AES-GCM', length: 256 }, false, [
    'encrypt',
    'decrypt',
  ]);
}

/** On the signed-in device: `secret` sealed to the request's key, with this side's public key. */
export async function sealTo(requesterKey: string, secret: Uint8Array): Promise<{ publicKey: string; sealed: string }> {
  const mine = await keyPair();
  const key = await sharedKey(mine.privateKey, requesterKey, requesterKey, mine.publicKey);
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const additionalData = joined(fromBase64url(requesterKey), fromBase64url(mine.publicKey));
  const ciphertext = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData }, key, new Uint8Array(secret)));
  return { publicKey: mine.publicKey, sealed: base64url(joined(iv, ciphertext)) };
}

/** On the new device: the secret, or a rejection when anything was changed on the way. */
export async function openFrom(keys: HandoverKeys, approverKey: string, sealed: string): Promise<Uint8Array> {
  const key = await sharedKey(keys.privateKey, approverKey, keys.publicKey, approverKey);
  const bytes = fromBase64url(sealed);
  const additionalData = joined(fromBase64url(keys.publicKey), fromBase64url(approverKey));
  return new Uint8Array(await crypto.subtle.decrypt({ name: 'AES-GCM', iv: bytes.slice(0, 12), additionalData }, key, bytes.slice(12)));
}
