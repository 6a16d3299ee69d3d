// Bounces: a delivery status notification that comes back to an inbox names, as its
// Original-Envelope-Id, the ENVID the relay was given, which is the outbox entry's id. A match is
// recorded as mail.delivery.failed with the recipients that failed and their status codes.
//
// Candidates are the messages the index adds to INBOX from the mail system (MAILER-DAEMON or
// postmaster, as Postfix and other MTAs send them); only those are read from IMAP. Each report
// is recorded once, whichever process saw it (a dedupe key naming the message).
//
// A zero-access inbox's mail is sealed by the ingress before it is stored, so the index's path
// finds nothing to read there: its reports are matched by the ingress, from the bytes as they
// came, before they are sealed (ingressReport), and recorded once per report's content.
//
// A report naming a send whose outcome is unknown (its reply to the end of its data was lost) is
// evidence that the relay took it: only a server that accepted the message reports on it. The
// send is settled (OutboxStore.settle): its Sent copy is filed, its retries answer that it was
// sent, and mail.outbox.settled is recorded (docs/sending.md, "Exactly once").
import { createHash } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { DirectoryStore } from '../directory/ports.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import { guidFromId } from '../ids.ts';
import { KeyedChain } from '../keyed-chain.ts';
import type { MessageBodies } from '../mail/bodies.ts';
import { isMessageChange, type LiveChange, type MessageChange } from '../mail/types.ts';
import { type MailIndexStore } from '../mail/ports.ts';
import type { WarnLog } from '../warn-log.ts';
import { parseDsn, type Dsn } from './dsn.ts';
import { draftIdOf, type CopyQueue, type OutboxEntry, type OutboxStore } from './ports.ts';
import { fromAddress, splitHeader } from './rfc5322.ts';

/** A report is small; anything much larger is not one worth reading whole. */
const MAX_REPORT_BYTES = 1024 * 1024;

const SYSTEM_SENDER = /^(mailer-daemon|postmaster)@/i;

