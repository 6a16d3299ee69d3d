// The service master key (POSTERN_MASTER_KEY) seals epoch private keys at rest: AES-256-GCM under
// a key derived from it, bound to what is sealed (inbox and epoch) so a sealed key cannot be
// swapped onto another row. The master key itself is never stored.
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';

export class MasterKeyError extends Error {}

const VERSION = 1;

export class MasterKey {
  private constructor(private readonly key: Buffer) {}

  /** 32+ bytes as hex or base64 (standard or url-safe); anything else is refused with the reason. */
  static parse(text: string | null | undefined): MasterKey {
    if (!text)
      throw new MasterKeyError(
        'POSTERN_MASTER_KEY is not set: it must hold 32 or more random bytes, hex or base64 (e.g. `openssl rand -base64 32`)',
      );
    const trimmed = text.trim();
    let bytes: Buffer;
    if (/^(?:[0-9a-fA-F]{2})+$/.test(trimmed)) bytes = Buffer.from(trimmed, 'hex');
    else if (/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) bytes = Buffer.from(trimmed.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    else throw new MasterKeyError('POSTERN_MASTER_KEY is malformed: it must be hex or base64');
    if (bytes.length < 32) throw new MasterKeyError(`POSTERN_MASTER_KEY is too short: ${bytes.length} bytes, 32 or more needed`);
    return new MasterKey(Buffer.from(hkdfSync('sha256', bytes, Buffer.alloc(0), 'postern epoch-key seal v1', 32)));
  }

  /** A fresh random master key, base64 (the demo makes one). */
  static generate(): string {
    return randomBytes(32).toString('base64');
  }

  /** version(1) ‖ nonce(12) ‖ ciphertext ‖ tag(16) */
  seal(plain: Uint8Array, context: string): Buffer {
    const nonce = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, nonce);
    cipher.setAAD(Buffer.from(context));
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return Buffer.concat([Buffer.from([VERSION]), nonce, body, cipher.getAuthTag()]);
  }

  /** Throws MasterKeyError when this master key did not seal it (or it was altered). */
  open(sealed: Uint8Array, context: string): Buffer {
    const buf = Buffer.from(sealed);
    if (buf.length < 29 || buf[0] !== VERSION) throw new MasterKeyError('a sealed key has an unknown format');
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, buf.subarray(1, 13));
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(buf.subarray(buf.length - 16));
      return Buffer.concat([decipher.update(buf.subarray(13, buf.length - 16)), decipher.final()]);
    } catch {
      throw new MasterKeyError('POSTERN_MASTER_KEY does not open the stored epoch keys (a different master key sealed them)');
    }
  }
}
