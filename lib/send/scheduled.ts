// Scheduled and undoable sends (docs/sending.md, "Send later", "The outbox"): a send with a send
// time or an undo hold waits in the durable outbox in state `scheduled` and goes at its time. One
// timer per process is armed for the earliest due send (re-armed when this process schedules or
// reschedules one, and every `pollMs` from the store's earliest due time, an index read, for
// what other processes stored). A due send is claimed (`scheduled` → `relaying`, owned by this
// process) before it is relayed, so of several processes one sends it; from there the outbox's
// exactly-once rules hold as for any send, and a process that dies holding a claim leaves it
// `scheduled` again for the next recovery (OutboxStore.recover). Until it is claimed, a send can
// be cancelled (it goes back to Drafts) or rescheduled.
import type { DirectoryStore } from '../directory/ports.ts';
import type { Inbox } from '../directory/types.ts';
import { conflict, invalid, notFound, unprocessable } from '../errors.ts';
import type { EventLog } from '../events/log.ts';
import type { WarnLog } from '../warn-log.ts';
import type { DraftOpener } from './draft-opening.ts';
import type { DraftContent, DraftService } from './drafts.ts';
import { draftIdOf, RelayRefused, type OutboxEntry, type OutboxStore, type OutcomeEvidence } from './ports.ts';
import type { SendRequest, SendService } from './service.ts';

/** The longest undo hold (the web app's undo window). */
export const MAX_HOLD_SECONDS = 30;
/** A send the relay could not take now is tried again this often, doubling, before it fails. */
const RETRY_MS = 30_000;
const TRIES = 6;

/** How the outbox lists a send (schemas/send.json, OutboxEntry). */
export interface OutboxView {
  id: string;
  messageId: string;
  state: 'held' | 'scheduled' | 'sending' | 'sent' | 'unknown' | 'failed' | 'cancelled';
  from: string;
  recipients: number;
  size: number;
  createdAt: string;
  sendAt: string | null;
  holdUntil: string | null;
  draftId: string | null;
  /** `failed`: why. */
  reason: string | null;
  /** An extension: a send whose outcome was unknown, settled since by evidence (docs/sending.md, "Exactly once"). */
  settledBy: OutcomeEvidence | null;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function outboxView(e: OutboxEntry, now = Date.now()): OutboxView {
  let state: OutboxView['state'];
  switch (e.state) {
    case 'scheduled':
      state = e.holdUntil !== null && e.holdUntil > now ? 'held' : 'scheduled';
      break;
    case 'relaying':
    case 'sending':
      state = 'sending';
      break;
    case 'unknown':
      state = 'unknown';
      break;
    case 'filing':
    case 'filed':
      state = e.outcomeUnknown ? 'unknown' : 'sent';
      break;
    default:
      state = e.state;
  }
  return {
    id: e.id,
    messageId: e.messageId,
    state,
    from: e.mailFrom,
    recipients: e.recipients,
    size: e.size,
    createdAt: new Date(e.createdAt).toISOString(),
    sendAt: iso(e.sendAt),
    holdUntil: iso(e.holdUntil),
    draftId: draftIdOf(e),
    reason: e.failure,
    settledBy: e.settledBy,
  };
}

/**
 * A send's schedule from what the caller gave (an RFC 3339 send time, a hold in seconds);
 * undefined when it goes at once. A send time past the horizon is a 422; one in the past goes at
 * once (with its hold, if any).
 */
export function scheduleOf(
  sendAt: string | undefined,
  holdSeconds: number | undefined,
  horizonMs: number,
  now = Date.now(),
): SendRequest['schedule'] {
  let at = now;
  if (sendAt !== undefined) {
    // RFC 3339 with a zone: a time without one would be read in the server's zone.
    if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/i.test(sendAt) || Number.isNaN(Date.parse(sendAt))) {
      throw invalid('sendAt must be an RFC 3339 date-time with a time zone, such as 2026-12-01T09:00:00Z');
    }
    at = Date.parse(sendAt);
    if (at > now + horizonMs)
      throw unprocessable(`sendAt is more than ${Math.round(horizonMs / 86_400_000)} days ahead (POSTERN_SEND_HORIZON)`);
  }
  if (holdSeconds !== undefined && (!Number.isInteger(holdSeconds) || holdSeconds < 0 || holdSeconds > MAX_HOLD_SECONDS)) {
    throw invalid(`holdSeconds must be an integer from 0 to ${MAX_HOLD_SECONDS}`);
  }
  const hold = holdSeconds ?? 0;
  if (at <= now && hold === 0) return undefined;
  return { sendAt: Math.max(at, now), holdUntil: hold > 0 ? now + hold * 1000 : null };
}

