// OutboxStore on SQLite (table mail_outbox, migration 11; the copies in mail_outbox_copies, 19;
// the sending rate's per-minute counts in mail_send_minutes, 21; outcomes, owners and the
// processes they name, 23; scheduled sends and their sealed bodies, 33).
import { randomBytes } from 'node:crypto';
import type { OutboxEntry, OutboxStore, OutcomeEvidence, Recovered, Reservation, ScheduledParts } from '../../../lib/send/ports.ts';
import type { Db } from './db.ts';
import { groupCommitOf, type GroupCommit } from './group-commit.ts';
import { stillRuns, thisProcess, type ProcessIdentity } from '../process-liveness.ts';
import {
  byDue,
  entryOf,
  FORGET_OWNER_MS,
  MINUTE_MS,
  OTHER_HOST_STALE_MS,
  PART_BYTES,
  scheduledPartsOf,
  sealedColumn,
  type OutboxRow,
  type ScheduledRow,
} from '../rows/outbox.ts';

const COLUMNS =
  'id, inbox_id, project_id, actor, draft_id, fingerprint, state, outcome, mail_from, recipients, message_id, size, attempts, claims, next_attempt_at, created_at, send_at, hold_until, failure';

/**
 * The copy's pieces cut into parts of PART_BYTES (the last one shorter; one empty part for an
 * empty copy). A part within one piece is a view of it; one that spans pieces is joined.
 */
function* parts(pieces: readonly Buffer[]): Generator<Buffer> {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let any = false;
  for (const piece of pieces) {
    for (let at = 0; at < piece.length; ) {
      const take = Math.min(PART_BYTES - pendingBytes, piece.length - at);
      if (take === PART_BYTES) yield piece.subarray(at, at + take);
      else {
        pending.push(piece.subarray(at, at + take));
        pendingBytes += take;
        if (pendingBytes === PART_BYTES) {
          yield Buffer.concat(pending, pendingBytes);
          pending = [];
          pendingBytes = 0;
        }
      }
      at += take;
      any = true;
    }
  }
  if (pendingBytes > 0 || !any) yield pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
}

export class SqliteOutboxStore implements OutboxStore {
  private readonly q;
  /**
   * Reservations and `relayed` go through the connection's group commit: those of one turn of
   * the event loop share a transaction (with the event appends of that turn too).
   */
  private readonly commits: GroupCommit;
  private readonly dropTx;
  private readonly filedTx;
  private readonly readCopy;
  private readonly recoverTx;
  private readonly readScheduled;
  private readonly settleTx;
  private readonly forgetTx;
  /** This process as the rows it reserves and claims name it (registered on its first write). */
  private readonly owner = randomBytes(12).toString('hex');
  private readonly self: ProcessIdentity = thisProcess();
  private registered = false;

