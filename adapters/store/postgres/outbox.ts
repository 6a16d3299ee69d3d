// OutboxStore on PostgreSQL (tables of 003_mail.sql: mail_outbox, mail_outbox_copies,
// mail_outbox_owners, mail_send_minutes; scheduled sends, 017), with the SQLite adapter's semantics. SQLite serializes
// every write, so its reservation reads the rate and the draft and then writes; here several
// instances reserve at once, so a reservation first takes a transaction-scoped advisory lock on
// its inbox: reservations of one inbox run one after another (the count they read is the count
// they write against), those of different inboxes in parallel. The UNIQUE (inbox_id, draft_id)
// constraint is the backstop: a draft is never stored twice whatever the locks.
import { randomBytes } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import type { OutboxEntry, OutboxStore, OutcomeEvidence, Recovered, Reservation, ScheduledParts } from '../../../lib/send/ports.ts';
// Which process runs is the host's to say, not the engine's: one module for both engines.
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
import { changed, inTransaction, rowsOf, statements, type Queryable } from './sql.ts';

const COLUMNS =
  'id, inbox_id, project_id, actor, draft_id, fingerprint, state, outcome, mail_from, recipients, message_id, size, attempts, claims, next_attempt_at, created_at, send_at, hold_until, failure';

/** Recoveries by several instances at once take turns (any constant, the same everywhere). */
const RECOVER_LOCK = '7342914530152170023';

/** The copy joined and cut into parts of PART_BYTES (one empty part for an empty copy). */
function parts(pieces: readonly Buffer[]): Buffer[] {
  const whole = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces);
  const out: Buffer[] = [];
  for (let at = 0; at < whole.length; at += PART_BYTES) out.push(whole.subarray(at, at + PART_BYTES));
  return out.length > 0 ? out : [Buffer.alloc(0)];
}

