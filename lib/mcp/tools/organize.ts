// Filing messages, the twins of POST …/messages/{msg}/move (docs/organize.md): move_message, and
// archive_message and trash_message, the two moves an agent makes most, by name.
import type { MessagePlacement } from '../../../schemas/wire.ts';
import type { Access, AccessRule, Principal } from '../../auth/access.ts';
import type { MailService } from '../../mail/service.ts';
import { tool, type Tool, type ToolAnswer } from '../tool.ts';

/** The same rule as the HTTP twin's: a token with messages:write (docs/organize.md, "Who may"). */
const ORGANIZE: AccessRule = { token: 'messages:write', session: true };

export function organizeTools(access: Access, mail: MailService): Tool[] {
  const move = async (p: Principal, inboxId: string, messageId: string, to: string): Promise<ToolAnswer> => {
    const { inbox } = await access.inboxAccess(p, inboxId, 'messages:write');
    const placement: MessagePlacement = await mail.move(inbox, messageId, to, p.actor);
    return {
      structured: { ...placement },
      text: `${messageId} is now in [${placement.labels.join(', ')}], flags [${placement.flags.join(', ')}]`,
    };
  };
  return [
    tool<{ inboxId: string; messageId: string; to: string }>({
      name: 'move_message',
      title: 'Move a message',
      description:
        'Moves a message out of every label it is in and into one: "inbox", "archive", "trash", "junk" (the inbox\'s special-use folders), or a label id (lbl_…) from list_labels. Into junk it is marked junk; from junk to inbox, not junk. Answers the labels and flags after the move.',
      rule: ORGANIZE,
      input: 'MoveMessageInput',
      run: (p, args) => move(p, args.inboxId, args.messageId, args.to),
    }),
    tool<{ inboxId: string; messageId: string }>({
      name: 'archive_message',
      title: 'Archive a message',
      description:
        "Moves a message to the inbox's archive folder (out of INBOX and every other label). Answers the labels and flags after the move.",
      rule: ORGANIZE,
      input: 'MessageInput',
      run: (p, args) => move(p, args.inboxId, args.messageId, 'archive'),
    }),
    tool<{ inboxId: string; messageId: string }>({
      name: 'trash_message',
      title: 'Move a message to trash',
      description:
        "Moves a message to the inbox's trash folder (it is not deleted: move_message with to=inbox brings it back). Answers the labels and flags after the move.",
      rule: ORGANIZE,
      input: 'MessageInput',
      run: (p, args) => move(p, args.inboxId, args.messageId, 'trash'),
    }),
  ];
}
