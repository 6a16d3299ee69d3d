// The mailbox index in SQLite (DESIGN.md 4). Statements are prepared once; every write goes
// through one transaction per batch so a label's sync state never runs ahead of its rows.
import type { Statement } from 'better-sqlite3';
import type { SpecialUse } from '../../../lib/mail/labels.ts';
import type { IndexOp, LabelState, Location, MailIndexStore, MessageRecord, PageRow, WatchLeases } from '../../../lib/mail/types.ts';
import type { Db } from './db.ts';

interface LabelRow {
  guid: string;
  path: string;
  special_use: string | null;
  uid_validity: number;
  uid_next: number;
  highest_modseq: number;
}

interface MessageRow {
  guid: string;
  size: number;
  received_at: number;
  date: string | null;
  from_text: string | null;
  to_text: string | null;
  cc_text: string | null;
  reply_to_text: string | null;
  subject: string | null;
  message_id: string | null;
  in_reply_to: string | null;
  from_address: string | null;
}

interface LocationRow {
  label_guid: string;
  uid: number;
  msg_guid: string;
  modseq: number;
  flags: string;
}

const toLabel = (r: LabelRow): LabelState => ({
  guid: r.guid,
  path: r.path,
  specialUse: r.special_use as SpecialUse | null,
  uidValidity: r.uid_validity,
  uidNext: r.uid_next,
  highestModseq: r.highest_modseq,
});

const toMessage = (r: MessageRow): MessageRecord => ({
  guid: r.guid,
  size: r.size,
  receivedAt: r.received_at,
  date: r.date,
  from: r.from_text,
  to: r.to_text,
  cc: r.cc_text,
  replyTo: r.reply_to_text,
  subject: r.subject,
  messageId: r.message_id,
  inReplyTo: r.in_reply_to,
  fromAddress: r.from_address,
});

const toLocation = (r: LocationRow): Location => ({
  labelGuid: r.label_guid,
  uid: r.uid,
  msgGuid: r.msg_guid,
  modseq: r.modseq,
  flags: JSON.parse(r.flags) as string[],
});

const isSeen = (flags: readonly string[]) => (flags.some((f) => f.toLowerCase() === '\\seen') ? 1 : 0);

const MESSAGE_COLUMNS = 'm.guid, m.size, m.received_at, m.date, m.from_text, m.to_text, m.cc_text, m.reply_to_text, m.subject, m.message_id, m.in_reply_to, m.from_address';

export class SqliteMailIndex implements MailIndexStore, WatchLeases {
  private readonly s: Record<string, Statement>;
  // `mail_inboxes.version` is bumped in the same transaction as every index write: readers keep
  // derived results until it changes. It lives in the store because every process sharing it
  // syncs inboxes on reads (the watcher lease only says who watches).
  private readonly applyTx: (inboxId: string, ops: readonly IndexOp[], label?: LabelState) => number[];
  private readonly dropTx: (inboxId: string, guid: string) => Location[];
  private readonly clearStagedTx: (inboxId: string, labelGuid: string) => void;
  private readonly commitStagedTx: (inboxId: string, label: LabelState) => void;
  private readonly claimTx: (inboxIds: readonly string[], holder: string, ttlMs: number) => Set<string>;
  private readonly releaseTx: (inboxIds: readonly string[], holder: string) => void;