const stmt = statements('outbox');
const S = {
  // Reservations of one inbox take turns (released at COMMIT or ROLLBACK).
  lockInbox: stmt('lockInbox', "SELECT pg_advisory_xact_lock(hashtextextended('postern.outbox.' || $1, 0))"),
  // The window's sends: whole minutes from their counts, the minute it starts in row by row.
  minutes: stmt('minutes', 'SELECT coalesce(sum(sends), 0)::bigint AS n FROM mail_send_minutes WHERE inbox_id = $1 AND minute > $2'),
  startMinute: stmt('startMinute', 'SELECT count(*) AS n FROM mail_outbox WHERE inbox_id = $1 AND created_at >= $2 AND created_at < $3'),
  countSend: stmt(
    'countSend',
    'INSERT INTO mail_send_minutes (inbox_id, minute, sends) VALUES ($1, $2, 1) ON CONFLICT (inbox_id, minute) DO UPDATE SET sends = mail_send_minutes.sends + 1',
  ),
  uncountSend: stmt('uncountSend', 'UPDATE mail_send_minutes SET sends = sends - 1 WHERE inbox_id = $1 AND minute = $2'),
  forgetMinutes: stmt('forgetMinutes', 'DELETE FROM mail_send_minutes WHERE inbox_id = $1 AND minute < $2'),
  byDraft: stmt('byDraft', `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = $1 AND draft_id = $2`),
  get: stmt('get', `SELECT ${COLUMNS} FROM mail_outbox WHERE id = $1`),
  // The inbox's rows by mail_outbox_rate (inbox_id, created_at), the filed ones skipped.
  backlog: stmt('backlog', `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = $1 AND state <> 'filed' ORDER BY created_at, id LIMIT $2`),
  insert: stmt(
    'insert',
    `INSERT INTO mail_outbox (${COLUMNS}, owner, envelope, sealed)
     VALUES ($1, $2, $3, $4, $5, $6, $14, NULL, $7, $8, $9, $10, 0, 0, $11, $12, $15, $16, NULL, $13, $17, $18)`,
  ),
  insertSealed: stmt('insertSealed', 'INSERT INTO mail_outbox_sealed (id, part, bytes) VALUES ($1, $2, $3)'),
  sealedParts: stmt('sealedParts', 'SELECT bytes FROM mail_outbox_sealed WHERE id = $1 ORDER BY part'),
  dropSealed: stmt('dropSealed', 'DELETE FROM mail_outbox_sealed WHERE id = $1'),
  // Scheduled sends (017), by mail_outbox_due (state, next_attempt_at).
  nextScheduled: stmt('nextScheduled', "SELECT min(next_attempt_at) AS at FROM mail_outbox WHERE state = 'scheduled'"),
  dueScheduled: stmt(
    'dueScheduled',
    `SELECT ${COLUMNS} FROM mail_outbox WHERE state = 'scheduled' AND next_attempt_at <= $1 ORDER BY next_attempt_at, created_at LIMIT $2`,
  ),
  claimScheduled: stmt(
    'claimScheduled',
    "UPDATE mail_outbox SET state = 'relaying', owner = $1 WHERE id = $2 AND state = 'scheduled' AND next_attempt_at <= $3",
  ),
  // The earliest due, by mail_outbox_due, claimed in the same statement; rows another claimer
  // holds are skipped rather than waited for. Picked in a CTE, which runs once: as an IN
  // subquery the planner may rescan it, and each rescan skips the rows just updated and locks
  // the next ones, claiming far more than the limit.
  claimDue: stmt(
    'claimDue',
    `WITH picked AS (SELECT id AS picked_id FROM mail_outbox WHERE state = 'scheduled' AND next_attempt_at <= $2 ORDER BY next_attempt_at, created_at LIMIT $3 FOR UPDATE SKIP LOCKED) UPDATE mail_outbox SET state = 'relaying', owner = $1 FROM picked WHERE id = picked.picked_id RETURNING ${COLUMNS}`,
  ),
  scheduledRow: stmt('scheduledRow', 'SELECT envelope, sealed FROM mail_outbox WHERE id = $1 AND envelope IS NOT NULL'),
  retryScheduled: stmt(
    'retryScheduled',
    "UPDATE mail_outbox SET state = 'scheduled', attempts = attempts + 1, next_attempt_at = $1 WHERE id = $2 AND state = 'relaying'",
  ),
  // A scheduled send that will never go frees its draft id and gives back its rate count.
  settleUnsent: stmt(
    'settleUnsent',
    'UPDATE mail_outbox SET state = $1, failure = $2, draft_id = NULL WHERE id = $3 AND state = $4 RETURNING inbox_id, created_at',
  ),
  reschedule: stmt(
    'reschedule',
    "UPDATE mail_outbox SET send_at = $1, next_attempt_at = greatest($1, coalesce(hold_until, 0)) WHERE id = $2 AND state = 'scheduled'",
  ),
  forgetEnvelope: stmt('forgetEnvelope', 'UPDATE mail_outbox SET envelope = NULL, sealed = NULL WHERE id = $1'),
  stateOf: stmt('stateOf', 'SELECT state FROM mail_outbox WHERE id = $1'),
  listPending: stmt(
    'listPending',
    `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = $1 AND state IN ('scheduled', 'relaying', 'sending', 'unknown') ORDER BY created_at DESC, id LIMIT $2`,
  ),
  listAll: stmt('listAll', `SELECT ${COLUMNS} FROM mail_outbox WHERE inbox_id = $1 ORDER BY created_at DESC, id LIMIT $2`),
  // A dead process's claimed scheduled send that never left waits again, due at once.
  requeue: stmt(
    'requeue',
    "UPDATE mail_outbox SET state = 'scheduled', next_attempt_at = $1 WHERE owner = $2 AND state = 'relaying' AND send_at IS NOT NULL",
  ),
  insertPart: stmt('insertPart', 'INSERT INTO mail_outbox_copies (id, part, bytes) VALUES ($1, $2, $3)'),
  parts: stmt('parts', 'SELECT bytes FROM mail_outbox_copies WHERE id = $1 ORDER BY part'),
  drop: stmt('drop', "DELETE FROM mail_outbox WHERE id = $1 AND state IN ('relaying', 'sending') RETURNING inbox_id, created_at"),
  dropCopy: stmt('dropCopy', 'DELETE FROM mail_outbox_copies WHERE id = ANY($1::text[])'),
  sending: stmt('sending', "UPDATE mail_outbox SET state = 'sending' WHERE id = $1 AND state = 'relaying'"),
  relayed: stmt(
    'relayed',
    "UPDATE mail_outbox SET state = 'filing', next_attempt_at = $1 WHERE id = $2 AND state IN ('relaying', 'sending')",
  ),
  unknown: stmt(
    'unknown',
    "UPDATE mail_outbox SET state = 'unknown', outcome = 'unknown', next_attempt_at = $1 WHERE id = $2 AND state IN ('relaying', 'sending')",
  ),
  // Evidence that the relay took an `unknown` send: its copy is due now.
  settle: stmt(
    'settle',
    `UPDATE mail_outbox SET state = 'filing', outcome = $1, next_attempt_at = $2 WHERE id = $3 AND state = 'unknown' RETURNING ${COLUMNS}`,
  ),
  due: stmt(
    'due',
    `SELECT ${COLUMNS} FROM mail_outbox WHERE state = 'filing' AND next_attempt_at <= $1 ORDER BY next_attempt_at, created_at LIMIT $2`,
  ),
  // Conditional on the next attempt the caller saw: of two claimers, the second finds it moved.
  claim: stmt(
    'claim',
    "UPDATE mail_outbox SET next_attempt_at = $1, owner = $2, claims = claims + 1 WHERE id = $3 AND state = 'filing' AND next_attempt_at = $4",
  ),
  retry: stmt('retry', "UPDATE mail_outbox SET attempts = attempts + 1, next_attempt_at = $1 WHERE id = $2 AND state = 'filing'"),
  filed: stmt('filed', "UPDATE mail_outbox SET state = 'filed', filed_at = $1 WHERE id = ANY($2::text[])"),
  seen: stmt(
    'seen',
    'INSERT INTO mail_outbox_owners (id, host, pid, pid_start, seen_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at',
  ),
  recoverLock: stmt('recoverLock', 'SELECT pg_advisory_xact_lock($1::bigint)'),
  // Cancelled and failed rows are settled too; scheduled ones have nothing of a process's to settle.
  owners: stmt(
    'owners',
    "SELECT DISTINCT owner FROM mail_outbox WHERE state <> 'filed' AND state NOT IN ('cancelled', 'failed', 'scheduled', 'unknown')",
  ),
  ownerOf: stmt('ownerOf', 'SELECT host, pid, pid_start, seen_at FROM mail_outbox_owners WHERE id = $1'),
  forgetOwner: stmt('forgetOwner', 'DELETE FROM mail_outbox_owners WHERE id = $1'),
  forgetOwners: stmt('forgetOwners', 'DELETE FROM mail_outbox_owners WHERE seen_at < $1'),
  unsent: stmt('unsent', "SELECT id FROM mail_outbox WHERE owner = $1 AND state = 'relaying'"),
  // `IS NOT DISTINCT FROM` matches NULL too: rows from before owners were recorded.
  mayBeSent: stmt(
    'mayBeSent',
    "UPDATE mail_outbox SET state = 'unknown', outcome = 'unknown', next_attempt_at = $1 WHERE owner IS NOT DISTINCT FROM $2 AND state = $3 RETURNING id",
  ),
  reclaim: stmt(
    'reclaim',
    "UPDATE mail_outbox SET next_attempt_at = $1 WHERE owner IS NOT DISTINCT FROM $2 AND state = 'filing' AND next_attempt_at > $3",
  ),
};

