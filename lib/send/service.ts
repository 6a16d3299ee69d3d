// The send rules (docs/api.md, "Sending"; docs/sending.md), for both operations: who may send as what, the
// limits Postern enforces before the relay sees anything, what is relayed, the draft replay
// rule, and what happens after the relay answers. The relay (Postfix submission, authenticated
// as the inbox's user) then applies the same checks and limits as for a mail app.
import { createHash } from 'node:crypto';
import { randomId } from '../ids.ts';
import type { Inbox } from '../directory/types.ts';
import { invalid, forbidden, unavailable, unprocessable } from '../errors.ts';
import type { EventLog } from '../events/log.ts';
import type { WarnLog } from '../warn-log.ts';
import { NO_METRICS, type SendMetrics, type SendOutcome } from '../metrics.ts';
import {
  draftIdOf,
  idempotencyDraftId,
  KEY_PREFIX,
  RelayOutcomeUnknown,
  RelayRefused,
  type CopyQueue,
  type OutboxEntry,
  type OutboxStore,
  type Relay,
  type RelayAccepted,
  type SealedSend,
} from './ports.ts';
import { fromAddress, headerValues, lineEnding, splitHeader, withoutField } from './rfc5322.ts';
import { scheduleOf } from './scheduled.ts';

/** docs/api.md, "Limits": both send operations. */
export const MAX_RECIPIENTS = 100;
export const MAX_MESSAGE_BYTES = 25 * 1024 * 1024;

export interface SendLimits {
  /** Messages one inbox may send per hour (Postern's own rate; Postfix policy may add more). */
  perHour: number;
  /** How far ahead a send may be scheduled (POSTERN_SEND_HORIZON); 30 days when not given. */
  horizonMs?: number;
}

export interface SendRequest {
  from: string;
  to: readonly string[];
  /** The RFC 5322 message as the client gave it (decoded or opened). */
  raw: Buffer;
  /** /send: the draft the message is bound to, and a hash of the whole request. */
  draft?: { id: string; fingerprint: string };
  /**
   * POST /messages and JSON compose: the caller's Idempotency-Key and a hash of the request. Held
   * by the outbox as a draft is (docs/sending.md, "Exactly once"), so a retry gets the first answer.
   */
  idempotency?: { key: string; fingerprint: string };
  /**
   * Send later or with an undo hold (docs/sending.md, "Send later"): it waits in the outbox until
   * the later of the two (ms since the epoch), and can be taken back until then.
   */
  schedule?: { sendAt: number; holdUntil: number | null };
  /** /send: its sealed body, kept as it came while it waits (opened again at its time). */
  sealed?: SealedSend;
}

/** What a scheduled send answers (202): it waits in the outbox (docs/sending.md, "Send later"). */
export interface ScheduledAnswer {
  sent: false;
  outboxId: string;
  messageId: string;
  state: 'held' | 'scheduled';
  /** RFC 3339. */
  sendAt: string;
  holdUntil: string | null;
}

/** Either answer of a send. */
export type SendResult = SendAnswer | ScheduledAnswer;

/** Whether a send's answer is a scheduled one (the routes answer it with 202). */
export const isScheduled = (a: SendResult): a is ScheduledAnswer => a.sent === false;

/** A scheduled entry's answer and how the outbox lists it. */
export function scheduledAnswer(e: OutboxEntry, now = Date.now()): ScheduledAnswer {
  return {
    sent: false,
    outboxId: e.id,
    messageId: e.messageId,
    state: e.holdUntil !== null && e.holdUntil > now ? 'held' : 'scheduled',
    sendAt: new Date(e.sendAt ?? e.nextAttemptAt).toISOString(),
    holdUntil: e.holdUntil === null ? null : new Date(e.holdUntil).toISOString(),
  };
}

/** What a send answers: accepted for delivery, and the Message-ID it went with (an extension). */
export interface SendAnswer {
  sent: true;
  messageId: string;
}

/** An Idempotency-Key as POST /events takes it (docs/api.md, "Limits"): 1 to 255 visible ASCII characters. */
export const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

