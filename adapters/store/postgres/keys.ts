// The encryption stores on PostgreSQL: epoch keys, member keys, message keys (lib/crypto/ports.ts),
// the statements of the SQLite adapter (adapters/store/sqlite/keys.ts) one for one.
import type { Pool } from 'pg';
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
import { isUniqueViolation, rowOf, rowsOf, statements } from './sql.ts';

interface MemberKeyRow {
  member_id: string;
  public_key: Buffer;
  fingerprint: string;
  updated_at: number;
}

interface MessageKeyRow {
  inbox_id: string;
  msg_guid: string;
  epoch: number;
  wrapped_dek: Buffer;
  created_at: number;
}

const toMessageKey = (r: MessageKeyRow): MessageKeyRecord => ({
  inboxId: r.inbox_id,
  msgGuid: r.msg_guid,
  epoch: r.epoch,
  wrappedDek: new Uint8Array(r.wrapped_dek),
  createdAt: r.created_at,
});

const EPOCH_COLUMNS = 'inbox_id, epoch, public_key, fingerprint, sealed_private, created_at';
const MESSAGE_COLUMNS = 'inbox_id, msg_guid, epoch, wrapped_dek, created_at';

const stmt = statements('keys');

const S = {
  addEpoch: stmt('addEpoch', `INSERT INTO epoch_keys (${EPOCH_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)`),
  latest: stmt('latest', `SELECT ${EPOCH_COLUMNS} FROM epoch_keys WHERE inbox_id = $1 ORDER BY epoch DESC LIMIT 1`),
  get: stmt('get', `SELECT ${EPOCH_COLUMNS} FROM epoch_keys WHERE inbox_id = $1 AND epoch = $2`),
  list: stmt('list', `SELECT ${EPOCH_COLUMNS} FROM epoch_keys WHERE inbox_id = $1 ORDER BY epoch`),
  without: stmt('without', 'SELECT id FROM inboxes i WHERE NOT EXISTS (SELECT 1 FROM epoch_keys k WHERE k.inbox_id = i.id) ORDER BY id'),
  sample: stmt('sample', `SELECT ${EPOCH_COLUMNS} FROM epoch_keys LIMIT 1`),
  putMember: stmt(
    'putMember',
    `INSERT INTO member_keys (member_id, public_key, fingerprint, updated_at) VALUES ($1, $2, $3, $4)
     ON CONFLICT (member_id) DO UPDATE SET public_key = excluded.public_key, fingerprint = excluded.fingerprint, updated_at = excluded.updated_at`,
  ),
  getMember: stmt('getMember', 'SELECT member_id, public_key, fingerprint, updated_at FROM member_keys WHERE member_id = $1'),
  getMessage: stmt('getMessage', `SELECT ${MESSAGE_COLUMNS} FROM message_keys WHERE inbox_id = $1 AND msg_guid = $2`),
  // The row when this call inserted it; none when another writer was first.
  putMessageOnce: stmt(
    'putMessageOnce',
    `INSERT INTO message_keys (${MESSAGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (inbox_id, msg_guid) DO NOTHING RETURNING ${MESSAGE_COLUMNS}`,
  ),
};

export class PgKeyStore implements EpochKeyStore, MemberKeyStore, MessageKeyStore {
  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  async addEpoch(r: EpochKeyRecord): Promise<void> {
    try {
      await this.pool.query(
        S.addEpoch([r.inboxId, r.epoch, Buffer.from(r.publicKey), r.fingerprint, Buffer.from(r.sealedPrivate), r.createdAt]),
      );
    } catch (err) {
      if (isUniqueViolation(err)) throw new DuplicateError(`epoch ${r.epoch} of ${r.inboxId}`);
      throw err;
    }
  }

  async latest(inboxId: string): Promise<EpochKeyRecord | null> {
    const r = await rowOf<EpochRow>(this.pool, S.latest([inboxId]));
    return r ? toEpoch(r) : null;
  }

  async get(inboxId: string, epoch: number): Promise<EpochKeyRecord | null> {
    const r = await rowOf<EpochRow>(this.pool, S.get([inboxId, epoch]));
    return r ? toEpoch(r) : null;
  }

  async list(inboxId: string): Promise<EpochKeyRecord[]> {
    return (await rowsOf<EpochRow>(this.pool, S.list([inboxId]))).map(toEpoch);
  }

  async inboxesWithoutKeys(): Promise<string[]> {
    return (await rowsOf<{ id: string }>(this.pool, S.without([]))).map((r) => r.id);
  }

  async sample(): Promise<EpochKeyRecord | null> {
    const r = await rowOf<EpochRow>(this.pool, S.sample([]));
    return r ? toEpoch(r) : null;
  }

  async putMemberKey(r: MemberKeyRecord): Promise<void> {
    await this.pool.query(S.putMember([r.memberId, Buffer.from(r.publicKey), r.fingerprint, r.updatedAt]));
  }

  async getMemberKey(memberId: string): Promise<MemberKeyRecord | null> {
    const r = await rowOf<MemberKeyRow>(this.pool, S.getMember([memberId]));
    return r
      ? { memberId: r.member_id, publicKey: new Uint8Array(r.public_key), fingerprint: r.fingerprint, updatedAt: r.updated_at }
      : null;
  }

  async getMessageKey(inboxId: string, msgGuid: string): Promise<MessageKeyRecord | null> {
    const r = await rowOf<MessageKeyRow>(this.pool, S.getMessage([inboxId, msgGuid]));
    return r ? toMessageKey(r) : null;
  }

  async putMessageKeyOnce(r: MessageKeyRecord): Promise<MessageKeyRecord> {
    const inserted = await rowOf<MessageKeyRow>(
      this.pool,
      S.putMessageOnce([r.inboxId, r.msgGuid, r.epoch, Buffer.from(r.wrappedDek), r.createdAt]),
    );
    if (inserted) return toMessageKey(inserted);
    // Another writer was first: ON CONFLICT waited for its commit, so a new snapshot sees its row.
    return (await this.getMessageKey(r.inboxId, r.msgGuid))!;
  }
}
