// What every reader of decrypted content shares, whether it asks over HTTP (lib/http/routes/
// content.ts, search.ts) or through an agent's tool (lib/mcp): only compatible inboxes have
// content Postern can read, and each read is recorded as `access.content.read` before any byte
// goes out (a content search as `access.content.searched` before the mail server reads).
import type { Access, Principal } from '../auth/access.ts';
import type { Inbox } from '../directory/types.ts';
import { forbidden } from '../errors.ts';
import type { EventLog } from '../events/log.ts';

export type ContentPart = { part: 'content' | 'source' | 'attachment'; attachment?: number };

/** 403 for a zero-access inbox: its content is sealed to its users, not to Postern. */
export function requireCompatible(inbox: Inbox): void {
  if (inbox.mode !== 'compatible') throw forbidden('this inbox is zero-access: Postern cannot read its content');
}

/** The audit record of one read of a message's content, by whoever acts (the token for tokens). */
export function recordContentRead(events: EventLog, inbox: Inbox, actor: string, msgId: string, data: ContentPart) {
  return events.record({
    type: 'access.content.read',
    projectId: inbox.projectId,
    inboxId: inbox.id,
    actor,
    subject: msgId,
    data: { msgId, ...data },
  });
}

/** Which content conditions a search had (docs/search.md), and the label it was limited to. */
export type ContentSearch = { conditions: Array<'body' | 'text'>; labelId?: string };

/** The audit record of one search of the inbox's content; the words searched for are not in it. */
export function recordContentSearch(events: EventLog, inbox: Inbox, actor: string, data: ContentSearch) {
  return events.record({
    type: 'access.content.searched',
    projectId: inbox.projectId,
    inboxId: inbox.id,
    actor,
    subject: inbox.id,
    data,
  });
}

/** Reading content: a token with content:read (never a session), as GET …/content needs. */
export const CONTENT_RULE = { token: 'content:read', session: false } as const;

/**
 * What a search that reads content (`body`, `text`) needs beyond listing, checked for HTTP and
 * agents alike: content:read on this inbox, a compatible inbox. Resolves with the audit record to
 * write before the mail server reads anything; undefined when the search reads no content.
 */
export async function contentSearchGate(
  access: Access,
  events: EventLog,
  principal: Principal,
  inbox: Inbox,
  query: { body?: string; text?: string; inLabel?: string },
): Promise<(() => Promise<void>) | undefined> {
  const conditions = (['body', 'text'] as const).filter((c) => query[c] !== undefined);
  if (conditions.length === 0) return undefined;
  access.authorize(principal, CONTENT_RULE);
  await access.inboxAccess(principal, inbox.id, 'content:read');
  requireCompatible(inbox);
  const data: ContentSearch = { conditions, ...(query.inLabel ? { labelId: query.inLabel } : {}) };
  return () => recordContentSearch(events, inbox, principal.actor, data).then(() => undefined);
}

/**
 * Previews (docs/threads.md, "Previews"): a token with content:read, or a web session (whose
 * web app shows them), on a compatible inbox.
 */
export const PREVIEW_RULE = { token: 'content:read', session: true } as const;

/** The audit record of one page of previews served: the messages it named. */
export function recordPreviews(events: EventLog, inbox: Inbox, actor: string, msgIds: readonly string[], labelId?: string) {
  return events.record({
    type: 'access.content.previewed',
    projectId: inbox.projectId,
    inboxId: inbox.id,
    actor,
    subject: inbox.id,
    data: { msgIds: [...msgIds], ...(labelId ? { labelId } : {}) },
  });
}

/**
 * What a page with previews needs beyond listing, for HTTP and agents alike: 403 without
 * content:read (sessions may), or for a zero-access inbox. Resolves with the audit record to
 * write before the page's previews go out.
 */
export async function previewGate(
  access: Access,
  events: EventLog,
  principal: Principal,
  inbox: Inbox,
  labelId?: string,
): Promise<(msgIds: readonly string[]) => Promise<void>> {
  access.authorize(principal, PREVIEW_RULE);
  await access.inboxAccess(principal, inbox.id, 'content:read');
  requireCompatible(inbox);
  return (msgIds) => recordPreviews(events, inbox, principal.actor, msgIds, labelId).then(() => undefined);
}