/** How long a replay waits for the first request of its draft to get the relay's answer. */
const REPLAY_WAIT_MS = 60_000;
const HOUR_MS = 3_600_000;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** An RFC 5322 date-time (section 3.3) in UTC. */
function rfc5322Date(at: Date): string {
  return at.toUTCString().replace(/GMT$/, '+0000');
}

/** Bytes hashed by draftFingerprint as their base64 text, encoded a slice at a time. */
export interface Base64Part {
  base64: Buffer;
}

/** Bytes encoded per slice: a multiple of 3, so the slices' base64 joins into the whole's. */
const BASE64_SLICE = 48 * 1024;

/**
 * A hash naming a /send request's content: the same draft with other content is a 422. A
 * base64 field is hashed as its text, whether the request's parser kept the text or only its
 * bytes (a 33 MB text is never rebuilt whole for it).
 */
export function draftFingerprint(parts: ReadonlyArray<string | Base64Part>): string {
  const h = createHash('sha256');
  // Parts never hold a NUL (base64, numbers, addresses), so it separates them unambiguously.
  for (const p of parts) {
    if (typeof p === 'string') h.update(p);
    else for (let at = 0; at < p.base64.length; at += BASE64_SLICE) h.update(p.base64.toString('base64', at, at + BASE64_SLICE), 'latin1');
    h.update('\0');
  }
  return h.digest('hex');
}

/**
 * The message as relayed (Bcc removed) and as its Sent copy keeps it, with a Message-ID and a
 * Date added when it has none (`messageId` when given: a scheduled send opened again keeps its
 * own). Both are pieces of `raw`, never a second whole copy of it.
 */
export function outgoing(
  raw: Buffer,
  from: string,
  messageId?: string,
  /** `from` as the client spelled it, for the error. */
  spelled = from,
): { messageId: string; relayed: Buffer[]; plainCopy: Buffer[] } {
  const { head, body } = splitHeader(raw);
  const author = fromAddress(head);
  if (author === null) throw invalid('the message needs one From header with one address');
  if (author !== from) throw invalid(`from (${spelled}) does not match the message's From header (${author})`);
  // A message without them gets a Message-ID (the outbox, the event and bounces refer to it)
  // and a Date, as a mail app would add them.
  let id = headerValues(head, 'message-id')[0] ?? '';
  const added: string[] = [];
  const nl = lineEnding(head);
  if (!id) {
    id = messageId ?? `<${randomId(16).toString('hex')}@${from.split('@')[1]}>`;
    added.push(`Message-ID: ${id}${nl}`);
  }
  if (headerValues(head, 'date').length === 0) added.push(`Date: ${rfc5322Date(new Date())}${nl}`);
  const prefix = Buffer.from(added.join(''), 'utf8');
  // Bcc recipients are in the envelope; the header goes to nobody, but stays in the sender's copy.
  const relayedHead = withoutField(head, 'bcc');
  const relayed = added.length === 0 && relayedHead === head ? [raw] : [prefix, relayedHead, body];
  const plainCopy = added.length > 0 ? [prefix, head, body] : [raw];
  return { messageId: id, relayed, plainCopy };
}

/** Its relay has not answered yet (nothing written, or written and waiting for the reply). */
const inFlight = (e: OutboxEntry) => e.state === 'relaying' || e.state === 'sending';

/**
 * A send whose relay answer was lost after the end of its data was written, and every retry of its
 * draft until evidence settles it: a 422, final (docs/sending.md, "Exactly once").
 */
const outcomeUnknown = () =>
  unprocessable(
    "outcome unknown: the whole message was written to the mail server but its reply was lost, so it may or may not have been queued; it will not be sent again, and its Sent copy is filed only once a delivery report shows the mail server took it (the outbox lists it as 'unknown')",
  );

/** Why a send recovered from a process that died is `unknown` (mail.outbox.unknown). */
export const DIED_AFTER_DATA_END =
  "the process stopped after the end of the message's data was written, before the mail server's reply was recorded";

