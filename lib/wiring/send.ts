// The send context: Postfix submission (SMTP opened as one unit, as each inbox's user), both send
// operations, the durable outbox filing Sent copies, and the bounce matcher reading delivery
// reports from what the mail index adds.
import { ImapMessageBodies } from '../../adapters/imap/bodies.ts';
import { ImapSentFiler } from '../../adapters/imap/sent.ts';
import { SmtpRelay } from '../../adapters/smtp/relay.ts';
import type { EventLog } from '../events/log.ts';
import { BodyGate } from '../http/body-gate.ts';
import type { RouteModule } from '../http/app.ts';
import { composeRoutes } from '../http/routes/compose.ts';
import { draftRoutes } from '../http/routes/drafts.ts';
import { outboxRoutes } from '../http/routes/outbox.ts';
import { SEND_MEMORY_BUDGET, sendRoutes } from '../http/routes/send.ts';
import { seal } from '../mail/sealing.ts';
import { BounceMatcher } from '../send/bounces.ts';
import { ImapDraftFolder } from '../../adapters/imap/drafts.ts';
import { DraftService } from '../send/drafts.ts';
import { DraftOpener } from '../send/draft-opening.ts';
import { Identities } from '../send/identities.ts';
import { SentCopies } from '../send/outbox.ts';
import { ScheduledSends } from '../send/scheduled.ts';
import { SendService } from '../send/service.ts';
import type { Core } from './core.ts';
import type { MailContext } from './mail.ts';

export interface SendContext {
  /** Sending (both operations). */
  send: SendService;
  /** Drafts in the inbox's Drafts folder, sent through `send` (docs/sending.md, "Drafts"). */
  drafts: DraftService;
  /** The outbox filing Sent copies. */
  sentCopies: SentCopies;
  relay: SmtpRelay;
  /** Matches delivery reports to the sends they are about (mail.delivery.failed). */
  bounces: BounceMatcher;
  /** One memory budget for the send bodies and the Sent copies being filed. */
  memory: BodyGate;
  /** Sends waiting for their time or undo hold: their timer, cancel and reschedule (docs/sending.md, "Send later"). */
  scheduled: ScheduledSends;
  /** Each inbox address's display name and signature, which JSON compose uses (docs/sending.md, "Identities"). */
  identities: Identities;
  /** Both send operations, drafts, the outbox and JSON compose. */
  routes: RouteModule[];
  /** What a process that died mid-send left (this one's predecessor, say) is settled first; then the outbox runs. */
  start(): Promise<void>;
  /** The outbox, then the relay. */
  stop(): Promise<void>;
  /** The delivery reports being read, once the mirror feeding them is closed. */
  drain(): Promise<void>;
}

export function sendContext(core: Core, events: EventLog, mail: MailContext): SendContext {
  const { config, log, store, keys } = core;
  const { directory, outbox, mailIndex } = store;
  const relay = new SmtpRelay(
    {
      ...config.smtp,
      masterUser: config.imap.masterUser,
      masterPassword: config.imap.masterPassword,
      masterSeparator: config.imap.masterSeparator,
    },
    log.child({ part: 'relay' }),
  );
  const memory = new BodyGate(SEND_MEMORY_BUDGET);
  const sentCopies = new SentCopies({
    outbox,
    directory,
    filer: new ImapSentFiler(mail.source.pool, (inbox) => mail.mirror.refresh(inbox)),
    log: log.child({ part: 'outbox' }),
    memory,
    yieldMs: config.send.copyYieldMs,
  });
  // Bounces are read from what the index adds (a zero-access inbox's by the ingress, before it
  // seals them: mailIngress is handed bounces.ingressReport).
  const bounces = new BounceMatcher({
    index: mailIndex,
    bodies: new ImapMessageBodies(mail.source.pool, mailIndex),
    outbox,
    directory,
    events,
    log: log.child({ part: 'bounces' }),
    copies: sentCopies,
  });
  mail.onChanges(bounces.onChanges);
  const send = new SendService({
    relay,
    outbox,
    events,
    limits: config.send,
    copies: sentCopies,
    log: log.child({ part: 'send' }),
    sealCopy: async (inboxId, raw) => seal(raw, await keys.current(inboxId)),
    metrics: core.recorders.send,
  });
  const drafts = new DraftService({
    folder: new ImapDraftFolder(mail.source.pool),
    send,
    opener: new DraftOpener(keys),
    outbox,
    events,
    log: log.child({ part: 'drafts' }),
    memory,
  });
  const opener = new DraftOpener(keys);
  const scheduled = new ScheduledSends({
    outbox,
    directory,
    send,
    drafts,
    opener,
    events,
    log: log.child({ part: 'scheduled' }),
    horizonMs: config.send.horizonMs,
  });
  send.onScheduled = scheduled.wake;
  const identities = new Identities(store.identities);
  sentCopies.onUnknown = (ids) => send.recovered(ids);
  return {
    send,
    drafts,
    scheduled,
    sentCopies,
    relay,
    bounces,
    memory,
    identities,
    routes: [
      sendRoutes(core.access, send, opener, core.validator, memory),
      draftRoutes(core.access, drafts, core.validator, memory, send),
      outboxRoutes(core.access, scheduled, core.validator),
      composeRoutes({ access: core.access, send, identities, sealed: mail.sealed, events, validator: core.validator, gate: memory }),
    ],
    async start() {
      await sentCopies.recover();
      sentCopies.start();
      scheduled.start();
    },
    async stop() {
      await scheduled.stop();
      await sentCopies.stop();
      await relay.close();
    },
    drain: () => bounces.drain(),
  };
}