export class PgOutboxStore implements OutboxStore {
  /** This process as the rows it reserves and claims name it (registered on its first write). */
  private readonly owner = randomBytes(12).toString('hex');
  private readonly self: ProcessIdentity = thisProcess();
  private registered: Promise<void> | null = null;

  /** `pool` from openPgPool (db.ts): BIGINT columns come back as numbers. */
  constructor(private readonly pool: Pool) {}

  /** This process is recorded before the first row names it. */
  private register(): Promise<void> {
    this.registered ??= this.pool.query(S.seen([this.owner, this.self.host, this.self.pid, this.self.pidStart, Date.now()])).then(
      () => undefined,
      (err: unknown) => {
        this.registered = null;
        throw err;
      },
    );
    return this.registered;
  }

  /** The sends since `since` (counted up to `max`: past it, the exact number does not matter). */
  private async countSince(on: Queryable, inboxId: string, since: number, max: number): Promise<number> {
    const first = Math.floor(since / MINUTE_MS);
    const [whole] = await rowsOf<{ n: number }>(on, S.minutes([inboxId, first]));
    const sent = whole?.n ?? 0;
    if (sent >= max) return sent;
    const [start] = await rowsOf<{ n: number }>(on, S.startMinute([inboxId, since, (first + 1) * MINUTE_MS]));
    return sent + (start?.n ?? 0);
  }

