// Bulk organizing for agents, the twins of POST …/messages/bulk (docs/organize.md, "Bulk"): the
// same rule (messages:write and a role that may organize), the same journal and events, and the
// same per-id answer; each call is charged and audited by McpTools.beforeCall like any tool.
import type { Access, AccessRule, Principal } from '../../auth/access.ts';
import type { BulkAnswer, BulkChange, MailBulk } from '../../mail/bulk.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool, type ToolAnswer } from '../tool.ts';

const ORGANIZE: AccessRule = { token: 'messages:write', session: true };

interface BulkArgs {
  inboxId: string;
  messageIds: string[];
  idempotencyKey?: string;
}

/** Counts first, then each id's outcome, fenced: the ids and reasons echo what the caller sent. */
function answerText(a: BulkAnswer): string {
  const head = `${a.replayed ? 'Already done by an earlier call with this idempotencyKey (nothing changed now): ' : ''}changed ${a.changed}, unchanged ${a.unchanged}, not found ${a.notFound}, refused ${a.refused}`;
  const lines = a.results.map((r) => `${r.id}: ${r.status}${r.error ? ` (${r.error})` : ''}`);
  return `${head}\n${untrusted(lines.join('\n'))}`;
}

export function bulkTools(access: Access, bulk: MailBulk): Tool[] {
  const run = async (p: Principal, args: BulkArgs, change: BulkChange): Promise<ToolAnswer> => {
    const { inbox } = await access.inboxAccess(p, args.inboxId, 'messages:write');
    const answer = await bulk.apply(inbox, p.projectId, args.messageIds, change, p.actor, args.idempotencyKey);
    return { structured: { ...answer, notice: UNTRUSTED_NOTICE }, text: answerText(answer) };
  };
  const moveTool = (name: string, title: string, to: string, what: string) =>
    tool<BulkArgs>({
      name,
      title,
      description: `${what} Up to 1,000 message ids in one call; answers per id: changed, unchanged, not_found or refused.`,
      rule: ORGANIZE,
      input: 'BulkMessagesInput',
      run: (p, args) => run(p, args, { kind: 'move', to }),
    });
  return [
    tool<BulkArgs & { to: string }>({
      name: 'move_messages',
      title: 'Move many messages',
      description:
        'Moves up to 1,000 messages out of every label they are in and into one: "inbox", "archive", "trash", "junk", or a label id (lbl_…) from list_labels. Into junk they are marked junk; from junk to inbox, not junk. Answers per id: changed, unchanged, not_found or refused.',
      rule: ORGANIZE,
      input: 'BulkMoveInput',
      run: (p, args) => run(p, args, { kind: 'move', to: args.to }),
    }),
    moveTool('archive_messages', 'Archive many messages', 'archive', "Moves messages to the inbox's archive folder."),
    moveTool(
      'trash_messages',
      'Move many messages to trash',
      'trash',
      "Moves messages to the inbox's trash folder (not deleted: move_messages with to=inbox brings them back).",
    ),
    moveTool('junk_messages', 'Mark many messages as junk', 'junk', "Moves messages to the inbox's junk folder and marks them junk."),
    tool<BulkArgs & { add?: string[]; remove?: string[] }>({
      name: 'label_messages',
      title: 'Add or remove labels on many messages',
      description:
        'Files up to 1,000 messages into labels (add) and out of labels (remove), label ids from list_labels. A message must stay in at least one label: one that would not is refused. Answers per id.',
      rule: ORGANIZE,
      input: 'BulkLabelsInput',
      run: (p, args) => run(p, args, { kind: 'labels', add: args.add ?? [], remove: args.remove ?? [] }),
    }),
    tool<BulkArgs & { add?: string[]; remove?: string[] }>({
      name: 'change_keywords',
      title: 'Add or remove keywords on many messages',
      description:
        'Adds and removes custom IMAP keywords (such as $label1; not flags) on up to 1,000 messages. Answers per id: changed, unchanged or not_found.',
      rule: ORGANIZE,
      input: 'BulkKeywordsInput',
      run: (p, args) => run(p, args, { kind: 'keywords', add: args.add ?? [], remove: args.remove ?? [] }),
    }),
  ];
}
