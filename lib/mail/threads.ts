// Threads (docs/threads.md): which conversation a message belongs to, decided once when the index
// first holds it, the way JMAP servers do it. Messages are linked by their headers: a message's
// References and In-Reply-To name its parents, a message already indexed that names this one's
// Message-ID is its child (mail arrives out of order), and one naming an ancestor this one names
// is its sibling, even when that ancestor never reached the inbox (a broken chain). A normalized subject only breaks a
// tie between threads the headers link. Pure: each store engine gathers the candidates in its
// write's transaction and writes back what this decides.

/** A message to place in a thread. */
export interface ThreadInput {
  guid: string;
  receivedAt: number;
  messageId: string | null;
  /** Message-IDs its References and In-Reply-To name (parseMessageIds). */
  links: readonly string[];
  subject: string | null;
}

/** A message already in a thread, found by the store because the headers may link it. */
export interface ThreadKnown {
  guid: string;
  threadGuid: string;
  receivedAt: number;
  messageId: string | null;
  /** The Message-IDs it links to that the store matched (only those are needed). */
  links: readonly string[];
  subject: string | null;
}

/** At most this many Message-IDs of a References header are kept (the nearest ancestors: its end). */
export const MAX_LINKS = 50;

/** `<a@b> <c@d>`, folded or not, with comments or junk between: the ids in order; anything else is dropped. */
export function parseMessageIds(value: string | null | undefined): string[] {
  if (!value) return [];
  const ids = value.match(/<[^<>\s]+@[^<>\s]+>/g) ?? [];
  return [...new Set(ids)].slice(-MAX_LINKS);
}

/** The ids a message links to: its References, then its In-Reply-To (the nearest parent last). */
export function linksOf(references: readonly string[] | undefined, inReplyTo: string | null): string[] {
  const own = parseMessageIds(inReplyTo);
  return [...new Set([...(references ?? []), ...own])].slice(-MAX_LINKS);
}

/**
 * Subject without the reply and forward prefixes mail apps add (Re:, Fwd:, Fw:, Aw:, Sv:, Tr:,
 * Antw:, "Re[2]:"), list tags in brackets and a trailing "(fwd)", case and spacing folded.
 */
export function normalizeSubject(subject: string | null): string {
  let s = (subject ?? '').replace(/\s+/g, ' ').trim().toLowerCase();
  for (let before = ''; before !== s; ) {
    before = s;
    s = s
      .replace(/^\[[^\]]*\]\s*/, '')
      .replace(/^(re|fwd?|aw|sv|tr|antw|wg|vs)(\[\d+\]|\(\d+\))?\s*:\s*/, '')
      .replace(/\s*\(fwd\)$/, '')
      .trim();
  }
  return s;
}

/**
 * The thread of each pending message (GUID → thread GUID). Pending messages are placed oldest
 * first, each seeing those placed before it. A message the headers link to no thread founds its
 * own: the thread's GUID is the founder's. Linked to one thread, it joins it. Linked to several
 * (a late message that replies into two threads, say), threads are never merged (an id once
 * given does not change): it joins one, the first by (its subject matches the linked message's,
 * the link is its In-Reply-To parent, the linked message is older, the thread GUID).
 */
export function assignThreads(pending: readonly ThreadInput[], known: readonly ThreadKnown[]): Map<string, string> {
  const byMessageId = new Map<string, ThreadKnown[]>();
  const byLink = new Map<string, ThreadKnown[]>();
  const add = (k: ThreadKnown) => {
    if (k.messageId) byMessageId.set(k.messageId, [...(byMessageId.get(k.messageId) ?? []), k]);
    for (const l of k.links) byLink.set(l, [...(byLink.get(l) ?? []), k]);
  };
  for (const k of known) add(k);
  const out = new Map<string, string>();
  const order = [...pending].sort((a, b) => a.receivedAt - b.receivedAt || (a.guid < b.guid ? -1 : a.guid > b.guid ? 1 : 0));
  for (const p of order) {
    const subject = normalizeSubject(p.subject);
    const parent = p.links.at(-1);
    const candidates: Array<{ k: ThreadKnown; direct: boolean }> = [];
    for (const l of p.links) {
      for (const k of byMessageId.get(l) ?? []) candidates.push({ k, direct: l === parent });
      // Siblings: messages naming the same ancestor, whether it is here or not (a broken chain).
      for (const k of byLink.get(l) ?? []) candidates.push({ k, direct: false });
    }
    if (p.messageId) {
      // The same Message-ID (a sent copy and the one received) and the children indexed first.
      for (const k of byMessageId.get(p.messageId) ?? []) candidates.push({ k, direct: false });
      for (const k of byLink.get(p.messageId) ?? []) candidates.push({ k, direct: false });
    }
    let thread = p.guid;
    const best = candidates
      .filter((c) => c.k.guid !== p.guid)
      .map((c) => ({ ...c, same: normalizeSubject(c.k.subject) === subject }))
      .sort(
        (a, b) =>
          Number(b.same) - Number(a.same) ||
          Number(b.direct) - Number(a.direct) ||
          a.k.receivedAt - b.k.receivedAt ||
          (a.k.threadGuid < b.k.threadGuid ? -1 : a.k.threadGuid > b.k.threadGuid ? 1 : 0),
      )[0];
    if (best) thread = best.k.threadGuid;
    out.set(p.guid, thread);
    add({ guid: p.guid, threadGuid: thread, receivedAt: p.receivedAt, messageId: p.messageId, links: p.links, subject: p.subject });
  }
  return out;
}

/** A collapsed row names at most this many participants. */
export const MAX_PARTICIPANTS = 10;

/**
 * The links of a message waiting for its thread: those the index kept from its References (and
 * In-Reply-To) when it was put, then the References fetched for it now (mail indexed before
 * threads: the index kept neither), then its In-Reply-To (the nearest parent) last, as linksOf.
 */
export function pendingLinks(kept: readonly string[], inReplyTo: string | null, references: readonly string[] = []): string[] {
  const own = parseMessageIds(inReplyTo);
  return [...new Set([...kept, ...references].filter((l) => !own.includes(l))), ...own].slice(-MAX_LINKS);
}

/** The numbers of threads from their messages' rows, oldest first. */
export function threadStatsOf(
  rows: ReadonlyArray<{ threadGuid: string; from: string | null; fromAddress: string | null; seen: boolean }>,
): Map<string, { messages: number; unread: number; participants: string[] }> {
  const out = new Map<string, { messages: number; unread: number; participants: string[]; seenFrom: Set<string> }>();
  for (const r of rows) {
    let s = out.get(r.threadGuid);
    if (!s) out.set(r.threadGuid, (s = { messages: 0, unread: 0, participants: [], seenFrom: new Set() }));
    s.messages++;
    if (!r.seen) s.unread++;
    const who = r.fromAddress ?? r.from;
    if (r.from && who && !s.seenFrom.has(who) && s.participants.length < MAX_PARTICIPANTS) {
      s.seenFrom.add(who);
      s.participants.push(r.from);
    }
  }
  return new Map([...out].map(([k, { seenFrom: _, ...v }]) => [k, v]));
}
