// API tokens (`svc_<token id>_<secret>`), web session tokens (`<session id>_<secret>`) and
// passkey enrollment invites (`<invite id>_<secret>`).
// Only a SHA-256 of the secret is stored: the secret is 256 random bits, so a slow hash would
// add latency to every request without adding safety.
import { hash as digest, randomBytes, timingSafeEqual } from 'node:crypto';
import { newId } from '../ids.ts';

const SECRET = '[A-Za-z0-9_-]{43}';
const TOKEN_FORMAT = new RegExp(`^svc_(tok_[0-9A-Z]{26})_(${SECRET})$`);
const SESSION_FORMAT = new RegExp(`^(ses_[0-9A-Z]{26})_(${SECRET})$`);
const INVITE_FORMAT = new RegExp(`^(inv_[0-9A-Z]{26})_(${SECRET})$`);

export interface Minted {
  id: string;
  /** The whole credential, shown once. */
  credential: string;
  secretHash: Buffer;
}

const hash = (secret: string): Buffer => digest('sha256', secret, 'buffer');

export function mintToken(): Minted {
  const id = newId('tok');
  const secret = randomBytes(32).toString('base64url');
  return { id, credential: `svc_${id}_${secret}`, secretHash: hash(secret) };
}

export function mintSession(): Minted {
  const id = newId('ses');
  const secret = randomBytes(32).toString('base64url');
  return { id, credential: `${id}_${secret}`, secretHash: hash(secret) };
}

/** A passkey enrollment invite (`inv_<id>_<secret>`): single-use, carried in the enrollment link. */
export function mintInvite(): Minted {
  const id = newId('inv');
  const secret = randomBytes(32).toString('base64url');
  return { id, credential: `${id}_${secret}`, secretHash: hash(secret) };
}

export interface ParsedCredential {
  id: string;
  secret: string;
}

export function parseToken(text: string): ParsedCredential | null {
  const m = TOKEN_FORMAT.exec(text);
  return m ? { id: m[1]!, secret: m[2]! } : null;
}

export function parseSession(text: string): ParsedCredential | null {
  const m = SESSION_FORMAT.exec(text);
  return m ? { id: m[1]!, secret: m[2]! } : null;
}

export function parseInvite(text: string): ParsedCredential | null {
  const m = INVITE_FORMAT.exec(text);
  return m ? { id: m[1]!, secret: m[2]! } : null;
}

/** Constant-time comparison of a presented secret with the stored hash. */
export function secretMatches(secret: string, storedHash: Buffer): boolean {
  const given = hash(secret);
  return given.length === storedHash.length && timingSafeEqual(given, storedHash);
}
