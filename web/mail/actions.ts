// Everyday actions on messages (docs/app.md, "Actions"): archive, delete (to Trash), move, junk and
// not junk, read and unread, flag and unflag, on one message or a selection, through one call of
// POST /inboxes/{inbox}/messages/bulk (docs/organize.md, "Bulk"). Each answers at once (the list
// changes before the server does, and changes back if it refuses); each that takes mail out of
// the label offers Undo for a few seconds (undo.ts), which is the opposite change. A conversation's
// row (the list grouped by thread) stands for every message of its thread in the label listed.
// Deleting forever (from Trash or Junk) is the bulk call's destroy, never confirmed past the
// server's rule: asked first in the app and not undoable.
import type { BulkChange, BulkResult, Flag, Label, MessageSummary, Thread } from '../../schemas/wire.ts';
import { api } from '../api.ts';
import { labelName } from './labels.ts';

export const ACTIONS = ['archive', 'trash', 'junk', 'not-junk', 'move', 'read', 'unread', 'flag', 'unflag'] as const;
export type Action = (typeof ACTIONS)[number];

export const isAction = (a: string): a is Action => (ACTIONS as readonly string[]).includes(a);

type Change = Omit<BulkChange, 'ids'>;

/** What an action does in a label: the change, the one that undoes it, and what is said. */
export interface Plan {
  change: Change;
  /** Absent for actions that take nothing out of the label (flags). */
  undo?: Change;
  /** The rows leave the list. */
  removes: boolean;
  /** The flags after it, for rows that stay: `(flags) => flags'`. */
  flags?: (flags: Flag[]) => Flag[];
  /** "Archived 3 messages." */
  done: (n: number) => string;
}

export class ActionRefused extends Error {}

const isInboxLabel = (l: Label) => l.name.toUpperCase() === 'INBOX';
const special = (labels: Label[], use: Label['specialUse']) => labels.find((l) => l.specialUse === use);
const count = (n: number) => `${n} message${n === 1 ? '' : 's'}`;
const withFlag = (flag: Flag, on: boolean) => (flags: Flag[]) =>
  on ? [...new Set<Flag>([...flags, flag])] : flags.filter((f) => f !== flag);

/** Out of `label` into `to` (a label id), keeping any other label the message is in. */
const relabel = (label: Label, to: Label, words: string): Plan => ({
  change: { labels: { add: [to.id], remove: [label.id] } },
  undo: { labels: { add: [label.id], remove: [to.id] } },
  removes: true,
  done: (n) => `${words} ${count(n)}.`,
});

/** The plan for `action` on messages listed in `label`; ActionRefused when it makes no sense there. */
export function plan(action: Action, label: Label, labels: Label[], target?: string): Plan {
  switch (action) {
    case 'archive': {
      const archive = special(labels, '\\Archive');
      if (!archive) throw new ActionRefused('This inbox has no Archive folder.');
      if (archive.id === label.id) throw new ActionRefused('These messages are in the Archive already.');
      return relabel(label, archive, 'Archived');
    }
    case 'trash': {
      const trash = special(labels, '\\Trash');
      if (!trash) throw new ActionRefused('This inbox has no Trash folder.');
      if (trash.id === label.id) throw new ActionRefused('These messages are in the Trash already.');
      return relabel(label, trash, 'Moved to Trash:');
    }
    case 'move': {
      const to = labels.find((l) => l.id === target);
      if (!to) throw new ActionRefused('Choose the label to move to.');
      if (to.id === label.id) throw new ActionRefused(`These messages are in ${labelName(to)} already.`);
      return relabel(label, to, `Moved to ${labelName(to)}:`);
    }
    case 'junk': {
      if (label.specialUse === '\\Junk') throw new ActionRefused('These messages are in Junk already.');
      if (!special(labels, '\\Junk')) throw new ActionRefused('This inbox has no Junk folder.');
      // Back out of Junk is "not junk" into the inbox, or a move back to the label it was in.
      return {
        change: { move: { to: 'junk' } },
        undo: { move: { to: isInboxLabel(label) ? 'inbox' : label.id } },
        removes: true,
        done: (n) => `Marked ${count(n)} as junk.`,
      };
    }
    case 'not-junk':
      if (label.specialUse !== '\\Junk') throw new ActionRefused('"Not junk" is for messages in Junk.');
      return {
        change: { move: { to: 'inbox' } },
        undo: { move: { to: 'junk' } },
        removes: true,
        done: (n) => `Moved ${count(n)} to the inbox as not junk.`,
      };
    case 'read':
    case 'unread':
      return {
        change: action === 'read' ? { flags: { add: ['seen'] } } : { flags: { remove: ['seen'] } },
        removes: false,
        flags: withFlag('seen', action === 'read'),
        done: (n) => `Marked ${count(n)} as ${action}.`,
      };
    case 'flag':
    case 'unflag':
      return {
        change: action === 'flag' ? { flags: { add: ['flagged'] } } : { flags: { remove: ['flagged'] } },
        removes: false,
        flags: withFlag('flagged', action === 'flag'),
        done: (n) => `${action === 'flag' ? 'Flagged' : 'Unflagged'} ${count(n)}.`,
      };
  }
}