export interface SendServiceOptions {
  relay: Relay;
  outbox: OutboxStore;
  events: EventLog;
  limits: SendLimits;
  /**
   * The Sent copies' queue: told when a copy is waiting, so it is filed without waiting for the
   * next poll, and of each send under way, which filing yields to.
   */
  copies: CopyQueue;
  log: WarnLog;
  /** A zero-access inbox's Sent copy is sealed like its incoming mail, before it is stored. */
  sealCopy: (inboxId: string, raw: Buffer) => Promise<Buffer>;
  /** Sends by outcome and the relay's latency (lib/metrics.ts). */
  metrics?: SendMetrics;
  /** Told of each scheduled send stored, with when it is due (lib/send/scheduled.ts arms its timer). */
  onScheduled?: (dueAt: number) => void;
}

export class SendService {
  private readonly relay: Relay;
  private readonly outbox: OutboxStore;
  private readonly events: EventLog;
  private readonly limits: SendLimits;
  private readonly copies: CopyQueue;
  private readonly log: WarnLog;
  private readonly sealCopy: (inboxId: string, raw: Buffer) => Promise<Buffer>;
  private readonly metrics: SendMetrics;
  /** Set by the scheduled sends' runner once it exists (it needs this service first). */
  onScheduled: (dueAt: number) => void;

  constructor(o: SendServiceOptions) {
    this.onScheduled = o.onScheduled ?? (() => {});
    this.relay = o.relay;
    this.outbox = o.outbox;
    this.events = o.events;
    this.limits = o.limits;
    this.copies = o.copies;
    this.log = o.log;
    this.sealCopy = o.sealCopy;
    this.metrics = o.metrics ?? NO_METRICS.send;
  }

  /**
   * The first answer for a draft already sent with this content (no need to open it again);
   * 422 when it was sent with other content; null when the draft is new (or still on its way,
   * which send() waits for).
   */
  async priorAnswer(inboxId: string, draftId: string, fingerprint: string): Promise<SendResult | null> {
    const first = await this.outbox.byDraft(inboxId, draftId);
    if (!first) return null;
    return inFlight(first) ? (this.sameContent(first, fingerprint), null) : this.answerOf(first, fingerprint);
  }

  /** The first answer for an Idempotency-Key already used (as priorAnswer() for a draft). */
  keyAnswer(inboxId: string, key: string, fingerprint: string): Promise<SendResult | null> {
    return this.priorAnswer(inboxId, idempotencyDraftId(key), fingerprint);
  }

  /** 422 (docs/api.md, "Sending": refused, with the reason) for a draft sent before with other content. */
  private sameContent(first: OutboxEntry, fingerprint: string | null): void {
    if (first.fingerprint === fingerprint) return;
    const draft = draftIdOf(first);
    throw unprocessable(
      draft
        ? `draft ${draft} was already sent with other content`
        : `Idempotency-Key ${first.draftId!.slice(KEY_PREFIX.length)} was already used for another request`,
    );
  }

  /**
   * The answer for a draft whose first send is settled, however often it is asked again: sent,
   * or (its relay's answer lost, and no evidence since) a 422 saying the outcome is unknown and
   * it will not go again.
   */
  private answerOf(first: OutboxEntry, fingerprint: string | null): SendResult {
    this.sameContent(first, fingerprint);
    if (first.state === 'scheduled') return scheduledAnswer(first);
    if (first.state === 'unknown' || first.outcomeUnknown) throw outcomeUnknown();
    return { sent: true, messageId: first.messageId };
  }

  /** Relays the message and queues its Sent copy; resolves once the relay accepted it. */
  async send(inbox: Inbox, actor: string, req: SendRequest): Promise<SendResult> {
    const done = this.copies.sending();
    try {
      return await this.relayAndQueue(inbox, actor, req);
    } finally {
      done();
    }
  }

  /**
   * The checks that need nothing opened: who may send as `from` (403), the recipients and the
   * sending rate (422). /send makes them before opening a sealed draft; send() makes them again,
   * the rate for good when it reserves. Gives the recipients, each once.
   */
  async admit(inbox: Inbox, req: { from: string; to: readonly string[] }): Promise<string[]> {
    const to = this.envelopeOf(inbox, req);
    if ((await this.outbox.sentSince(inbox.id, Date.now() - HOUR_MS, this.limits.perHour)) >= this.limits.perHour) throw this.rateLimited();
    return to;
  }