  async reserve(
    entry: OutboxEntry,
    copy: readonly Buffer[],
    rate: { since: number; max: number },
    scheduled?: ScheduledParts,
  ): Promise<Reservation> {
    await this.register();
    return inTransaction(this.pool, async (c) => {
      // Taken first: whoever held it has committed, so what follows sees its reservation.
      await c.query(S.lockInbox([entry.inboxId]));
      if (entry.draftId !== null) {
        const [existing] = await rowsOf<OutboxRow>(c, S.byDraft([entry.inboxId, entry.draftId]));
        if (existing) return { ok: false, reason: 'draft', existing: entryOf(existing) };
      }
      const sent = await this.countSince(c, entry.inboxId, rate.since, rate.max);
      if (sent >= rate.max) return { ok: false, reason: 'rate', sent };
      const e = entry;
      await c.query(
        S.insert([
          e.id,
          e.inboxId,
          e.projectId,
          e.actor,
          e.draftId,
          e.fingerprint,
          e.mailFrom,
          e.recipients,
          e.messageId,
          e.size,
          e.nextAttemptAt,
          e.createdAt,
          this.owner,
          scheduled ? 'scheduled' : 'relaying',
          e.sendAt,
          e.holdUntil,
          scheduled ? JSON.stringify(scheduled.envelope) : null,
          sealedColumn(scheduled?.sealed ?? null),
        ]),
      );
      if (scheduled?.sealed) {
        let at = 0;
        for (const bytes of parts([scheduled.sealed.ciphertext])) await c.query(S.insertSealed([e.id, at++, bytes]));
      }
      await c.query(S.countSend([e.inboxId, Math.floor(e.createdAt / MINUTE_MS)]));
      // Minutes the window has left behind.
      await c.query(S.forgetMinutes([e.inboxId, Math.floor(rate.since / MINUTE_MS)]));
      let part = 0;
      for (const bytes of parts(copy)) await c.query(S.insertPart([e.id, part++, bytes]));
      return { ok: true };
    });
  }

  sentSince(inboxId: string, since: number, max: number): Promise<number> {
    return this.countSince(this.pool, inboxId, since, max);
  }

  async get(id: string): Promise<OutboxEntry | null> {
    const [r] = await rowsOf<OutboxRow>(this.pool, S.get([id]));
    return r ? entryOf(r) : null;
  }

  async backlog(inboxId: string, limit: number): Promise<OutboxEntry[]> {
    return (await rowsOf<OutboxRow>(this.pool, S.backlog([inboxId, limit]))).map(entryOf);
  }

  async byDraft(inboxId: string, draftId: string): Promise<OutboxEntry | null> {
    const [r] = await rowsOf<OutboxRow>(this.pool, S.byDraft([inboxId, draftId]));
    return r ? entryOf(r) : null;
  }

