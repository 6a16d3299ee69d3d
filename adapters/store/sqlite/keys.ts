// The encryption stores on SQLite: epoch keys, member keys, message keys (lib/crypto/ports.ts).
import { DuplicateError } from '../../../lib/directory/ports.ts';
import type {
  EpochKeyRecord,
  EpochKeyStore,
  MemberKeyRecord,
  MemberKeyStore,
  MessageKeyRecord,
  MessageKeyStore,
} from '../../../lib/crypto/ports.ts';
import { toEpoch, type EpochRow } from '../rows/keys.ts';
import { isUniqueViolation, type Db } from './db.ts';

export class SqliteKeyStore implements EpochKeyStore, MemberKeyStore, MessageKeyStore {
  private readonly s;

  constructor(db: Db) {
    this.s = {
      addEpoch: db.prepare(`INSERT INTO epoch_keys (inbox_id, epoch, public_key, fingerprint, sealed_private, created_at)
        VALUES (@inboxId, @epoch, @publicKey, @fingerprint, @sealedPrivate, @createdAt)`),
      latest: db.prepare<[string], EpochRow>('SELECT * FROM epoch_keys WHERE inbox_id = ? ORDER BY epoch DESC LIMIT 1'),
      get: db.prepare<[string, number], EpochRow>('SELECT * FROM epoch_keys WHERE inbox_id = ? AND epoch = ?'),
      list: db.prepare<[string], EpochRow>('SELECT * FROM epoch_keys WHERE inbox_id = ? ORDER BY epoch'),
      without: db
        .prepare<[], string>('SELECT id FROM inboxes i WHERE NOT EXISTS (SELECT 1 FROM epoch_keys k WHERE k.inbox_id = i.id) ORDER BY id')
        .pluck(),
      sample: db.prepare<[], EpochRow>('SELECT * FROM epoch_keys LIMIT 1'),
      putMember:
        db.prepare(`INSERT INTO member_keys (member_id, public_key, fingerprint, updated_at) VALUES (@memberId, @publicKey, @fingerprint, @updatedAt)
        ON CONFLICT (member_id) DO UPDATE SET public_key = excluded.public_key, fingerprint = excluded.fingerprint, updated_at = excluded.updated_at`),
      getMember: db.prepare<[string], { member_id: string; public_key: Buffer; fingerprint: string; updated_at: number }>(
        'SELECT * FROM member_keys WHERE member_id = ?',
      ),
      getMessage: db.prepare<
        [string, string],
        { inbox_id: string; msg_guid: string; epoch: number; wrapped_dek: Buffer; created_at: number }
      >('SELECT * FROM message_keys WHERE inbox_id = ? AND msg_guid = ?'),
      putMessage:
        db.prepare(`INSERT INTO message_keys (inbox_id, msg_guid, epoch, wrapped_dek, created_at) VALUES (@inboxId, @msgGuid, @epoch, @wrappedDek, @createdAt)
        ON CONFLICT (inbox_id, msg_guid) DO NOTHING`),
    };
  }

  async addEpoch(record: EpochKeyRecord): Promise<void> {
    try {
      this.s.addEpoch.run({ ...record, publicKey: Buffer.from(record.publicKey), sealedPrivate: Buffer.from(record.sealedPrivate) });
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError(`epoch ${record.epoch} of ${record.inboxId}`);
      throw err;
    }
  }

  async latest(inboxId: string): Promise<EpochKeyRecord | null> {
    const r = this.s.latest.get(inboxId);
    return r ? toEpoch(r) : null;
  }

  async get(inboxId: string, epoch: number): Promise<EpochKeyRecord | null> {
    const r = this.s.get.get(inboxId, epoch);
    return r ? toEpoch(r) : null;
  }

  async list(inboxId: string): Promise<EpochKeyRecord[]> {
    return this.s.list.all(inboxId).map(toEpoch);
  }

  async inboxesWithoutKeys(): Promise<string[]> {
    return this.s.without.all();
  }

  async sample(): Promise<EpochKeyRecord | null> {
    const r = this.s.sample.get();
    return r ? toEpoch(r) : null;
  }

  async putMemberKey(record: MemberKeyRecord): Promise<void> {
    this.s.putMember.run({ ...record, publicKey: Buffer.from(record.publicKey) });
  }

  async getMemberKey(memberId: string): Promise<MemberKeyRecord | null> {
    const r = this.s.getMember.get(memberId);
    return r
      ? { memberId: r.member_id, publicKey: new Uint8Array(r.public_key), fingerprint: r.fingerprint, updatedAt: r.updated_at }
      : null;
  }

  async getMessageKey(inboxId: string, msgGuid: string): Promise<MessageKeyRecord | null> {
    const r = this.s.getMessage.get(inboxId, msgGuid);
    return r
      ? { inboxId: r.inbox_id, msgGuid: r.msg_guid, epoch: r.epoch, wrappedDek: new Uint8Array(r.wrapped_dek), createdAt: r.created_at }
      : null;
  }

  async putMessageKeyOnce(record: MessageKeyRecord): Promise<MessageKeyRecord> {
    this.s.putMessage.run({ ...record, wrappedDek: Buffer.from(record.wrappedDek) });
    return (await this.getMessageKey(record.inboxId, record.msgGuid))!;
  }
}
