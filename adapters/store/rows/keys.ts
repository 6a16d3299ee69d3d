// The epoch keys' rows as both engines return them (same table and columns), and their mapping
// to the domain's records.
import type { EpochKeyRecord } from '../../../lib/crypto/ports.ts';

export interface EpochRow {
  inbox_id: string;
  epoch: number;
  public_key: Buffer;
  fingerprint: string;
  sealed_private: Buffer;
  created_at: number;
}

export const toEpoch = (r: EpochRow): EpochKeyRecord => ({
  inboxId: r.inbox_id,
  epoch: r.epoch,
  publicKey: new Uint8Array(r.public_key),
  fingerprint: r.fingerprint,
  sealedPrivate: new Uint8Array(r.sealed_private),
  createdAt: r.created_at,
});