  constructor(db: Db) {
    this.q = {
      // The window's sends: whole minutes from their counts, the minute it starts in row by row.
      minutes: db
        .prepare<[string, number], number>('SELECT coalesce(sum(sends), 0) FROM mail_send_minutes WHERE inbox_id = ? AND minute > ?')
        .pluck(),
      startMinute: db
        .prepare<[string, number, number], number>(
          'SELECT count(*) FROM mail_outbox WHERE inbox_id = ? AND created_at >= ? AND created_at < ?',
        )
        .pluck(),
      countSend: db.prepare<[string, number]>(
        'INSERT INTO mail_send_minutes (inbox_id, minute, sends) VALUES (?, ?, 1) ON CONFLICT (inbox_id, minute) DO UPDATE SET sends = sends + 1',
      ),
      uncountSend: db.prepare<[string, number]>('UPDATE mail_send_minutes SET sends = sends - 1 WHERE inbox_id = ? AND minute = ?'),
      forgetMinutes: db.prepare<[string, number]>('DELETE FROM mail_send_minutes WHERE inbox_id = ? AND minute < ?'),
      byDraft: db.prepare<[string, string], OutboxRow>(`SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = ? AND draft_id = ?`),
      get: db.prepare<[string], OutboxRow>(`SELECT ${COLUMNS} FROM mail_outbox WHERE id = ?`),
      // The inbox's rows by mail_outbox_rate (inbox_id, created_at), the filed ones skipped.
      backlog: db.prepare<[string, number], OutboxRow>(
        `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = ? AND state <> 'filed' ORDER BY created_at, id LIMIT ?`,
      ),
      insert: db.prepare(
        `INSERT INTO mail_outbox (${COLUMNS}, owner, envelope, sealed) VALUES (@id, @inboxId, @projectId, @actor, @draftId, @fingerprint, @state, NULL, @mailFrom, @recipients, @messageId, @size, 0, 0, @nextAttemptAt, @createdAt, @sendAt, @holdUntil, NULL, @owner, @envelope, @sealed)`,
      ),
      insertSealed: db.prepare<[string, number, Buffer]>('INSERT INTO mail_outbox_sealed (id, part, bytes) VALUES (?, ?, ?)'),
      sealedParts: db.prepare<[string], Buffer>('SELECT bytes FROM mail_outbox_sealed WHERE id = ? ORDER BY part').pluck(),
      dropSealed: db.prepare<[string]>('DELETE FROM mail_outbox_sealed WHERE id = ?'),
      // Scheduled sends (migration 33), by mail_outbox_due (state, next_attempt_at).
      nextScheduled: db.prepare<[], number | null>("SELECT min(next_attempt_at) FROM mail_outbox WHERE state = 'scheduled'").pluck(),
      dueScheduled: db.prepare<[number, number], OutboxRow>(
        `SELECT ${COLUMNS} FROM mail_outbox WHERE state = 'scheduled' AND next_attempt_at <= ? ORDER BY next_attempt_at, created_at LIMIT ?`,
      ),
      claimScheduled: db.prepare<[string, string, number]>(
        "UPDATE mail_outbox SET state = 'relaying', owner = ? WHERE id = ? AND state = 'scheduled' AND next_attempt_at <= ?",
      ),
      // The earliest due, by mail_outbox_due, claimed in the same statement.
      claimDue: db.prepare<[string, number, number], OutboxRow>(
        `UPDATE mail_outbox SET state = 'relaying', owner = ? WHERE id IN (SELECT id FROM mail_outbox WHERE state = 'scheduled' AND next_attempt_at <= ? ORDER BY next_attempt_at, created_at LIMIT ?) RETURNING ${COLUMNS}`,
      ),
      scheduledRow: db.prepare<[string], ScheduledRow>('SELECT envelope, sealed FROM mail_outbox WHERE id = ? AND envelope IS NOT NULL'),
      retryScheduled: db.prepare<[number, string]>(
        "UPDATE mail_outbox SET state = 'scheduled', attempts = attempts + 1, next_attempt_at = ? WHERE id = ? AND state = 'relaying'",
      ),
      // A scheduled send that will never go frees its draft id and gives back its rate count.
      settleUnsent: db.prepare<[string, string | null, string, string], { inbox_id: string; created_at: number }>(
        'UPDATE mail_outbox SET state = ?, failure = ?, draft_id = NULL WHERE id = ? AND state = ? RETURNING inbox_id, created_at',
      ),
      reschedule: db.prepare<[number, number, string]>(
        "UPDATE mail_outbox SET send_at = ?, next_attempt_at = max(?, coalesce(hold_until, 0)) WHERE id = ? AND state = 'scheduled'",
      ),
      forgetEnvelope: db.prepare<[string]>('UPDATE mail_outbox SET envelope = NULL, sealed = NULL WHERE id = ?'),
      listPending: db.prepare<[string, number], OutboxRow>(
        `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = ? AND state IN ('scheduled', 'relaying', 'sending', 'unknown') ORDER BY created_at DESC, id LIMIT ?`,
      ),
      listAll: db.prepare<[string, number], OutboxRow>(
        `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = ? ORDER BY created_at DESC, id LIMIT ?`,
      ),
      // A dead process's claimed scheduled send that never left waits again, due at once.
      requeue: db.prepare<[number, string]>(
        "UPDATE mail_outbox SET state = 'scheduled', next_attempt_at = ? WHERE owner = ? AND state = 'relaying' AND send_at IS NOT NULL",
      ),
      insertPart: db.prepare<[string, number, Buffer]>('INSERT INTO mail_outbox_copies (id, part, bytes) VALUES (?, ?, ?)'),
      // length() of a blob is read from its header, without loading the value.
      copySize: db.prepare<[string], { parts: number; size: number | null }>(
        'SELECT count(*) AS parts, sum(length(bytes)) AS size FROM mail_outbox_copies WHERE id = ?',
      ),
      parts: db.prepare<[string], Buffer>('SELECT bytes FROM mail_outbox_copies WHERE id = ? ORDER BY part').pluck(),
      drop: db.prepare<[string], { inbox_id: string; created_at: number }>(
        "DELETE FROM mail_outbox WHERE id = ? AND state IN ('relaying', 'sending') RETURNING inbox_id, created_at",
      ),
      dropCopy: db.prepare<[string]>('DELETE FROM mail_outbox_copies WHERE id = ?'),
      sending: db.prepare<[string]>("UPDATE mail_outbox SET state = 'sending' WHERE id = ? AND state = 'relaying'"),
      relayed: db.prepare<[number, string]>(
        "UPDATE mail_outbox SET state = 'filing', next_attempt_at = ? WHERE id = ? AND state IN ('relaying', 'sending')",
      ),
      // Its copy stays, unfiled, until evidence settles it.
      unknown: db.prepare<[number, string]>(
        "UPDATE mail_outbox SET state = 'unknown', outcome = 'unknown', next_attempt_at = ? WHERE id = ? AND state IN ('relaying', 'sending')",
      ),
      settle: db.prepare<[string, number, string], OutboxRow>(
        `UPDATE mail_outbox SET state = 'filing', outcome = ?, next_attempt_at = ? WHERE id = ? AND state = 'unknown' RETURNING ${COLUMNS}`,
      ),
      due: db.prepare<[number, number], OutboxRow>(
        `SELECT ${COLUMNS} FROM mail_outbox WHERE state = 'filing' AND next_attempt_at <= ? ORDER BY next_attempt_at, created_at LIMIT ?`,
      ),
      claim: db.prepare<[number, string, string, number]>(
        "UPDATE mail_outbox SET next_attempt_at = ?, owner = ?, claims = claims + 1 WHERE id = ? AND state = 'filing' AND next_attempt_at = ?",
      ),
      retry: db.prepare<[number, string]>(
        "UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = ? WHERE id = ? AND state = 'filing'",
      ),
      filed: db.prepare<[number, string]>("UPDATE mail_outbox SET state = 'filed', filed_at = ? WHERE id = ?"),
      // Processes: this one says it runs; the owners of unsettled rows (mail_outbox_unsettled).
      seen: db.prepare<[string, string, number, string, number]>(
        'INSERT INTO mail_outbox_owners (id, host, pid, pid_start, seen_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at',
      ),
      // Cancelled and failed rows are settled too (by mail_outbox_unsettled, whose condition this repeats).
      owners: db
        .prepare<[], string | null>(
          "SELECT DISTINCT owner FROM mail_outbox WHERE state <> 'filed' AND state NOT IN ('cancelled', 'failed', 'scheduled', 'unknown')",
        )
        .pluck(),
      ownerOf: db.prepare<[string], { host: string; pid: number; pid_start: string; seen_at: number }>(
        'SELECT host, pid, pid_start, seen_at FROM mail_outbox_owners WHERE id = ?',
      ),
      forgetOwner: db.prepare<[string]>('DELETE FROM mail_outbox_owners WHERE id = ?'),
      forgetOwners: db.prepare<[number]>('DELETE FROM mail_outbox_owners WHERE seen_at < ?'),
      // `owner IS ?` matches NULL too: rows from before owners were recorded.
      unsent: db.prepare<[string | null], string>("SELECT id FROM mail_outbox WHERE owner IS ? AND state = 'relaying'").pluck(),
      mayBeSent: db
        .prepare<[number, string | null, string], string>(
          "UPDATE mail_outbox SET state = 'unknown', outcome = 'unknown', next_attempt_at = ? WHERE owner IS ? AND state = ? RETURNING id",
        )
        .pluck(),
      reclaim: db.prepare<[number, string | null, number]>(
        "UPDATE mail_outbox SET next_attempt_at = ? WHERE owner IS ? AND state = 'filing' AND next_attempt_at > ?",
      ),
    };
    this.commits = groupCommitOf(db);
    // The entry and its copy go together (both only while the entry is still `relaying`).
    this.dropTx = db.transaction((id: string) => this.dropOne(id));
    this.readCopy = db.transaction((id: string): Buffer | null => {
      const { parts, size } = this.q.copySize.get(id)!;
      if (parts === 0) return null;
      const out = Buffer.allocUnsafe(size ?? 0);
      let at = 0;
      for (const bytes of this.q.parts.iterate(id)) at += bytes.copy(out, at);
      return out;
    });
    this.recoverTx = db.transaction((now: number) => {
      const settled: Recovered = { dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] };
      this.q.seen.run(this.owner, this.self.host, this.self.pid, this.self.pidStart, now);
      for (const owner of this.q.owners.all()) {
        if (owner === this.owner || !this.dead(owner, now)) continue;
        if (owner === null) {
          // Before owners and `sending` were recorded, a `relaying` row may have been written.
          settled.unknownIds.push(...this.q.mayBeSent.all(now, null, 'relaying'));
        } else {
          // A scheduled send it had claimed waits again; any other `relaying` row had nothing
          // written: it goes, as a refused send does.
          settled.reclaimed += this.q.requeue.run(now, owner).changes;
          for (const id of this.q.unsent.all(owner)) settled.dropped += this.dropOne(id);
          this.q.forgetOwner.run(owner);
        }
        settled.unknownIds.push(...this.q.mayBeSent.all(now, owner, 'sending'));
        // A copy its dead claimer held is due now, not when the claim runs out.
        settled.reclaimed += this.q.reclaim.run(now, owner, now).changes;
      }
      this.q.forgetOwners.run(now - FORGET_OWNER_MS);
      settled.unknown = settled.unknownIds.length;
      return settled;
    });
    this.readScheduled = db.transaction((id: string): ScheduledParts | null => {
      const row = this.q.scheduledRow.get(id);
      if (!row) return null;
      return scheduledPartsOf(row, row.sealed === null ? Buffer.alloc(0) : Buffer.concat(this.q.sealedParts.all(id)));
    });
    // A scheduled send that never went: its state and reason, its rate count given back, and (failed)
    // its bytes dropped; a cancelled one keeps them for the draft it becomes (forget()).
    this.settleTx = db.transaction((id: string, state: 'cancelled' | 'failed', reason: string | null, from: 'scheduled' | 'relaying') => {
      const settled = this.q.settleUnsent.get(state, reason, id, from);
      if (!settled) return false;
      this.q.uncountSend.run(settled.inbox_id, Math.floor(settled.created_at / MINUTE_MS));
      if (state === 'failed') this.forgetOne(id, true);
      return true;
    });
    this.forgetTx = db.transaction((id: string) => {
      const row = this.q.get.get(id);
      this.forgetOne(id, row?.state === 'cancelled' || row?.state === 'failed');
    });
    // A batch filed together is marked together: one commit.
    this.filedTx = db.transaction((ids: readonly string[], now: number) => {
      for (const id of ids) {
        this.q.filed.run(now, id);
        this.q.dropCopy.run(id);
      }
    });
  }

  /** Drops a scheduled entry's envelope and sealed body, and its Sent copy when it will not be filed. */
  private forgetOne(id: string, copyToo: boolean): void {
    this.q.forgetEnvelope.run(id);
    this.q.dropSealed.run(id);
    if (copyToo) this.q.dropCopy.run(id);
  }

  /** Deletes an entry not (or not yet) relayed, with its copy; 1 when there was one. */
  private dropOne(id: string): number {
    const dropped = this.q.drop.get(id);
    if (!dropped) return 0;
    this.q.dropCopy.run(id);
    // A send that never left does not count toward the rate.
    this.q.uncountSend.run(dropped.inbox_id, Math.floor(dropped.created_at / MINUTE_MS));
    return 1;
  }

  /** Whether the process that owns rows is gone (null: rows from before owners were recorded). */
  private dead(owner: string | null, now: number): boolean {
    if (owner === null) return true;
    const o = this.q.ownerOf.get(owner);
    // Rows name their owner only once it is registered (register), so none known is long gone.
    if (!o) return true;
    const runs = stillRuns({ host: o.host, pid: o.pid, pidStart: o.pid_start }, this.self);
    return runs === null ? o.seen_at < now - OTHER_HOST_STALE_MS : !runs;
  }

  /** This process is recorded before the first row names it. */
  private register(): void {
    if (this.registered) return;
    this.q.seen.run(this.owner, this.self.host, this.self.pid, this.self.pidStart, Date.now());
    this.registered = true;
  }

  /**
   * In a write transaction (the group commit's IMMEDIATE one): the rate count and the draft
   * check see every other process's reservations, so concurrent requests cannot both slip under
   * the limit or both claim a draft.
   */
  private reserveOne(entry: OutboxEntry, copy: readonly Buffer[], since: number, max: number, scheduled?: ScheduledParts): Reservation {
    if (entry.draftId !== null) {
      const existing = this.q.byDraft.get(entry.inboxId, entry.draftId);
      if (existing) return { ok: false, reason: 'draft', existing: entryOf(existing) };
    }
    const first = Math.floor(since / MINUTE_MS);
    const sent = this.countSince(entry.inboxId, since, max);
    if (sent >= max) return { ok: false, reason: 'rate', sent };
    this.q.insert.run({
      ...entry,
      state: scheduled ? 'scheduled' : 'relaying',
      owner: this.owner,
      envelope: scheduled ? JSON.stringify(scheduled.envelope) : null,
      sealed: sealedColumn(scheduled?.sealed ?? null),
    });
    if (scheduled?.sealed) {
      let at = 0;
      for (const bytes of parts([scheduled.sealed.ciphertext])) this.q.insertSealed.run(entry.id, at++, bytes);
    }
    this.q.countSend.run(entry.inboxId, Math.floor(entry.createdAt / MINUTE_MS));
    // Minutes the window has left behind (an index seek when there are none).
    this.q.forgetMinutes.run(entry.inboxId, first);
    let part = 0;
    for (const bytes of parts(copy)) this.q.insertPart.run(entry.id, part++, bytes);
    return { ok: true };
  }

  /** The sends since `since` (counted up to `max`: past it, the exact number does not matter). */
  private countSince(inboxId: string, since: number, max: number): number {
    const first = Math.floor(since / MINUTE_MS);
    const sent = this.q.minutes.get(inboxId, first) ?? 0;
    return sent < max ? sent + (this.q.startMinute.get(inboxId, since, (first + 1) * MINUTE_MS) ?? 0) : sent;
  }

  async sentSince(inboxId: string, since: number, max: number): Promise<number> {
    return this.countSince(inboxId, since, max);
  }

  reserve(
    entry: OutboxEntry,
    copy: readonly Buffer[],
    rate: { since: number; max: number },
    scheduled?: ScheduledParts,
  ): Promise<Reservation> {
    this.register();
    return this.commits.run(() => this.reserveOne(entry, copy, rate.since, rate.max, scheduled));
  }

  async get(id: string): Promise<OutboxEntry | null> {
    const r = this.q.get.get(id);
    return r ? entryOf(r) : null;
  }

  async backlog(inboxId: string, limit: number): Promise<OutboxEntry[]> {
    return this.q.backlog.all(inboxId, limit).map(entryOf);
  }

  async byDraft(inboxId: string, draftId: string): Promise<OutboxEntry | null> {
    const r = this.q.byDraft.get(inboxId, draftId);
    return r ? entryOf(r) : null;
  }

  async drop(id: string): Promise<void> {
    this.dropTx.immediate(id);
  }

  sending(id: string): Promise<void> {
    return this.commits.run(() => {
      this.q.sending.run(id);
    });
  }

  relayed(id: string, now: number): Promise<void> {
    return this.commits.run(() => {
      this.q.relayed.run(now, id);
    });
  }

  outcomeUnknown(id: string, now: number): Promise<void> {
    return this.commits.run(() => {
      this.q.unknown.run(now, id);
    });
  }

  settle(id: string, evidence: OutcomeEvidence, now: number): Promise<OutboxEntry | null> {
    return this.commits.run(() => {
      const row = this.q.settle.get(evidence, now, id);
      return row ? entryOf(row) : null;
    });
  }

  async recover(now: number): Promise<Recovered> {
    const settled = this.recoverTx.immediate(now);
    this.registered = true;
    return settled;
  }

  async due(now: number, limit: number): Promise<OutboxEntry[]> {
    return this.q.due.all(now, limit).map(entryOf);
  }

  async claim(id: string, expectedNext: number, until: number): Promise<boolean> {
    this.register();
    return this.q.claim.run(until, this.owner, id, expectedNext).changes === 1;
  }

  async copy(id: string): Promise<Buffer | null> {
    // One read transaction: the parts counted are the parts read.
    return this.readCopy(id);
  }

  async retryAt(id: string, at: number): Promise<void> {
    this.q.retry.run(at, id);
  }

  async filed(ids: readonly string[], now: number): Promise<void> {
    this.filedTx.immediate(ids, now);
  }

  async nextScheduled(): Promise<number | null> {
    return this.q.nextScheduled.get() ?? null;
  }

  async dueScheduled(now: number, limit: number): Promise<OutboxEntry[]> {
    return this.q.dueScheduled.all(now, limit).map(entryOf);
  }

  claimScheduled(id: string, now: number): Promise<boolean> {
    this.register();
    return this.commits.run(() => this.q.claimScheduled.run(this.owner, id, now).changes === 1);
  }

  claimDue(now: number, limit: number): Promise<OutboxEntry[]> {
    this.register();
    return this.commits.run(() => byDue(this.q.claimDue.all(this.owner, now, limit).map(entryOf)));
  }

  async scheduledParts(id: string): Promise<ScheduledParts | null> {
    return this.readScheduled(id);
  }

  async retryScheduled(id: string, at: number): Promise<void> {
    this.q.retryScheduled.run(at, id);
  }

  async failScheduled(id: string, reason: string): Promise<void> {
    this.settleTx.immediate(id, 'failed', reason, 'relaying');
  }

  async cancel(id: string): Promise<boolean> {
    return this.settleTx.immediate(id, 'cancelled', null, 'scheduled');
  }

  async reschedule(id: string, sendAt: number): Promise<boolean> {
    return this.q.reschedule.run(sendAt, sendAt, id).changes === 1;
  }

  async forget(id: string): Promise<void> {
    this.forgetTx.immediate(id);
  }

  async list(inboxId: string, pending: boolean, limit: number): Promise<OutboxEntry[]> {
    return (pending ? this.q.listPending : this.q.listAll).all(inboxId, limit).map(entryOf);
  }
}