  constructor(db: Db) {
    const p = (sql: string) => db.prepare(sql);
    this.s = {
      seeded: p('SELECT seeded FROM mail_inboxes WHERE inbox_id = ?').pluck(),
      // A new row starts its version at the clock (microsecond scale), not at 1: an index deleted
      // and rebuilt never repeats a version a cache may still hold.
      markSeeded: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES (?, ?, ?)
        ON CONFLICT (inbox_id) DO UPDATE SET seeded = excluded.seeded, version = version + 1`),
      bump: p(`INSERT INTO mail_inboxes (inbox_id, seeded, version) VALUES (?, 0, ?)
        ON CONFLICT (inbox_id) DO UPDATE SET version = version + 1`),
      version: p('SELECT version FROM mail_inboxes WHERE inbox_id = ?').pluck(),
      labels: p('SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq FROM mail_labels WHERE inbox_id = ?'),
      label: p('SELECT guid, path, special_use, uid_validity, uid_next, highest_modseq FROM mail_labels WHERE inbox_id = ? AND guid = ?'),
      putLabel: p(`INSERT INTO mail_labels (inbox_id, guid, path, special_use, uid_validity, uid_next, highest_modseq)
        VALUES (@inboxId, @guid, @path, @specialUse, @uidValidity, @uidNext, @highestModseq)
        ON CONFLICT (inbox_id, guid) DO UPDATE SET path = excluded.path, special_use = excluded.special_use,
          uid_validity = excluded.uid_validity,
          uid_next = CASE WHEN uid_validity = excluded.uid_validity THEN max(uid_next, excluded.uid_next) ELSE excluded.uid_next END,
          highest_modseq = CASE WHEN uid_validity = excluded.uid_validity THEN max(highest_modseq, excluded.highest_modseq) ELSE excluded.highest_modseq END`),
      counts: p('SELECT label_guid, count(*) AS total, count(*) - sum(seen) AS unread FROM mail_locations WHERE inbox_id = ? GROUP BY label_guid'),
      putMessage: p(`INSERT INTO mail_messages (inbox_id, guid, size, received_at, date, from_text, to_text, cc_text, reply_to_text, subject, message_id, in_reply_to, from_address)
        VALUES (@inboxId, @guid, @size, @receivedAt, @date, @from, @to, @cc, @replyTo, @subject, @messageId, @inReplyTo, @fromAddress)
        ON CONFLICT (inbox_id, guid) DO NOTHING`),
      // The same message at the same place with an older MODSEQ (another process fetched it
      // earlier and applied it later) leaves the newer flags in place.
      putLocation: p(`INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen
        WHERE mail_locations.msg_guid <> excluded.msg_guid OR excluded.modseq = 0 OR excluded.modseq >= mail_locations.modseq`),
      // Only a newer MODSEQ replaces flags (0: a server without CONDSTORE, nothing to compare).
      setFlags: p('UPDATE mail_locations SET modseq = @modseq, flags = @flags, seen = @seen WHERE inbox_id = @inboxId AND label_guid = @labelGuid AND uid = @uid AND (@modseq = 0 OR modseq < @modseq)'),
      locationAt: p('SELECT msg_guid FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?').pluck(),
      removeLocation: p('DELETE FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?'),
      // A message lives as long as some label holds it (or a refill being staged does).
      gcMessage: p(`DELETE FROM mail_messages WHERE inbox_id = @inboxId AND guid = @guid
        AND NOT EXISTS (SELECT 1 FROM mail_locations WHERE inbox_id = @inboxId AND msg_guid = @guid)
        AND NOT EXISTS (SELECT 1 FROM mail_staged_locations WHERE inbox_id = @inboxId AND msg_guid = @guid)`),
      putStaged: p(`INSERT INTO mail_staged_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        VALUES (?, ?, ?, ?, ?, ?, ?)
        ON CONFLICT (inbox_id, label_guid, uid) DO UPDATE SET msg_guid = excluded.msg_guid, modseq = excluded.modseq, flags = excluded.flags, seen = excluded.seen`),
      stagedGuids: p('SELECT DISTINCT msg_guid FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      labelGuids: p('SELECT DISTINCT msg_guid FROM mail_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      dropStaged: p('DELETE FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?'),
      unstage: p(`INSERT INTO mail_locations (inbox_id, label_guid, uid, msg_guid, modseq, flags, seen)
        SELECT inbox_id, label_guid, uid, msg_guid, modseq, flags, seen FROM mail_staged_locations WHERE inbox_id = ? AND label_guid = ?`),
      labelLocations: p('SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND label_guid = ?'),
      dropLocations: p('DELETE FROM mail_locations WHERE inbox_id = ? AND label_guid = ?'),
      dropLabel: p('DELETE FROM mail_labels WHERE inbox_id = ? AND guid = ?'),
      locationByUid: p('SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid = ?'),
      uidsOf: p('SELECT uid, msg_guid AS msgGuid FROM mail_locations WHERE inbox_id = ? AND label_guid = ? AND uid > ? ORDER BY uid LIMIT ?'),
      countIn: p('SELECT count(*) FROM mail_locations WHERE inbox_id = ? AND label_guid = ?').pluck(),
      page: p(`SELECT l.label_guid, l.uid, l.msg_guid, l.modseq, l.flags, ${MESSAGE_COLUMNS}
        FROM mail_locations l JOIN mail_messages m ON m.inbox_id = l.inbox_id AND m.guid = l.msg_guid
        WHERE l.inbox_id = ? AND l.label_guid = ? AND l.uid < ? ORDER BY l.uid DESC LIMIT ?`),
      message: p(`SELECT ${MESSAGE_COLUMNS} FROM mail_messages m WHERE m.inbox_id = ? AND m.guid = ?`),
      messageLocations: p('SELECT label_guid, uid, msg_guid, modseq, flags FROM mail_locations WHERE inbox_id = ? AND msg_guid = ?'),
      // Taken when free, lapsed or already ours; another holder's live lease is left alone.
      claim: p(`INSERT INTO mail_watch_leases (inbox_id, holder, expires_at) VALUES (@inboxId, @holder, @until)
        ON CONFLICT (inbox_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
        WHERE mail_watch_leases.holder = excluded.holder OR mail_watch_leases.expires_at <= @now`),
      release: p('DELETE FROM mail_watch_leases WHERE inbox_id = ? AND holder = ?'),
    };

    this.applyTx = db.transaction((inboxId: string, ops: readonly IndexOp[], label?: LabelState) => {
      const orphans = new Set<string>();
      const unapplied: number[] = [];
      for (const [i, op] of ops.entries()) {
        if (op.op === 'stage') {
          this.s.putMessage!.run({ inboxId, ...op.message });
          const l = op.location;
          this.s.putStaged!.run(inboxId, l.labelGuid, l.uid, l.msgGuid, l.modseq, JSON.stringify(l.flags), isSeen(l.flags));
        } else if (op.op === 'put') {
          const m = op.message;
          this.s.putMessage!.run({ inboxId, ...m });
          const l = op.location;
          const previous = this.s.locationAt!.get(inboxId, l.labelGuid, l.uid) as string | undefined;
          if (previous !== undefined && previous !== l.msgGuid) orphans.add(previous);
          this.s.putLocation!.run(inboxId, l.labelGuid, l.uid, l.msgGuid, l.modseq, JSON.stringify(l.flags), isSeen(l.flags));
        } else if (op.op === 'flags') {
          const { changes } = this.s.setFlags!.run({ modseq: op.modseq, flags: JSON.stringify(op.flags), seen: isSeen(op.flags), inboxId, labelGuid: op.labelGuid, uid: op.uid });
          // The index already holds a newer state (or the message left the label meanwhile).
          if (changes === 0) unapplied.push(i);
        } else {
          const guid = this.s.locationAt!.get(inboxId, op.labelGuid, op.uid) as string | undefined;
          if (guid === undefined) {
            unapplied.push(i);
            continue;
          }
          this.s.removeLocation!.run(inboxId, op.labelGuid, op.uid);
          orphans.add(guid);
        }
      }
      for (const guid of orphans) this.s.gcMessage!.run({ inboxId, guid });
      if (label) this.s.putLabel!.run({ inboxId, ...label });
      this.bump(inboxId);
      return unapplied;
    });

    this.dropTx = db.transaction((inboxId: string, guid: string) => {
      const removed = (this.s.labelLocations!.all(inboxId, guid) as LocationRow[]).map(toLocation);
      const staged = this.s.stagedGuids!.all(inboxId, guid) as string[];
      this.s.dropLocations!.run(inboxId, guid);
      this.s.dropStaged!.run(inboxId, guid);
      this.s.dropLabel!.run(inboxId, guid);
      for (const g of new Set([...removed.map((l) => l.msgGuid), ...staged])) this.s.gcMessage!.run({ inboxId, guid: g });
      this.bump(inboxId);
      return removed;
    });

    this.clearStagedTx = db.transaction((inboxId: string, labelGuid: string) => {
      const staged = this.s.stagedGuids!.all(inboxId, labelGuid) as string[];
      this.s.dropStaged!.run(inboxId, labelGuid);
      for (const guid of staged) this.s.gcMessage!.run({ inboxId, guid });
    });

    this.commitStagedTx = db.transaction((inboxId: string, label: LabelState) => {
      const old = this.s.labelGuids!.all(inboxId, label.guid) as string[];
      this.s.dropLocations!.run(inboxId, label.guid);
      this.s.unstage!.run(inboxId, label.guid);
      this.s.dropStaged!.run(inboxId, label.guid);
      for (const guid of old) this.s.gcMessage!.run({ inboxId, guid });
      this.s.putLabel!.run({ inboxId, ...label });
      this.bump(inboxId);
    });

    // One write for every lease a process renews or tries for.
    this.claimTx = db.transaction((inboxIds: readonly string[], holder: string, ttlMs: number) => {
      const now = Date.now();
      const held = new Set<string>();
      for (const inboxId of inboxIds) {
        if (this.s.claim!.run({ inboxId, holder, until: now + ttlMs, now }).changes > 0) held.add(inboxId);
      }
      return held;
    });

    this.releaseTx = db.transaction((inboxIds: readonly string[], holder: string) => {
      for (const inboxId of inboxIds) this.s.release!.run(inboxId, holder);
    });
  }

  claim(inboxIds: readonly string[], holder: string, ttlMs: number): Set<string> {
    return inboxIds.length === 0 ? new Set() : this.claimTx(inboxIds, holder, ttlMs);
  }

  release(inboxIds: readonly string[], holder: string): void {
    if (inboxIds.length > 0) this.releaseTx(inboxIds, holder);
  }

  version(inboxId: string): number {
    return (this.s.version!.get(inboxId) as number | undefined) ?? 0;
  }

  /** Inside the write's transaction. */
  private bump(inboxId: string): void {
    this.s.bump!.run(inboxId, Date.now() * 1000);
  }

  isSeeded(inboxId: string): boolean {
    return this.s.seeded!.get(inboxId) === 1;
  }

  markSeeded(inboxId: string, seeded: boolean): void {
    this.s.markSeeded!.run(inboxId, seeded ? 1 : 0, Date.now() * 1000);
  }

  labels(inboxId: string): LabelState[] {
    return (this.s.labels!.all(inboxId) as LabelRow[]).map(toLabel);
  }

  label(inboxId: string, guid: string): LabelState | null {
    const row = this.s.label!.get(inboxId, guid) as LabelRow | undefined;
    return row ? toLabel(row) : null;
  }

  counts(inboxId: string): Map<string, { total: number; unread: number }> {
    const rows = this.s.counts!.all(inboxId) as Array<{ label_guid: string; total: number; unread: number }>;
    return new Map(rows.map((r) => [r.label_guid, { total: r.total, unread: r.unread }]));
  }

  apply(inboxId: string, ops: readonly IndexOp[], label?: LabelState): number[] {
    return this.applyTx(inboxId, ops, label);
  }

  dropLabel(inboxId: string, guid: string): Location[] {
    return this.dropTx(inboxId, guid);
  }

  clearStaged(inboxId: string, labelGuid: string): void {
    this.clearStagedTx(inboxId, labelGuid);
  }

  commitStaged(inboxId: string, label: LabelState): void {
    this.commitStagedTx(inboxId, label);
  }

  locations(inboxId: string, labelGuid: string, uids: readonly number[]): Location[] {
    const out: Location[] = [];
    for (const uid of uids) {
      const row = this.s.locationByUid!.get(inboxId, labelGuid, uid) as LocationRow | undefined;
      if (row) out.push(toLocation(row));
    }
    return out;
  }

  uidsOf(inboxId: string, labelGuid: string, afterUid: number, limit: number): Array<{ uid: number; msgGuid: string }> {
    return this.s.uidsOf!.all(inboxId, labelGuid, afterUid, limit) as Array<{ uid: number; msgGuid: string }>;
  }

  countIn(inboxId: string, labelGuid: string): number {
    return this.s.countIn!.get(inboxId, labelGuid) as number;
  }

  page(inboxId: string, labelGuid: string, before: number | null, limit: number): PageRow[] {
    // UIDs are 32-bit: 2^32 is above every UID.
    const rows = this.s.page!.all(inboxId, labelGuid, before ?? 2 ** 32, limit) as Array<LocationRow & MessageRow>;
    return rows.map((r) => ({ message: toMessage(r), location: toLocation(r) }));
  }

  message(inboxId: string, msgGuid: string): { message: MessageRecord; locations: Location[] } | null {
    const row = this.s.message!.get(inboxId, msgGuid) as MessageRow | undefined;
    if (!row) return null;
    return { message: toMessage(row), locations: (this.s.messageLocations!.all(inboxId, msgGuid) as LocationRow[]).map(toLocation) };
  }
}