export interface ScheduledSendsOptions {
  outbox: OutboxStore;
  directory: DirectoryStore;
  send: SendService;
  drafts: DraftService;
  opener: DraftOpener;
  events: EventLog;
  log: WarnLog;
  /** How far ahead a send may be scheduled (POSTERN_SEND_HORIZON). */
  horizonMs: number;
  /** The store's earliest due time is read at least this often (other processes' sends). */
  pollMs?: number;
  /** Scheduled sends relayed at once by this process, at most. */
  concurrency?: number;
}

export class ScheduledSends {
  private timer: NodeJS.Timeout | null = null;
  /** When the timer fires (ms since the epoch). */
  private timerAt = Infinity;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = true;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly pollMs: number;
  private readonly concurrency: number;
  readonly horizonMs: number;

  constructor(private readonly o: ScheduledSendsOptions) {
    this.pollMs = o.pollMs ?? 5000;
    this.concurrency = o.concurrency ?? 32;
    this.horizonMs = o.horizonMs;
  }

  start(): void {
    this.stopped = false;
    this.arm(Date.now());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Infinity;
    await this.running;
    await Promise.all([...this.inFlight]);
  }

  /** A send is due at `at`: the timer fires then unless it fires sooner. */
  readonly wake = (at: number): void => {
    if (this.stopped) return;
    if (this.running) {
      if (at <= Date.now() + 5) this.again = true;
      else if (at < this.timerAt) this.arm(at);
      return;
    }
    if (at < this.timerAt) this.arm(at);
  };

  private arm(at: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(() => this.fire(), Math.max(0, at - Date.now()));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = null;
    this.timerAt = Infinity;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.pass()
      .catch((err: unknown) => this.o.log.warn({ err }, 'the scheduled sends pass failed'))
      .then(async () => (this.again ? Date.now() : await this.nextDue()))
      .catch(() => Date.now() + this.pollMs)
      .then((next) => {
        this.running = null;
        this.again = false;
        // The store is read again by pollMs at the latest: what other processes stored meanwhile.
        this.arm(Math.min(next, Date.now() + this.pollMs));
      });
  }

  private async nextDue(): Promise<number> {
    return (await this.o.outbox.nextScheduled()) ?? Infinity;
  }

  /**
   * Claims and sends every send due now, `concurrency` at a time (tests use it too). Claims are
   * made in batches of up to `concurrency`, one write each (OutboxStore.claimDue), when the last
   * batch has all been started and a slot is free: a claimed send waits here at most as long as
   * it would have waited in the store, and this process never holds more than one batch that
   * another process could have sent. A stop sends what it had claimed, and claims no more.
   */
  async pass(): Promise<void> {
    for (;;) {
      while (this.inFlight.size >= this.concurrency) await Promise.race(this.inFlight);
      if (this.stopped) break;
      const claimed = await this.o.outbox.claimDue(Date.now(), this.concurrency);
      // None due, or all taken by other processes: they send them.
      if (claimed.length === 0) break;
      for (const entry of claimed) {
        while (this.inFlight.size >= this.concurrency) await Promise.race(this.inFlight);
        const run: Promise<void> = this.sendOne(entry).finally(() => this.inFlight.delete(run));
        this.inFlight.add(run);
      }
    }
    await Promise.all([...this.inFlight]);
  }

  /** Relays one claimed send; a refusal fails it, or (the relay busy) schedules it again. */
  private async sendOne(entry: OutboxEntry): Promise<void> {
    const { outbox, send, opener } = this.o;
    try {
      const inbox = await this.o.directory.getInbox(entry.inboxId);
      if (!inbox) return await this.fail(entry, 'the inbox was removed before its send time', null);
      const parts = await outbox.scheduledParts(entry.id);
      const raw = parts?.sealed ? await opener.open(inbox.id, parts.sealed) : parts ? await outbox.copy(entry.id) : null;
      if (!parts || !raw) return await this.fail(entry, 'its message is no longer in the outbox', inbox);
      await send.recordOutbox(entry, 'mail.outbox.sending', {});
      await send.relayScheduled(inbox, entry, parts.envelope, raw);
      await outbox.forget(entry.id);
    } catch (err) {
      if (err instanceof RelayRefused && !err.permanent && entry.attempts + 1 < TRIES) {
        const at = Date.now() + RETRY_MS * 2 ** entry.attempts;
        await outbox.retryScheduled(entry.id, at);
        this.o.log.warn(
          { outbox: entry.id, reason: err.reason, retryAt: new Date(at).toISOString() },
          'the relay could not take a scheduled send now',
        );
        this.wake(at);
        return;
      }
      const reason =
        err instanceof RelayRefused
          ? `the mail server refused the message: ${err.reason}`
          : err instanceof Error
            ? err.message
            : String(err);
      if (!(err instanceof RelayRefused)) this.o.log.warn({ err, outbox: entry.id }, 'a scheduled send failed');
      await this.fail(entry, reason, await this.o.directory.getInbox(entry.inboxId)).catch((e: unknown) =>
        this.o.log.warn({ err: e, outbox: entry.id }, 'could not mark a scheduled send failed'),
      );
    }
  }