  /** Who may send as `from` (403) and the recipients (422): the recipients, each once. */
  private envelopeOf(inbox: Inbox, req: { from: string; to: readonly string[] }): string[] {
    this.mayUse(inbox, req.from);
    // Each recipient once, as the client spelled it (a local part may be case-sensitive).
    const once = new Set<string>();
    const to = req.to.filter((a) => !once.has(a.toLowerCase()) && once.add(a.toLowerCase()));
    if (to.length < 1 || to.length > MAX_RECIPIENTS) throw unprocessable(`a message goes to 1 to ${MAX_RECIPIENTS} recipients`);
    return to;
  }

  /**
   * The schedule of a send with a send time (RFC 3339) or an undo hold (seconds), checked
   * against the horizon (lib/send/scheduled.ts); undefined when it goes at once.
   */
  scheduleOf(sendAt: string | undefined, holdSeconds: number | undefined): SendRequest['schedule'] {
    return scheduleOf(sendAt, holdSeconds, this.limits.horizonMs ?? 30 * 86_400_000);
  }

  /** 403 unless `from` is one of the inbox's addresses. */
  mayUse(inbox: Inbox, from: string): void {
    const wanted = from.toLowerCase();
    if (!inbox.addresses.some((a) => a.toLowerCase() === wanted)) throw forbidden(`this inbox cannot send as ${from}`);
  }

  private rateLimited(): Error {
    return unprocessable(`sending rate limit reached: this inbox may send ${this.limits.perHour} messages per hour`);
  }