async function readAll(stream: Readable, max: number): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) {
      stream.destroy();
      return null;
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

export interface BounceMatcherOptions {
  index: MailIndexStore;
  bodies: MessageBodies;
  outbox: OutboxStore;
  directory: DirectoryStore;
  events: EventLog;
  log: WarnLog;
  /** Told when a settled send's Sent copy is due. */
  copies?: Pick<CopyQueue, 'kick'>;
}

export class BounceMatcher {
  /** Per inbox, the reports still being read: in order, and waited for at shutdown. */
  private readonly chains: KeyedChain;

  private readonly index: MailIndexStore;
  private readonly bodies: MessageBodies;
  private readonly outbox: OutboxStore;
  private readonly directory: DirectoryStore;
  private readonly events: EventLog;
  private readonly log: WarnLog;
  private readonly copies: Pick<CopyQueue, 'kick'> | null;

  constructor(o: BounceMatcherOptions) {
    this.copies = o.copies ?? null;
    this.index = o.index;
    this.bodies = o.bodies;
    this.outbox = o.outbox;
    this.directory = o.directory;
    this.events = o.events;
    this.log = o.log;
    this.chains = new KeyedChain(o.log, 'could not read a delivery report', 'inboxId');
  }

  /** Told of every batch of changes the index applied (alongside the event recorder). */
  readonly onChanges = (inboxId: string, changes: readonly LiveChange[]): void => {
    const added = changes.filter(isMessageChange).filter((c) => c.type === 'message.added');
    if (added.length === 0) return;
    this.chains.run(inboxId, async () => {
      for (const c of added) if (await this.isCandidate(inboxId, c)) await this.match(inboxId, c);
    });
  };

  /**
   * A message the ingress accepted for a zero-access inbox, as it came (before it was sealed):
   * a delivery report from the mail system (the null sender DSNs come from, or MAILER-DAEMON /
   * postmaster) is matched like one the index found. Never rejects.
   */
  async ingressReport(inboxId: string, envelopeFrom: string, raw: Uint8Array): Promise<void> {
    try {
      if (raw.length > MAX_REPORT_BYTES) return;
      const bytes = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
      const author = fromAddress(splitHeader(bytes).head);
      if (envelopeFrom !== '' && !(author && SYSTEM_SENDER.test(author))) return;
      const report = parseDsn(bytes);
      // The same report delivered again (Postfix retrying another recipient) is the same event.
      const digest = createHash('sha256').update(bytes).digest('hex');
      await this.record(inboxId, report, `bounce:${inboxId}:ingress:${digest}`);
    } catch (err) {
      this.log.warn({ err, inboxId }, 'could not read a delivery report');
    }
  }

  async drain(): Promise<void> {
    await this.chains.idle();
  }

  private async isCandidate(inboxId: string, change: MessageChange): Promise<boolean> {
    const label = await this.index.label(inboxId, change.at.labelGuid);
    if (!label || label.path.toUpperCase() !== 'INBOX') return false;
    const guid = guidFromId('msg', change.msgId);
    const found = guid ? await this.index.message(inboxId, guid) : null;
    return !!found?.message.fromAddress && SYSTEM_SENDER.test(found.message.fromAddress);
  }

  private async match(inboxId: string, change: MessageChange): Promise<void> {
    const inbox = await this.directory.getInbox(inboxId);
    if (!inbox) return;
    const stream = await this.bodies.open(inbox, { labelGuid: change.at.labelGuid, uid: change.at.uid });
    const raw = stream ? await readAll(stream, MAX_REPORT_BYTES) : null;
    if (!raw) return;
    await this.record(inboxId, parseDsn(raw), `bounce:${inboxId}:${change.at.labelGuid}:${change.at.uidValidity}:${change.at.uid}`);
  }

  /** An outcome-unknown send the report shows the relay took: settled, its copy due, the event recorded. */
  private async settle(entry: OutboxEntry, report: Dsn): Promise<void> {
    const settled = await this.outbox.settle(entry.id, 'dsn', Date.now());
    if (!settled) return;
    this.copies?.kick();
    const actions = [...new Set(report.recipients.map((r) => r.action).filter((a) => a !== ''))];
    this.log.warn({ outbox: entry.id, messageId: entry.messageId, actions }, 'a delivery report settled a send whose outcome was unknown');
    await this.events.record({
      type: 'mail.outbox.settled',
      projectId: entry.projectId,
      inboxId: entry.inboxId,
      actor: SYSTEM_ACTOR,
      ...(entry.messageId.length <= 256 ? { subject: entry.messageId } : {}),
      data: { outboxId: entry.id, messageId: entry.messageId, evidence: 'dsn', actions },
      dedupeKey: `outbox:settled:${entry.id}`,
    });
  }

  /**
   * mail.delivery.failed for a report naming one of the inbox's own sends, once per `dedupeKey`;
   * first, a send whose outcome was unknown is settled by it.
   */
  private async record(inboxId: string, report: Dsn | null, dedupeKey: string): Promise<void> {
    if (!report?.envid) return;
    const entry = await this.outbox.get(report.envid);
    // Only the inbox's own sends: an id from elsewhere matches nothing.
    if (!entry || entry.inboxId !== inboxId) return;
    if (entry.state === 'unknown' && report.recipients.length > 0) await this.settle(entry, report);
    const failed = report.recipients.filter((r) => r.action === 'failed' || r.action === 'delayed');
    if (failed.length === 0) return;
    const permanent = failed.every((r) => r.action === 'failed' && r.status.startsWith('5'));
    await this.events.record({
      type: 'mail.delivery.failed',
      projectId: entry.projectId,
      inboxId,
      actor: SYSTEM_ACTOR,
      ...(entry.messageId.length <= 256 ? { subject: entry.messageId } : {}),
      data: {
        from: entry.mailFrom,
        reason: failed.map((r) => `${r.recipient}: ${r.action} ${r.status}${r.diagnostic ? ` (${r.diagnostic})` : ''}`).join('; '),
        permanent,
        status: failed[0]!.status,
        recipients: failed.map((r) => r.recipient),
        statuses: failed.map((r) => r.status),
        messageId: entry.messageId,
        ...(draftIdOf(entry) ? { draftId: draftIdOf(entry)! } : {}),
      },
      dedupeKey,
    });
  }
}
