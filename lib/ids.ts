// The one id codec. Every public id is a prefix plus 26 Crockford base32 characters encoding
// 128 bits: minted ids are ULIDs (time-ordered), mailbox and message ids encode Dovecot GUIDs,
// so they decode back to what IMAP knows.
import { randomFillSync } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const DECODE = new Map([...ALPHABET].map((c, i) => [c, i]));

export const ID_PREFIXES = ['prj', 'mem', 'ibx', 'lbl', 'msg', 'tok', 'ses', 'evt', 'sys', 'inv', 'pky', 'whk', 'thr', 'kho'] as const;
export type IdPrefix = (typeof ID_PREFIXES)[number];

const BODY = /^[0-9A-Z]{26}$/;

/** 16 bytes → 26 characters (the top two of 130 bits are zero). */
export function encode128(bytes: Uint8Array): string {
  if (bytes.length !== 16) throw new TypeError('encode128 needs 16 bytes');
  // Five bits at a time off a small accumulator (BigInt arithmetic cost a microsecond an id).
  let acc = 0;
  let bits = 2;
  let out = '';
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += ALPHABET[(acc >> bits) & 31];
    }
    acc &= (1 << bits) - 1;
  }
  return out;
}

/** 26 characters → 16 bytes, or null when the text is not a canonical encoding. */
export function decode128(text: string): Buffer | null {
  if (!BODY.test(text)) return null;
  const first = DECODE.get(text[0]!);
  // The first character carries the two zero bits above the 128.
  if (first === undefined || first > 7) return null;
  const out = Buffer.alloc(16);
  let acc = first;
  let bits = 3;
  let at = 0;
  for (let i = 1; i < 26; i++) {
    const v = DECODE.get(text[i]!);
    if (v === undefined) return null;
    acc = (acc << 5) | v;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out[at++] = (acc >> bits) & 0xff;
      acc &= (1 << bits) - 1;
    }
  }
  return out;
}

export function formatId(prefix: IdPrefix, bytes: Uint8Array): string {
  return `${prefix}_${encode128(bytes)}`;
}

/** The 16 bytes behind an id of the given prefix, or null for anything malformed. */
export function parseId(prefix: IdPrefix, id: unknown): Buffer | null {
  if (typeof id !== 'string' || !id.startsWith(`${prefix}_`)) return null;
  return decode128(id.slice(prefix.length + 1));
}

export function isId(prefix: IdPrefix, id: unknown): id is string {
  return parseId(prefix, id) !== null;
}

const POOL = Buffer.alloc(4096);
let poolAt = POOL.length;

/**
 * Random bytes (the CSPRNG's) from a pool refilled 4 KB at a time: each call to the CSPRNG costs
 * more than the few bytes an id needs, as with randomUUID's own cache.
 */
export function randomId(bytes: number): Buffer {
  if (poolAt + bytes > POOL.length) {
    randomFillSync(POOL);
    poolAt = 0;
  }
  const out = Buffer.from(POOL.subarray(poolAt, poolAt + bytes));
  POOL.fill(0, poolAt, poolAt + bytes);
  poolAt += bytes;
  return out;
}

let lastTime = 0;
let lastRandom: Buffer = Buffer.alloc(10);

/** A new ULID-style id: 48 bits of milliseconds, 80 random bits, monotonic within a millisecond. */
export function newId(prefix: IdPrefix, now = Date.now()): string {
  let random: Buffer;
  if (now <= lastTime) {
    now = lastTime;
    random = Buffer.from(lastRandom);
    for (let i = 9; i >= 0; i--) {
      random[i] = (random[i]! + 1) & 0xff;
      if (random[i] !== 0) break;
    }
  } else {
    random = randomId(10);
  }
  lastTime = now;
  lastRandom = random;
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(now, 0, 6);
  random.copy(bytes, 6);
  return formatId(prefix, bytes);
}

/** A GUID in the hex form Dovecot prints (32 hex digits) → id. */
export function idFromGuid(prefix: 'lbl' | 'msg' | 'thr', guidHex: string): string {
  return formatId(prefix, Buffer.from(guidHex, 'hex'));
}

/** id → the hex GUID Dovecot knows, or null. */
export function guidFromId(prefix: 'lbl' | 'msg' | 'thr', id: unknown): string | null {
  return parseId(prefix, id)?.toString('hex') ?? null;
}