  private async relayAndQueue(inbox: Inbox, actor: string, req: SendRequest): Promise<SendResult> {
    const from = req.from.toLowerCase();
    // The rate is not read here: the reservation below counts it, atomically, at no extra read.
    const to = this.envelopeOf(inbox, req);
    if (req.raw.length > MAX_MESSAGE_BYTES) throw unprocessable(`the message is over the ${MAX_MESSAGE_BYTES} byte limit`);

    const { messageId, relayed, plainCopy } = outgoing(req.raw, from, undefined, req.from);
    if (req.schedule && inbox.mode === 'zero-access' && !req.sealed) {
      throw unprocessable("a zero-access inbox's scheduled sends wait sealed: send them with POST /send or a sealed draft");
    }
    // No plaintext of a zero-access inbox's message rests anywhere, the outbox included.
    const copy =
      inbox.mode === 'zero-access'
        ? [await this.sealCopy(inbox.id, plainCopy.length === 1 ? plainCopy[0]! : Buffer.concat(plainCopy))]
        : plainCopy;

    const now = Date.now();
    const entry: OutboxEntry = {
      id: randomId(16).toString('hex'),
      inboxId: inbox.id,
      projectId: inbox.projectId,
      actor,
      draftId: req.draft?.id ?? (req.idempotency ? idempotencyDraftId(req.idempotency.key) : null),
      fingerprint: req.draft?.fingerprint ?? req.idempotency?.fingerprint ?? null,
      state: req.schedule ? 'scheduled' : 'relaying',
      outcomeUnknown: false,
      settledBy: null,
      mailFrom: from,
      recipients: to.length,
      messageId,
      size: relayed.reduce((n, piece) => n + piece.length, 0),
      attempts: 0,
      claims: 0,
      nextAttemptAt: req.schedule ? Math.max(req.schedule.sendAt, req.schedule.holdUntil ?? 0) : now,
      createdAt: now,
      sendAt: req.schedule?.sendAt ?? null,
      holdUntil: req.schedule?.holdUntil ?? null,
      failure: null,
    };
    const scheduled = req.schedule ? { envelope: to, sealed: req.sealed ?? null } : undefined;
    const deadline = now + REPLAY_WAIT_MS;
    for (;;) {
      const rate = { since: Date.now() - HOUR_MS, max: this.limits.perHour };
      const reservation = await this.outbox.reserve(entry, copy, rate, scheduled);
      if (reservation.ok) break;
      if (reservation.reason === 'rate') throw this.rateLimited();
      // The draft was sent (or is being sent) already: never twice.
      const first = reservation.existing;
      this.sameContent(first, entry.fingerprint);
      if (!inFlight(first)) return this.answerOf(first, entry.fingerprint);
      const settled = await this.waitForRelay(first.id, deadline);
      if (settled) return this.answerOf(settled, entry.fingerprint);
      // The first attempt was refused (its entry is gone): this one may try, unless time is up.
      if (Date.now() > deadline) throw unavailable('the first request for this draft or key is still being relayed; try again');
    }
    if (scheduled) {
      this.onScheduled(entry.nextAttemptAt);
      await this.recordOutbox(entry, 'mail.outbox.scheduled', {
        sendAt: new Date(entry.sendAt!).toISOString(),
        ...(entry.holdUntil !== null ? { holdUntil: new Date(entry.holdUntil).toISOString() } : {}),
      });
      return scheduledAnswer(entry);
    }

    let accepted: RelayAccepted;
    const relayStarted = performance.now();
    try {
      // Recorded before the end of the message's data (its final dot): a process that dies from
      // then on leaves a send Postfix may have taken, never one relayed again; one that dies
      // before leaves one Postfix cannot have taken, which may go again (OutboxStore.recover).
      accepted = await this.relay.send({
        user: inbox.imapUser,
        from,
        to,
        raw: relayed,
        envid: entry.id,
        writing: () => this.outbox.sending(entry.id),
      });
      this.measured('accepted', relayStarted);
    } catch (err) {
      this.measured(
        err instanceof RelayOutcomeUnknown ? 'unknown' : err instanceof RelayRefused ? (err.permanent ? 'refused' : 'deferred') : 'error',
        relayStarted,
      );
      if (err instanceof RelayOutcomeUnknown) {
        // Postfix may have queued it: kept (the rate, the draft, bounces) and never relayed
        // again, its Sent copy kept unfiled until a delivery report settles it; this answer and
        // every retry's say so.
        await this.unknown(entry, err.reason);
        throw outcomeUnknown();
      }
      await this.outbox.drop(entry.id);
      if (err instanceof RelayRefused) {
        if (err.permanent) throw unprocessable(`the mail server refused the message: ${err.reason}`);
        throw unavailable(`the mail server could not take the message now (${err.reason}); try again later`);
      }
      throw err;
    }
    await this.outbox.relayed(entry.id, Date.now());
    this.copies.kick();
    await this.recordAccepted(inbox, entry, accepted);
    return { sent: true, messageId };
  }

  /**
   * Relays a scheduled send claimed by lib/send/scheduled.ts (its entry `relaying`): as a send
   * made now, except that a refusal leaves the entry to the caller (retried or failed, never
   * dropped) and a lost reply is recorded and answered `unknown` rather than thrown.
   */
  async relayScheduled(inbox: Inbox, entry: OutboxEntry, to: readonly string[], raw: Buffer): Promise<'sent' | 'unknown'> {
    const done = this.copies.sending();
    const relayStarted = performance.now();
    try {
      // A sealed send's message is opened again: the Message-ID it was scheduled with is kept.
      const { relayed } = outgoing(raw, entry.mailFrom, entry.messageId);
      const accepted = await this.relay.send({
        user: inbox.imapUser,
        from: entry.mailFrom,
        to,
        raw: relayed,
        envid: entry.id,
        writing: () => this.outbox.sending(entry.id),
      });
      this.measured('accepted', relayStarted);
      await this.outbox.relayed(entry.id, Date.now());
      this.copies.kick();
      await this.recordAccepted(inbox, entry, accepted);
      return 'sent';
    } catch (err) {
      this.measured(
        err instanceof RelayOutcomeUnknown ? 'unknown' : err instanceof RelayRefused ? (err.permanent ? 'refused' : 'deferred') : 'error',
        relayStarted,
      );
      if (!(err instanceof RelayOutcomeUnknown)) throw err;
      await this.unknown(entry, err.reason);
      return 'unknown';
    } finally {
      done();
    }
  }