  private async fail(entry: OutboxEntry, reason: string, inbox: Inbox | null): Promise<void> {
    await this.o.outbox.failScheduled(entry.id, reason);
    if (!inbox) return;
    const draftId = draftIdOf(entry);
    try {
      await this.o.events.record({
        projectId: entry.projectId,
        inboxId: entry.inboxId,
        actor: entry.actor,
        ...(entry.messageId.length <= 256 ? { subject: entry.messageId } : {}),
        type: 'mail.delivery.failed',
        data: { from: entry.mailFrom, reason, permanent: true, messageId: entry.messageId, ...(draftId ? { draftId } : {}) },
        dedupeKey: `send:refused:${entry.id}`,
      });
    } catch (err) {
      this.o.log.warn({ err, outbox: entry.id }, 'could not record the delivery event');
    }
  }

  /** The inbox's outbox, newest first: the sends not settled yet, or (`pending` false) every one. */
  async list(inbox: Inbox, pending: boolean, limit: number): Promise<OutboxView[]> {
    const now = Date.now();
    return (await this.o.outbox.list(inbox.id, pending, limit)).map((e) => outboxView(e, now));
  }

  async get(inbox: Inbox, id: string): Promise<OutboxView> {
    return outboxView(await this.entry(inbox, id));
  }

  private async entry(inbox: Inbox, id: string): Promise<OutboxEntry> {
    const entry = /^[0-9a-f]{32}$/.test(id) ? await this.o.outbox.get(id) : null;
    if (!entry || entry.inboxId !== inbox.id) throw notFound('no such send in this outbox');
    return entry;
  }

  /**
   * Takes a held or scheduled send back before it goes: it is put back in Drafts (a sealed send
   * as the sealed draft it was, under its draft id) and never sent. A cancel whose draft could
   * not be saved may be asked again.
   */
  async cancel(inbox: Inbox, actor: string, id: string): Promise<{ cancelled: true; draftId: string; outboxId: string }> {
    const entry = await this.entry(inbox, id);
    if (entry.state !== 'scheduled' && entry.state !== 'cancelled') {
      throw conflict(`this send is ${outboxView(entry).state} already: only a held or scheduled send can be cancelled`);
    }
    const parts = await this.o.outbox.scheduledParts(id);
    if (entry.state === 'scheduled' && !(await this.o.outbox.cancel(id))) {
      throw conflict('this send is being sent: it can no longer be cancelled');
    }
    const copy = parts && !parts.sealed ? await this.o.outbox.copy(id) : null;
    if (!parts || (!parts.sealed && !copy)) throw conflict('this send was cancelled already');
    const content: DraftContent = parts.sealed
      ? {
          sealed: {
            epoch: parts.sealed.epoch,
            wrappedDek: parts.sealed.wrappedDek,
            ciphertext: parts.sealed.ciphertext,
            from: entry.mailFrom,
            to: parts.envelope,
          },
        }
      : { raw: copy! };
    const draftId = parts.sealed?.draftId ?? draftIdOf(entry) ?? undefined;
    const draft = await this.o.drafts.create(inbox, actor, content, draftId);
    await this.o.outbox.forget(id);
    await this.o.send.recordOutbox({ ...entry, actor }, 'mail.outbox.cancelled', { draftId: draft.id });
    return { cancelled: true, draftId: draft.id, outboxId: id };
  }

  /** Moves a held or scheduled send's time (its hold stays); 409 once it is being sent. */
  async reschedule(inbox: Inbox, actor: string, id: string, sendAt: string): Promise<OutboxView> {
    const entry = await this.entry(inbox, id);
    const at = scheduleOf(sendAt, undefined, this.horizonMs)?.sendAt ?? Date.now();
    if (entry.state !== 'scheduled' || !(await this.o.outbox.reschedule(id, at))) {
      throw conflict(`this send is ${outboxView(entry).state} already: only a held or scheduled send can be rescheduled`);
    }
    this.wake(Math.max(at, entry.holdUntil ?? 0));
    const now = (await this.o.outbox.get(id)) ?? entry;
    await this.o.send.recordOutbox({ ...now, actor }, 'mail.outbox.rescheduled', { sendAt: new Date(at).toISOString() });
    return outboxView(now);
  }
}
