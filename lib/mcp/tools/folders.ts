// Labels and deleting forever for agents (docs/organize.md, "MCP"): create_label, rename_label
// and delete_label, the twins of POST …/labels, PATCH and DELETE …/labels/{label};
// delete_message_forever, the twin of DELETE …/messages/{msg}, listed only for a token that
// carries messages:destroy.
import type { Label } from '../../../schemas/wire.ts';
import type { Access, AccessRule } from '../../auth/access.ts';
import type { MailFolders } from '../../mail/folders.ts';
import { DESTROY } from '../../http/routes/folders.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool, type ToolAnswer } from '../tool.ts';

/** The same rule as the HTTP twins' (docs/organize.md, "Who may"). */
const ORGANIZE: AccessRule = { token: 'messages:write', session: true };

/** A label's name is whatever a mail app, or another user, named the folder: fenced. */
function labelAnswer(label: Label, what: string): ToolAnswer {
  return {
    structured: { ...label, notice: UNTRUSTED_NOTICE },
    text: `${what} ${label.id}, named:\n${untrusted(label.name)}`,
  };
}

export function folderTools(access: Access, folders: MailFolders): Tool[] {
  return [
    tool<{ inboxId: string; name: string }>({
      name: 'create_label',
      title: 'Create a label',
      description:
        'Creates a label (a folder, shown in mail apps) in an inbox. Nested labels use / between parts, e.g. "Projects/2026". Answers the new label with its id.',
      rule: ORGANIZE,
      input: 'CreateLabelInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:write');
        return labelAnswer(await folders.create(inbox, args.name, p.actor), 'Created label');
      },
    }),
    tool<{ inboxId: string; labelId: string; name: string }>({
      name: 'rename_label',
      title: 'Rename a label',
      description:
        'Renames a label (its id and its messages stay; labels under it move with it). INBOX and the special folders (Sent, Drafts, Trash, Junk, Archive) cannot be renamed.',
      rule: ORGANIZE,
      input: 'RenameLabelInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:write');
        return labelAnswer(await folders.rename(inbox, args.labelId, args.name, p.actor), 'Renamed label');
      },
    }),
    // Listed like its HTTP twin's rule (messages:write): deleting an empty label or moving its
    // mail out destroys nothing. removeMessages does, and is refused without messages:destroy.
    tool<{ inboxId: string; labelId: string; moveTo?: string; removeMessages?: boolean }>({
      name: 'delete_label',
      title: 'Delete a label',
      description:
        'Deletes a label (a folder). One that still holds mail needs a choice: moveTo (inbox, archive, trash, junk or a label id) moves its mail there first; removeMessages=true deletes its mail with it, for good (messages also in other labels stay there; needs the messages:destroy scope). INBOX, the special folders and labels with labels under them cannot be deleted.',
      rule: ORGANIZE,
      input: 'DeleteLabelInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:write');
        if (args.removeMessages) {
          access.authorize(p, DESTROY);
          await access.inboxAccess(p, args.inboxId, 'messages:destroy');
        }
        const choice = {
          ...(args.moveTo !== undefined ? { moveTo: args.moveTo } : {}),
          ...(args.removeMessages !== undefined ? { removeMessages: args.removeMessages } : {}),
        };
        await folders.remove(inbox, args.labelId, choice, p.actor);
        return { structured: { deleted: args.labelId }, text: `Label ${args.labelId} was deleted.` };
      },
    }),
    tool<{ inboxId: string; messageId: string; confirm?: boolean }>({
      name: 'delete_message_forever',
      title: 'Delete a message forever',
      description:
        'Deletes a message for good, from every label it is in: it cannot be undone. Allowed for a message in trash or junk; anywhere else only with confirm=true. Prefer trash_message unless asked to delete permanently.',
      rule: DESTROY,
      input: 'DeleteForeverInput',
      async run(p, args) {
        const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:destroy');
        await folders.destroy(inbox, args.messageId, args.confirm === true, p.actor);
        return { structured: { deleted: args.messageId }, text: `${args.messageId} was deleted forever.` };
      },
    }),
  ];
}