  /** A send whose reply to the end of its data was lost: `unknown`, logged and in the events. */
  private async unknown(entry: OutboxEntry, reason: string): Promise<void> {
    await this.outbox.outcomeUnknown(entry.id, Date.now());
    this.log.warn(
      { outbox: entry.id, messageId: entry.messageId, reason },
      "the relay's reply to the end of a message's data was lost; its outcome is unknown",
    );
    await this.recordOutbox(entry, 'mail.outbox.unknown', { reason });
  }

  /**
   * The sends a recovery made `unknown` (a process died between writing the end of their data
   * and recording the reply): in the events, as a lost reply is (docs/sending.md, "Exactly once").
   */
  async recovered(unknownIds: readonly string[]): Promise<void> {
    for (const id of unknownIds) {
      const entry = await this.outbox.get(id).catch(() => null);
      if (entry) await this.recordOutbox(entry, 'mail.outbox.unknown', { reason: DIED_AFTER_DATA_END });
    }
  }

  /** An outbox state change in the project's events (docs/sending.md, "The outbox"); a lost one is only logged. */
  async recordOutbox(
    entry: OutboxEntry,
    type:
      | 'mail.outbox.scheduled'
      | 'mail.outbox.rescheduled'
      | 'mail.outbox.cancelled'
      | 'mail.outbox.sending'
      | 'mail.outbox.unknown'
      | 'mail.outbox.settled',
    more: Record<string, string>,
  ): Promise<void> {
    const subject = entry.messageId.length <= 256 ? entry.messageId : undefined;
    try {
      await this.events.record({
        projectId: entry.projectId,
        inboxId: entry.inboxId,
        actor: entry.actor,
        ...(subject ? { subject } : {}),
        type,
        data: { outboxId: entry.id, messageId: entry.messageId, ...more },
      });
    } catch (err) {
      this.log.warn({ err, outbox: entry.id }, 'could not record the outbox event');
    }
  }

  private measured(outcome: SendOutcome, relayStarted: number): void {
    this.metrics.sent(outcome);
    this.metrics.relayed((performance.now() - relayStarted) / 1000, outcome);
  }

  /** The entry once its relay is settled; null when it went away (refused) or time ran out. */
  private async waitForRelay(id: string, deadline: number): Promise<OutboxEntry | null> {
    while (Date.now() < deadline) {
      const now = await this.outbox.get(id);
      if (!now) return null;
      if (!inFlight(now)) return now;
      await sleep(50);
    }
    return null;
  }

  private async recordAccepted(inbox: Inbox, entry: OutboxEntry, accepted: RelayAccepted): Promise<void> {
    // A Message-ID is the natural subject, when it fits the log's subject limit.
    const subject = entry.messageId.length <= 256 ? entry.messageId : undefined;
    const common = { projectId: inbox.projectId, inboxId: inbox.id, actor: entry.actor, ...(subject ? { subject } : {}) };
    const draftId = draftIdOf(entry);
    const ids = { messageId: entry.messageId, ...(draftId ? { draftId } : {}) };
    try {
      await this.events.record({
        ...common,
        type: 'mail.delivery.accepted',
        data: { from: entry.mailFrom, recipients: entry.recipients - accepted.rejected.length, size: entry.size, ...ids },
        dedupeKey: `send:accepted:${entry.id}`,
      });
      if (accepted.rejected.length > 0) {
        await this.events.record({
          ...common,
          type: 'mail.delivery.failed',
          data: {
            from: entry.mailFrom,
            reason: accepted.rejected.map((r) => `${r.recipient}: ${r.reply}`).join('; '),
            permanent: accepted.rejected.every((r) => r.reply.startsWith('5')),
            recipients: accepted.rejected.map((r) => r.recipient),
            ...ids,
          },
          dedupeKey: `send:refused:${entry.id}`,
        });
      }
    } catch (err) {
      // The message is on its way; a lost event must not turn that into an error.
      this.log.warn({ err, outbox: entry.id }, 'could not record the delivery event');
    }
  }
}
