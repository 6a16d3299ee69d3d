// send_message: the twin of POST /inboxes/{inbox}/messages/compose (docs/sending.md, "Compose from JSON").
// The tool composes the message from its fields as that route does (lib/send/compose.ts: the
// identity's name and signature, a reply or forward by reference), then hands it to the same
// SendService, so the same checks (from is the inbox's, recipients) and the same hourly rate apply.
import type { Access, Principal } from '../../auth/access.ts';
import type { MailOpening } from '../../crypto/mail-opening.ts';
import type { Inbox } from '../../directory/types.ts';
import { forbidden, invalid } from '../../errors.ts';
import type { EventLog } from '../../events/log.ts';
import { Composer, referencedOriginal, type ComposeAction } from '../../send/compose.ts';
import type { Identities } from '../../send/identities.ts';
import { isScheduled, type SendService } from '../../send/service.ts';
import { tool, type Tool } from '../tool.ts';

interface SendArgs {
  inboxId: string;
  from: string;
  to: string[];
  subject?: string;
  text: string;
  inReplyTo?: string;
  cc?: string[];
  bcc?: string[];
  html?: string;
  signature?: boolean;
  reference?: { message: string; action: ComposeAction; forward?: 'inline' | 'attachment' };
  /** docs/sending.md, "Send later". */
  send_at?: string;
}

/** A Message-ID as the index has it, with its angle brackets. */
const bracketed = (id: string) => (id.startsWith('<') ? id : `<${id}>`);

/**
 * In-Reply-To and References for an answer to `msgId` (RFC 5322 3.6.4). The index keeps the
 * parent's Message-ID and In-Reply-To (from its IMAP envelope) but not its References, so the
 * chain is the parent's In-Reply-To and the parent: what the RFC asks when the parent has no
 * References, and the two links threading needs when it has.
 */
async function threading(sealed: MailOpening, inbox: Inbox, msgId: string): Promise<{ inReplyTo: string; references: string[] } | null> {
  const { detail } = await sealed.detail(inbox, msgId);
  if (!detail.messageId) return null;
  const parent = bracketed(detail.messageId.trim());
  const grand = detail.inReplyTo?.trim().match(/^<[^<>\s]+>$/) ? [detail.inReplyTo.trim()] : [];
  return { inReplyTo: parent, references: [...grand, parent] };
}

export function sendTools(access: Access, send: SendService, sealed: MailOpening, identities: Identities, events: EventLog): Tool[] {
  const composer = new Composer(identities);
  return [
    tool<SendArgs>({
      name: 'send_message',
      title: 'Send a message',
      description:
        "Sends an email from one of the inbox's addresses, with the address's display name and signature (signature: false leaves it off); cc, bcc and html optional. " +
        'With inReplyTo (a msg_… id of this inbox) it answers that message, threaded. With reference (needs content:read, compatible inboxes) it replies, replies to all ' +
        '(recipients computed when to is empty) or forwards that message with its content quoted, inline or attached. ' +
        "Sending is rate-limited per inbox like every send, and recorded in the project's events. " +
        'With send_at it waits in the outbox until then (cancel or reschedule it there) and the answer gives its outboxId.',
      rule: { token: 'send', session: false },
      input: 'SendMessageInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'send');
        if (args.reference && args.inReplyTo !== undefined) throw invalid('give inReplyTo or reference, not both');
        let thread: { inReplyTo: string; references: string[] } | null = null;
        if (args.inReplyTo !== undefined) {
          // Reading the parent's headers is a read: the token must be allowed to read the inbox.
          if (!access.hasScope(p, 'messages:read'))
            throw forbidden('answering a message needs the messages:read scope too (its headers are read for threading)');
          await access.inboxAccess(p, args.inboxId, 'messages:read');
          thread = await threading(sealed, inbox, args.inReplyTo);
        }
        send.mayUse(inbox, args.from);
        const schedule = send.scheduleOf(args.send_at, undefined);
        const original = args.reference ? await referencedOriginal(access, sealed, events, p, inbox, args.reference.message) : null;
        const composed = await composer.compose(
          inbox,
          {
            from: args.from,
            to: args.to,
            ...(args.cc ? { cc: args.cc } : {}),
            ...(args.bcc ? { bcc: args.bcc } : {}),
            ...(args.subject !== undefined ? { subject: args.subject } : {}),
            text: args.text,
            ...(args.html !== undefined ? { html: args.html } : {}),
            ...(args.signature !== undefined ? { signature: args.signature } : {}),
            ...(args.reference ? { reference: args.reference } : {}),
            ...(thread ? { thread } : {}),
          },
          original,
        );
        const result = await send.send(inbox, p.actor, {
          from: composed.from,
          to: composed.envelope,
          raw: composed.raw,
          ...(schedule ? { schedule } : {}),
        });
        const threaded = thread ? `, in reply to ${args.inReplyTo}` : '';
        const said = isScheduled(result)
          ? `Scheduled for ${result.sendAt} to ${composed.envelope.join(', ')}${threaded} (outbox ${result.outboxId}).`
          : `Sent to ${composed.envelope.join(', ')}${threaded}.`;
        return { structured: { ...result, ...(thread ? thread : {}) }, text: said };
      },
    }),
  ];
}
