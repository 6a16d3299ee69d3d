// The passkeys' rows as both engines return them (same table and columns), and their mapping to
// the domain's records. One column differs by engine: `backed_up` is a 0/1 INTEGER on SQLite and
// a BOOLEAN on PostgreSQL, so each adapter says what it read (`B`) and converts it itself.
import type { PasskeyRecord } from '../../../lib/auth/ports.ts';

export interface PasskeyRow<B> {
  id: string;
  member_id: string;
  credential_id: string;
  public_key: Buffer;
  counter: number;
  transports: string;
  name: string;
  backed_up: B;
  created_at: number;
  last_used_at: number | null;
  disabled_at: number | null;
}

/** The record of a row whose `backed_up` the engine's adapter has read as `backedUp`. */
export const passkeyOf = (r: PasskeyRow<unknown>, backedUp: boolean): PasskeyRecord => ({
  id: r.id,
  memberId: r.member_id,
  credentialId: r.credential_id,
  publicKey: r.public_key,
  counter: r.counter,
  transports: r.transports ? r.transports.split(' ') : [],
  name: r.name,
  backedUp,
  createdAt: r.created_at,
  lastUsedAt: r.last_used_at,
  disabledAt: r.disabled_at,
});
