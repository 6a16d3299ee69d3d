// Epoch keys (docs/encryption.md, "Keys"): per inbox and epoch, an OpenPGP v4 key, Ed25519 primary and
// Curve25519 (ECDH) encryption subkey, so what Postern seals opens in mainstream PGP mail apps.
// Epoch 1 is made with the inbox; a rotation starts the next; old epochs stay readable. Private
// keys rest sealed under the master key (master-key.ts) and are kept opened in memory once used.
import * as openpgp from 'openpgp';
import { DuplicateError } from '../directory/ports.ts';
import { type MasterKey, MasterKeyError } from './master-key.ts';
import type { EpochKeyRecord, EpochKeyStore } from './ports.ts';

export interface EpochPublic {
  epoch: number;
  publicKey: openpgp.PublicKey;
  /** The binary OpenPGP public key (`epochPublic` is its base64). */
  publicBytes: Uint8Array;
  /** Upper-case hex v4 fingerprint of the primary key. */
  fingerprint: string;
}

/** The port the read, ingress and send paths use to seal to and open an inbox's epochs. */
export interface EpochKeys {
  /** The inbox's newest epoch: what new messages are sealed to. */
  current(inboxId: string): Promise<EpochPublic>;
  /** One epoch's public side; throws when the inbox has no such epoch. */
  publicKey(inboxId: string, epoch: number): Promise<EpochPublic>;
  /** One epoch's private key, opened; throws when the inbox has no such epoch. */
  privateKey(inboxId: string, epoch: number): Promise<openpgp.PrivateKey>;
  /** Every epoch of the inbox, oldest first. */
  epochs(inboxId: string): Promise<number[]>;
  /** Makes epoch 1 unless the inbox has an epoch already; returns the current one. */
  ensure(inboxId: string): Promise<EpochPublic>;
  /** Starts a new epoch and returns it. */
  rotate(inboxId: string): Promise<EpochPublic>;
  /** Throws (MasterKeyError) unless keys can be made: the master key is set and opens the stored ones. */
  check(): Promise<void>;
}

export class UnknownEpochError extends Error {}

const context = (inboxId: string, epoch: number) => `${inboxId}/${epoch}`;

/** Generates an epoch key pair in the form docs/encryption.md, "Keys" gives. */
export async function generateEpochKey(
  inboxId: string,
  epoch: number,
): Promise<{ privateKey: openpgp.PrivateKey; publicKey: openpgp.PublicKey }> {
  const { privateKey } = await openpgp.generateKey({
    type: 'ecc',
    curve: 'ed25519Legacy',
    userIDs: [{ name: `Postern ${inboxId} epoch ${epoch}` }],
    format: 'object',
    config: { v6Keys: false },
  });
  return { privateKey, publicKey: privateKey.toPublic() };
}

export class EpochKeyring implements EpochKeys {
  private readonly opened = new Map<string, openpgp.PrivateKey>();
  private readonly publics = new Map<string, EpochPublic>();
  /** Whether the master key was seen to open a stored key (or none existed). */
  private verified = false;

  constructor(
    private readonly store: EpochKeyStore,
    /** Null when no master key is configured: reading public keys works, anything private throws. */
    private readonly master: MasterKey | null,
    private readonly now: () => number = Date.now,
  ) {}

  async current(inboxId: string): Promise<EpochPublic> {
    const latest = await this.store.latest(inboxId);
    if (!latest) return this.ensure(inboxId);
    return this.toPublic(latest);
  }

  async publicKey(inboxId: string, epoch: number): Promise<EpochPublic> {
    const record = await this.store.get(inboxId, epoch);
    if (!record) throw new UnknownEpochError(`inbox ${inboxId} has no epoch ${epoch}`);
    return this.toPublic(record);
  }

  async privateKey(inboxId: string, epoch: number): Promise<openpgp.PrivateKey> {
    const key = context(inboxId, epoch);
    const hit = this.opened.get(key);
    if (hit) return hit;
    const record = await this.store.get(inboxId, epoch);
    if (!record) throw new UnknownEpochError(`inbox ${inboxId} has no epoch ${epoch}`);
    const opened = await this.open(record);
    this.opened.set(key, opened);
    return opened;
  }

  async epochs(inboxId: string): Promise<number[]> {
    return (await this.store.list(inboxId)).map((r) => r.epoch);
  }

  async ensure(inboxId: string): Promise<EpochPublic> {
    const latest = await this.store.latest(inboxId);
    if (latest) return this.toPublic(latest);
    return this.add(inboxId, 1);
  }

  async rotate(inboxId: string): Promise<EpochPublic> {
    const latest = await this.store.latest(inboxId);
    return this.add(inboxId, (latest?.epoch ?? 0) + 1);
  }

  /**
   * Start-up check and backfill: the master key must open the stored keys, and inboxes made
   * before keys existed get epoch 1. Throws MasterKeyError with the reason.
   */
  async prepare(): Promise<{ backfilled: string[] }> {
    const sample = await this.store.sample();
    if (sample) await this.open(sample);
    this.verified = true;
    const missing = await this.store.inboxesWithoutKeys();
    for (const inboxId of missing) await this.ensure(inboxId);
    return { backfilled: missing };
  }

  async check(): Promise<void> {
    this.requireMaster();
    // A wrong master key must not seal new keys beside ones it cannot open.
    if (!this.verified) {
      const sample = await this.store.sample();
      if (sample) await this.open(sample);
      this.verified = true;
    }
  }

  private async add(inboxId: string, epoch: number): Promise<EpochPublic> {
    const master = this.requireMaster();
    await this.check();
    const { privateKey, publicKey } = await generateEpochKey(inboxId, epoch);
    const record: EpochKeyRecord = {
      inboxId,
      epoch,
      publicKey: publicKey.write(),
      fingerprint: publicKey.getFingerprint().toUpperCase(),
      sealedPrivate: master.seal(privateKey.write(), context(inboxId, epoch)),
      createdAt: this.now(),
    };
    try {
      await this.store.addEpoch(record);
    } catch (err) {
      // Another process made this epoch at the same moment: theirs stands.
      if (!(err instanceof DuplicateError)) throw err;
      const stored = await this.store.get(inboxId, epoch);
      if (!stored) throw err;
      return this.toPublic(stored);
    }
    this.opened.set(context(inboxId, epoch), privateKey);
    return this.toPublic(record);
  }

  private async open(record: EpochKeyRecord): Promise<openpgp.PrivateKey> {
    const bytes = this.requireMaster().open(record.sealedPrivate, context(record.inboxId, record.epoch));
    return openpgp.readPrivateKey({ binaryKey: bytes });
  }

  private async toPublic(record: EpochKeyRecord): Promise<EpochPublic> {
    const key = context(record.inboxId, record.epoch);
    const hit = this.publics.get(key);
    if (hit) return hit;
    const publicKey = await openpgp.readKey({ binaryKey: record.publicKey });
    const value: EpochPublic = { epoch: record.epoch, publicKey, publicBytes: record.publicKey, fingerprint: record.fingerprint };
    this.publics.set(key, value);
    return value;
  }

  private requireMaster(): MasterKey {
    if (!this.master) throw new MasterKeyMissingError();
    return this.master;
  }
}

export class MasterKeyMissingError extends MasterKeyError {
  constructor() {
    super('POSTERN_MASTER_KEY is not set: epoch keys cannot be made or opened without it');
  }
}
