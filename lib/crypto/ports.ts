// The ports the encryption part needs from storage. Asynchronous like every store port, so a
// PostgreSQL adapter can implement them; the SQLite adapter answers synchronously underneath.

/** One epoch key of an inbox as stored: the public key in clear, the private key sealed. */
export interface EpochKeyRecord {
  inboxId: string;
  epoch: number;
  /** Binary OpenPGP public key (transferable, with its self-signatures). */
  publicKey: Uint8Array;
  fingerprint: string;
  /** The binary OpenPGP private key sealed under the master key (MasterKey.seal). */
  sealedPrivate: Uint8Array;
  createdAt: number;
}

export interface EpochKeyStore {
  /** Fails with a DuplicateError when the inbox already has that epoch (a concurrent rotation). */
  addEpoch(record: EpochKeyRecord): Promise<void>;
  /** The inbox's newest epoch, or null when it has none yet. */
  latest(inboxId: string): Promise<EpochKeyRecord | null>;
  get(inboxId: string, epoch: number): Promise<EpochKeyRecord | null>;
  /** All of the inbox's epochs, oldest first. */
  list(inboxId: string): Promise<EpochKeyRecord[]>;
  /** Inboxes that have no epoch yet (made before keys existed). */
  inboxesWithoutKeys(): Promise<string[]>;
  /** Any one stored key, to prove at start-up that the master key opens them; null when none. */
  sample(): Promise<EpochKeyRecord | null>;
}

/** A member's OpenPGP public key (their member key, set up in the web app). */
export interface MemberKeyRecord {
  memberId: string;
  publicKey: Uint8Array;
  fingerprint: string;
  updatedAt: number;
}

export interface MemberKeyStore {
  putMemberKey(record: MemberKeyRecord): Promise<void>;
  getMemberKey(memberId: string): Promise<MemberKeyRecord | null>;
}

/** Per message, its session key sealed to an epoch key (the detail's `wrappedDek`). */
export interface MessageKeyRecord {
  inboxId: string;
  msgGuid: string;
  epoch: number;
  /** Binary PKESK packet(s). */
  wrappedDek: Uint8Array;
  createdAt: number;
}

export interface MessageKeyStore {
  getMessageKey(inboxId: string, msgGuid: string): Promise<MessageKeyRecord | null>;
  /** Keeps the first record written for a message: returns the one stored after the call. */
  putMessageKeyOnce(record: MessageKeyRecord): Promise<MessageKeyRecord>;
}

/** The member's encrypted private key (lib/crypto/key-backups.ts). */
export interface KeyBackup {
  blob: string;
  /** 1 for the first write, then one more per write. */
  version: number;
  updatedAt: number;
}

export interface KeyBackupStore {
  get(memberId: string): Promise<KeyBackup | null>;
  /** Writes when the stored version is `replaces` (0: none stored yet); the new version, or null. */
  put(memberId: string, blob: string, replaces: number, at: number): Promise<number | null>;
}

/**
 * A new device asking a signed-in one for the member's key (lib/crypto/key-handovers.ts): public
 * keys and ciphertext only, nothing the server can open.
 */
export interface KeyHandover {
  /** kho_… */
  id: string;
  memberId: string;
  /** The session of the new device that asked (ses_…): it alone may cancel as the asker. */
  requesterSession: string;
  /** The new device's name, from its User-Agent ("Chrome on Linux"); null when unknown. */
  device: string | null;
  /** The new device's ephemeral P-256 public key (base64url, raw point). */
  requesterKey: string;
  /** Set together on approval: the approving device's ephemeral public key and the sealed key. */
  approverKey: string | null;
  sealed: string | null;
  createdAt: number;
  expiresAt: number;
}

export interface KeyHandoverStore {
  /** Removes every expired hand-over, then adds `h` unless its member has `limit` left; false then. */
  create(h: KeyHandover, now: number, limit: number): Promise<boolean>;
  /** The member's hand-over when it has not expired at `now`. */
  get(memberId: string, id: string, now: number): Promise<KeyHandover | null>;
  /** The member's hand-overs not yet approved nor expired, oldest first. */
  listPending(memberId: string, now: number): Promise<KeyHandover[]>;
  /** Sets both fields on a pending, unexpired hand-over; false when there is none such. */
  approve(memberId: string, id: string, approverKey: string, sealed: string, now: number): Promise<boolean>;
  /** Removes it; false when there was none. */
  remove(memberId: string, id: string): Promise<boolean>;
}
