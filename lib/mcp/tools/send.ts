// send_message: the twin of POST /inboxes/{inbox}/messages (docs/api.md, "Sending", the plaintext path).
// The tool writes the RFC 5322 message from a few fields, then hands it to the same SendService,
// so the same checks (from is the inbox's, recipients) and the same hourly rate apply.
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import type { Access, Principal } from '../../auth/access.ts';
import type { SealedMail } from '../../crypto/sealed-mail.ts';
import type { Inbox } from '../../directory/types.ts';
import { forbidden } from '../../errors.ts';
import type { SendService } from '../../send/service.ts';
import { tool, type Tool } from '../tool.ts';

interface SendArgs {
  inboxId: string;
  from: string;
  to: string[];
  subject: string;
  text: string;
  inReplyTo?: string;
}

/** A Message-ID as the index has it, with its angle brackets. */
const bracketed = (id: string) => (id.startsWith('<') ? id : `<${id}>`);

/**
 * In-Reply-To and References for an answer to `msgId` (RFC 5322 3.6.4). The index keeps the
 * parent's Message-ID and In-Reply-To (from its IMAP envelope) but not its References, so the
 * chain is the parent's In-Reply-To and the parent: what the RFC asks when the parent has no
 * References, and the two links threading needs when it has.
 */
async function threading(sealed: SealedMail, inbox: Inbox, msgId: string): Promise<{ inReplyTo: string; references: string[] } | null> {
  const { detail } = await sealed.detail(inbox, msgId);
  if (!detail.messageId) return null;
  const parent = bracketed(detail.messageId.trim());
  const grand = detail.inReplyTo?.trim().match(/^<[^<>\s]+>$/) ? [detail.inReplyTo.trim()] : [];
  return { inReplyTo: parent, references: [...grand, parent] };
}

export function sendTools(access: Access, send: SendService, sealed: SealedMail): Tool[] {
  return [
    tool<SendArgs>({
      name: 'send_message',
      title: 'Send a message',
      description:
        "Sends a plain-text email from one of the inbox's addresses. With inReplyTo (a msg_… id of this inbox) it answers that message, threaded. " +
        "Sending is rate-limited per inbox like every send, and recorded in the project's events.",
      rule: { token: 'send', session: false },
      input: 'SendMessageInput',
      async run(p: Principal, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'send');
        let thread: { inReplyTo: string; references: string[] } | null = null;
        if (args.inReplyTo !== undefined) {
          // Reading the parent's headers is a read: the token must be allowed to read the inbox.
          if (!access.hasScope(p, 'messages:read'))
            throw forbidden('answering a message needs the messages:read scope too (its headers are read for threading)');
          await access.inboxAccess(p, args.inboxId, 'messages:read');
          thread = await threading(sealed, inbox, args.inReplyTo);
        }
        const raw = await new MailComposer({
          from: args.from,
          to: args.to,
          subject: args.subject,
          text: args.text,
          ...(thread ? { inReplyTo: thread.inReplyTo, references: thread.references } : {}),
        })
          .compile()
          .build();
        const result = await send.send(inbox, p.actor, { from: args.from, to: args.to, raw });
        const threaded = thread ? `, in reply to ${args.inReplyTo}` : '';
        return { structured: { ...result, ...(thread ? thread : {}) }, text: `Sent to ${args.to.join(', ')}${threaded}.` };
      },
    }),
  ];
}