  /** Deletes an entry not (or not yet) relayed, with its copy and its count; 1 when there was one. */
  private async dropOne(c: PoolClient, id: string): Promise<number> {
    const [dropped] = await rowsOf<{ inbox_id: string; created_at: number }>(c, S.drop([id]));
    if (!dropped) return 0;
    await c.query(S.dropCopy([[id]]));
    // A send that never left does not count toward the rate.
    await c.query(S.uncountSend([dropped.inbox_id, Math.floor(dropped.created_at / MINUTE_MS)]));
    return 1;
  }

  async drop(id: string): Promise<void> {
    await inTransaction(this.pool, (c) => this.dropOne(c, id));
  }

  async sending(id: string): Promise<void> {
    await this.pool.query(S.sending([id]));
  }

  async relayed(id: string, now: number): Promise<void> {
    await this.pool.query(S.relayed([now, id]));
  }

  async outcomeUnknown(id: string, now: number): Promise<void> {
    await this.pool.query(S.unknown([now, id]));
  }

  /** Whether the process that owns rows is gone (null: rows from before owners were recorded). */
  private async dead(c: PoolClient, owner: string | null, now: number): Promise<boolean> {
    if (owner === null) return true;
    const [o] = await rowsOf<{ host: string; pid: number; pid_start: string; seen_at: number }>(c, S.ownerOf([owner]));
    // Rows name their owner only once it is registered, so none known is long gone.
    if (!o) return true;
    const runs = stillRuns({ host: o.host, pid: o.pid, pidStart: o.pid_start }, this.self);
    return runs === null ? o.seen_at < now - OTHER_HOST_STALE_MS : !runs;
  }

  async settle(id: string, evidence: OutcomeEvidence, now: number): Promise<OutboxEntry | null> {
    const [row] = await rowsOf<OutboxRow>(this.pool, S.settle([evidence, now, id]));
    return row ? entryOf(row) : null;
  }