/** The bulk call, at most 1,000 ids at a time; a refusal of any id is said (the others are done). */
export async function applyChange(inboxId: string, ids: string[], change: Change): Promise<BulkResult[]> {
  const answers: BulkResult[] = [];
  for (let i = 0; i < ids.length; i += 1000)
    answers.push(await api<BulkResult>('POST', `/inboxes/${inboxId}/messages/bulk`, { ids: ids.slice(i, i + 1000), ...change }));
  const refused = answers.flatMap((a) => a.results).filter((r) => r.status === 'refused');
  if (refused.length > 0) throw new Error(`${count(refused.length)} could not be changed: ${refused[0]!.error ?? 'refused'}`);
  return answers;
}

/**
 * The messages rows stand for: a message's row is itself; a conversation's row (the list grouped
 * by thread, docs/threads.md "One row per thread") is every message of its thread in `labelId`
 * (GET …/threads/{thread}?inLabel=), so an action on it acts on the whole conversation there and
 * leaves the thread's messages in other labels (Sent, say) alone.
 */
export async function messagesOf(
  inboxId: string,
  labelId: string,
  rows: Array<Pick<MessageSummary, 'id' | 'threadId' | 'thread'>>,
): Promise<string[]> {
  const threads = await Promise.all(
    rows.map((r) =>
      r.threadId && r.thread && r.thread.messages > 1
        ? api<Thread>('GET', `/inboxes/${inboxId}/threads/${r.threadId}?inLabel=${labelId}`).then((t) => t.messages.map((m) => m.id))
        : Promise.resolve([]),
    ),
  );
  return [...new Set(rows.flatMap((r, i) => [r.id, ...threads[i]!]))];
}

/** Where "Delete forever" is offered: where the server allows it unconfirmed (docs/organize.md, "Delete forever"). */
export const deletesForever = (label: Label) => label.specialUse === '\\Trash' || label.specialUse === '\\Junk';

/**
 * Deletes the messages forever (the bulk call's destroy, 1,000 at a time), never confirming past
 * the server's rule: a message also in another label (refused) is kept and said. One already gone
 * counts as deleted.
 */
export async function deleteForever(inboxId: string, ids: string[]): Promise<{ deleted: string[]; kept: string[] }> {
  const deleted: string[] = [];
  const kept: string[] = [];
  for (let i = 0; i < ids.length; i += 1000) {
    const answer = await api<BulkResult>('POST', `/inboxes/${inboxId}/messages/bulk`, { ids: ids.slice(i, i + 1000), destroy: {} });
    for (const r of answer.results) (r.status === 'refused' ? kept : deleted).push(r.id);
  }
  return { deleted, kept };
}

/** "Deleted 3 messages forever." and what was kept. */
export function deletedWords(result: { deleted: string[]; kept: string[] }): string {
  const kept = result.kept.length
    ? ` Kept ${count(result.kept.length)} that ${result.kept.length === 1 ? 'is' : 'are'} also in another label: remove ${result.kept.length === 1 ? 'it' : 'them'} there first.`
    : '';
  return `Deleted ${count(result.deleted.length)} forever.${kept}`;
}
