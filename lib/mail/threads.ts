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
 * The thread of each pending message (GUID → thread GUID): the messages of one write placed
 * together, so the order they come in does not matter. A message the headers link to a thread
 * already given (`known`) joins it; then, a step at a time, a message linked to one placed in
 * the step before joins that one's thread, so a conversation the write holds whole goes where
 * its nearest link to the known threads leads (a reply placed before its parent, linked to the
 * grandparent through the parent alone, joins it all the same). Messages linked to no thread,
 * given or placed, found one: the oldest of them (then the lowest GUID), whose thread the others
 * it links to, directly or not, join. Threads are never merged (an id once given does not
 * change): a message linked to several joins one, the first by (its subject matches the linked
 * message's, the link is its In-Reply-To parent, the linked message is older, the thread GUID).
 */
export function assignThreads(pending: readonly ThreadInput[], known: readonly ThreadKnown[]): Map<string, string> {
  // Placed messages, given or now: by their Message-ID and by each id they link to.
  const byMessageId = new Map<string, ThreadKnown[]>();
  const byLink = new Map<string, ThreadKnown[]>();
  const add = (k: ThreadKnown) => {
    if (k.messageId) push(byMessageId, k.messageId, k);
    for (const l of k.links) push(byLink, l, k);
  };
  for (const k of known) add(k);
  // The pending ones the same way, to find those a message just placed links to.
  const waitingById = new Map<string, ThreadInput[]>();
  const waitingByLink = new Map<string, ThreadInput[]>();
  for (const p of pending) {
    if (p.messageId) push(waitingById, p.messageId, p);
    for (const l of p.links) push(waitingByLink, l, p);
  }
  const order = [...pending].sort((a, b) => a.receivedAt - b.receivedAt || (a.guid < b.guid ? -1 : a.guid > b.guid ? 1 : 0));
  const rank = new Map(order.map((p, i) => [p.guid, i]));
  const out = new Map<string, string>();
  // Subjects normalized once each (a thread's messages mostly share one).
  const normalized = new Map<string | null, string>();
  const norm = (subject: string | null) => {
    let n = normalized.get(subject);
    if (n === undefined) normalized.set(subject, (n = normalizeSubject(subject)));
    return n;
  };

  /** The thread a pending message joins among the placed ones it links to; null when none. */
  const threadFor = (p: ThreadInput): string | null => {
    const subject = norm(p.subject);
    const parent = p.links.at(-1);
    let best: Candidate | null = null;
    const consider = (k: ThreadKnown, direct: boolean) => {
      if (k.guid === p.guid) return;
      const c = { k, same: norm(k.subject) === subject, direct };
      if (best === null || before(c, best)) best = c;
    };
    for (const l of p.links) {
      for (const k of byMessageId.get(l) ?? []) consider(k, l === parent);
      // Siblings: messages naming the same ancestor, whether it is here or not (a broken chain).
      for (const k of byLink.get(l) ?? []) consider(k, false);
    }
    if (p.messageId) {
      // The same Message-ID (a sent copy and the one received) and the children placed first.
      for (const k of byMessageId.get(p.messageId) ?? []) consider(k, false);
      for (const k of byLink.get(p.messageId) ?? []) consider(k, false);
    }
    return best === null ? null : (best as Candidate).k.threadGuid;
  };

  // The pending messages that link to one placed: its parents, children, siblings and copies
  // (one lookup of each id it has or names, in both maps). Each id is looked up once: after that,
  // all the messages it links are placed or about to be.
  const looked = new Set<string>();
  const linkedTo = (m: ThreadInput, into: Set<ThreadInput>) => {
    for (const id of m.messageId ? [m.messageId, ...m.links] : m.links) {
      if (looked.has(id)) continue;
      looked.add(id);
      for (const list of [waitingById.get(id), waitingByLink.get(id)]) for (const q of list ?? []) if (!out.has(q.guid)) into.add(q);
    }
  };

  // First step: those linked to a thread already given.
  let placed: Array<[ThreadInput, string]> = [];
  for (const p of order) {
    const thread = threadFor(p);
    if (thread !== null) placed.push([p, thread]);
  }
  for (let oldest = 0; ; ) {
    if (placed.length === 0) {
      // Nothing left links to a placed message: the oldest left founds a thread.
      while (oldest < order.length && out.has(order[oldest]!.guid)) oldest++;
      if (oldest === order.length) break;
      placed = [[order[oldest]!, order[oldest]!.guid]];
    }
    for (const [p, thread] of placed) {
      out.set(p.guid, thread);
      add({ guid: p.guid, threadGuid: thread, receivedAt: p.receivedAt, messageId: p.messageId, links: p.links, subject: p.subject });
    }
    const next = new Set<ThreadInput>();
    for (const [p] of placed) linkedTo(p, next);
    // The next step, each decided by what was placed before it, then all of them placed at once.
    placed = [...next]
      .filter((q) => !out.has(q.guid))
      .sort((a, b) => rank.get(a.guid)! - rank.get(b.guid)!)
      .map((q) => [q, threadFor(q) ?? q.guid]);
  }
  return out;
}

interface Candidate {
  k: ThreadKnown;
  /** Its normalized subject is the pending message's. */
  same: boolean;
  /** It is the pending message's In-Reply-To parent. */
  direct: boolean;
}

/** Whether `a` wins over `b`: the subject matches, the parent, the older, the lower thread GUID. */
function before(a: Candidate, b: Candidate): boolean {
  return (
    (Number(b.same) - Number(a.same) ||
      Number(b.direct) - Number(a.direct) ||
      a.k.receivedAt - b.k.receivedAt ||
      (a.k.threadGuid < b.k.threadGuid ? -1 : a.k.threadGuid > b.k.threadGuid ? 1 : 0)) < 0
  );
}

function push<T>(map: Map<string, T[]>, key: string, value: T): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
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
