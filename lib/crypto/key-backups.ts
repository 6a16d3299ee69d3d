// The member's OpenPGP private key, as the web app stores it: encrypted in the browser under a
// key derived from a passkey (WebAuthn PRF) or a passphrase, neither of which the server sees.
// The server only keeps the opaque text, bounds its size, and refuses a write that would
// overwrite a version the writing device has not seen (two devices adding their unlock method).
import type * as Wire from '../../schemas/wire.ts';
import { conflict, notFound } from '../errors.ts';
import type { KeyBackupStore } from './ports.ts';

/** The stored text at most: an armored Curve25519 key with a few wrappings is under 4 KiB. */
export const MAX_KEY_BACKUP_CHARS = 64 * 1024;

export class KeyBackups {
  constructor(
    private readonly store: KeyBackupStore,
    private readonly now: () => number = Date.now,
  ) {}

  async get(memberId: string): Promise<Wire.KeyBackup> {
    const backup = await this.store.get(memberId);
    if (!backup) throw notFound('no encrypted key stored yet');
    return { blob: backup.blob, version: backup.version, updatedAt: new Date(backup.updatedAt).toISOString() };
  }

  async put(memberId: string, blob: string, replaces: number): Promise<Wire.KeyBackup> {
    const at = this.now();
    const version = await this.store.put(memberId, blob, replaces, at);
    if (version === null) throw conflict('the stored key changed since you read it (another device?): read it again, then write');
    return { blob, version, updatedAt: new Date(at).toISOString() };
  }
}