  async recover(now: number): Promise<Recovered> {
    const settled = await inTransaction(this.pool, async (c) => {
      const settled: Recovered = { dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] };
      const mayBeSent = async (owner: string | null, state: 'relaying' | 'sending') => {
        for (const { id } of await rowsOf<{ id: string }>(c, S.mayBeSent([now, owner, state]))) settled.unknownIds.push(id);
      };
      await c.query(S.recoverLock([RECOVER_LOCK]));
      await c.query(S.seen([this.owner, this.self.host, this.self.pid, this.self.pidStart, now]));
      for (const { owner } of await rowsOf<{ owner: string | null }>(c, S.owners([]))) {
        if (owner === this.owner || !(await this.dead(c, owner, now))) continue;
        if (owner === null) {
          // Before owners and `sending` were recorded, a `relaying` row may have been written.
          await mayBeSent(null, 'relaying');
        } else {
          // A scheduled send it had claimed waits again; any other `relaying` row had nothing
          // written: it goes, as a refused send does.
          settled.reclaimed += await changed(c, S.requeue([now, owner]));
          for (const { id } of await rowsOf<{ id: string }>(c, S.unsent([owner]))) settled.dropped += await this.dropOne(c, id);
          await c.query(S.forgetOwner([owner]));
        }
        await mayBeSent(owner, 'sending');
        // A copy its dead claimer held is due now, not when the claim runs out.
        settled.reclaimed += await changed(c, S.reclaim([now, owner, now]));
      }
      await c.query(S.forgetOwners([now - FORGET_OWNER_MS]));
      settled.unknown = settled.unknownIds.length;
      return settled;
    });
    this.registered = Promise.resolve();
    return settled;
  }

  async due(now: number, limit: number): Promise<OutboxEntry[]> {
    return (await rowsOf<OutboxRow>(this.pool, S.due([now, limit]))).map(entryOf);
  }

  async claim(id: string, expectedNext: number, until: number): Promise<boolean> {
    await this.register();
    return (await changed(this.pool, S.claim([until, this.owner, id, expectedNext]))) === 1;
  }

  async copy(id: string): Promise<Buffer | null> {
    // One statement, one snapshot: the parts read are all of one copy.
    const parts = await rowsOf<{ bytes: Buffer }>(this.pool, S.parts([id]));
    return parts.length === 0 ? null : Buffer.concat(parts.map((p) => p.bytes));
  }

  async retryAt(id: string, at: number): Promise<void> {
    await this.pool.query(S.retry([at, id]));
  }

  async filed(ids: readonly string[], now: number): Promise<void> {
    if (ids.length === 0) return;
    // A batch filed together is marked together: one commit.
    await inTransaction(this.pool, async (c) => {
      await c.query(S.filed([now, ids]));
      await c.query(S.dropCopy([ids]));
    });
  }

  async nextScheduled(): Promise<number | null> {
    const [r] = await rowsOf<{ at: number | string | null }>(this.pool, S.nextScheduled([]));
    return r?.at === null || r?.at === undefined ? null : Number(r.at);
  }

  async dueScheduled(now: number, limit: number): Promise<OutboxEntry[]> {
    return (await rowsOf<OutboxRow>(this.pool, S.dueScheduled([now, limit]))).map(entryOf);
  }

  async claimScheduled(id: string, now: number): Promise<boolean> {
    await this.register();
    return (await changed(this.pool, S.claimScheduled([this.owner, id, now]))) === 1;
  }

  async claimDue(now: number, limit: number): Promise<OutboxEntry[]> {
    await this.register();
    return byDue((await rowsOf<OutboxRow>(this.pool, S.claimDue([this.owner, now, limit]))).map(entryOf));
  }

  async scheduledParts(id: string): Promise<ScheduledParts | null> {
    // One transaction: the parts read belong to the row read.
    return inTransaction(this.pool, async (c) => {
      const [row] = await rowsOf<ScheduledRow>(c, S.scheduledRow([id]));
      if (!row) return null;
      const parts = row.sealed === null ? [] : await rowsOf<{ bytes: Buffer }>(c, S.sealedParts([id]));
      return scheduledPartsOf(row, Buffer.concat(parts.map((p) => p.bytes)));
    });
  }

  async retryScheduled(id: string, at: number): Promise<void> {
    await this.pool.query(S.retryScheduled([at, id]));
  }

  /** A scheduled send that never went: its state and reason, and its rate count given back. */
  private async settleUnsent(
    id: string,
    state: 'cancelled' | 'failed',
    reason: string | null,
    from: 'scheduled' | 'relaying',
  ): Promise<boolean> {
    return inTransaction(this.pool, async (c) => {
      const [settled] = await rowsOf<{ inbox_id: string; created_at: number }>(c, S.settleUnsent([state, reason, id, from]));
      if (!settled) return false;
      await c.query(S.uncountSend([settled.inbox_id, Math.floor(settled.created_at / MINUTE_MS)]));
      // A cancelled one keeps its bytes for the draft it becomes (forget()).
      if (state === 'failed') await this.forgetOne(c, id, true);
      return true;
    });
  }

  private async forgetOne(c: Queryable, id: string, copyToo: boolean): Promise<void> {
    await c.query(S.forgetEnvelope([id]));
    await c.query(S.dropSealed([id]));
    if (copyToo) await c.query(S.dropCopy([[id]]));
  }

  async failScheduled(id: string, reason: string): Promise<void> {
    await this.settleUnsent(id, 'failed', reason, 'relaying');
  }

  cancel(id: string): Promise<boolean> {
    return this.settleUnsent(id, 'cancelled', null, 'scheduled');
  }

  async reschedule(id: string, sendAt: number): Promise<boolean> {
    return (await changed(this.pool, S.reschedule([sendAt, id]))) === 1;
  }

  async forget(id: string): Promise<void> {
    await inTransaction(this.pool, async (c) => {
      const [row] = await rowsOf<{ state: string }>(c, S.stateOf([id]));
      await this.forgetOne(c, id, row?.state === 'cancelled' || row?.state === 'failed');
    });
  }

  async list(inboxId: string, pending: boolean, limit: number): Promise<OutboxEntry[]> {
    return (await rowsOf<OutboxRow>(this.pool, (pending ? S.listPending : S.listAll)([inboxId, limit]))).map(entryOf);
  }
}
