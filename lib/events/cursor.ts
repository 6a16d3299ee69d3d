// Cursors are opaque to clients and private to their project (docs/events.md, "Cursors"). A
// cursor names a position in the log, but the global position is the deployment's event count:
// handed out in clear, any project could watch everyone's event rate. So the position is
// encrypted under a key of the project's own, derived from a secret kept in the store (every
// process sharing the store mints and reads the same cursors):
//
//   cursor = base64url( 0x02 || AES-256(key(project), 8 zero bytes || position as uint64 BE) )
//
// One AES block used as a pseudorandom permutation: the same position always gives the same
// cursor (a resume is stable, a caught-up cursor stays put), and decrypting anything else,
// such as another project's cursor or an altered one, leaves the 8 zero bytes random: accepted
// with a chance of 2^-64. Only the server can order cursors (by decrypting them).
import { createCipheriv, createDecipheriv, hkdfSync, type Cipher, type Decipher } from 'node:crypto';

const VERSION = 2;
/** The first form: version 1 and the global position in clear, 12 characters. Refused now. */
const LEGACY = /^AQ[A-Za-z0-9_-]{10}$/;
const FORM = /^[A-Za-z0-9_-]{23}$/;
const MAX_KEYS = 10_000;

interface ProjectKey {
  encrypt: Cipher;
  decrypt: Decipher;
}

export class Cursors {
  // ECB over exactly one block keeps no state between calls, so each project's cipher objects
  // are made once and reused (creating them costs four times the encryption).
  private readonly keys = new Map<string, ProjectKey>();

  constructor(private readonly secret: Uint8Array) {
    if (secret.length < 32) throw new Error('the cursor secret must have at least 32 bytes');
  }

  encode(projectId: string, position: number): string {
    const block = Buffer.alloc(16);
    block.writeBigUInt64BE(BigInt(position), 8);
    const out = Buffer.alloc(17);
    out[0] = VERSION;
    this.key(projectId).encrypt.update(block).copy(out, 1);
    return out.toString('base64url');
  }

  /** The position a cursor of this project stands for; null for anything else. */
  decode(projectId: string, text: string): number | null {
    if (!FORM.test(text)) return null;
    const buf = Buffer.from(text, 'base64url');
    if (buf.length !== 17 || buf[0] !== VERSION) return null;
    const block = this.key(projectId).decrypt.update(buf.subarray(1));
    if (block.readBigUInt64BE(0) !== 0n) return null;
    const n = block.readBigUInt64BE(8);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) return null;
    // One position has one spelling (the last character carries 4 unused bits).
    if (buf.toString('base64url') !== text) return null;
    return Number(n);
  }

  /** A cursor of the first form, which carried the global position in clear. */
  static isLegacy(text: string): boolean {
    return LEGACY.test(text);
  }

  private key(projectId: string): ProjectKey {
    let k = this.keys.get(projectId);
    if (!k) {
      const key = Buffer.from(hkdfSync('sha256', this.secret, 'postern event cursors', projectId, 32));
      const encrypt = createCipheriv('aes-256-ecb', key, null).setAutoPadding(false);
      const decrypt = createDecipheriv('aes-256-ecb', key, null).setAutoPadding(false);
      k = { encrypt, decrypt };
      // Bounded: a key is cheap to derive again (about 10 µs).
      if (this.keys.size >= MAX_KEYS) this.keys.delete(this.keys.keys().next().value!);
      this.keys.set(projectId, k);
    }
    return k;
  }
}
