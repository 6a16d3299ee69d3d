// The mail read API's domain: labels, pages, message detail, flag changes and the live stream,
// served from the index after the mail source has brought it up to date.
import { createHash } from 'node:crypto';
import { conflict, invalid, isDomainError, notFound, unavailable, unprocessable } from '../errors.ts';
import type { MailMirror } from './mirror.ts';
import { guidFromId, idFromGuid } from '../ids.ts';
import type { Flag, Label, MessageList, MessagePlacement, MessageSummary } from '../../schemas/wire.ts';
import { fromImapFlags, imapSpellings, toImapFlag } from './flags.ts';
import { compareLabels } from './labels.ts';
import type { IndexedDetail, LabelState, LiveChange, Location, MailInbox, LocationKey, MessageRecord } from './types.ts';
import type { MailIndexStore, MailSource, Unwatch } from './ports.ts';

// Encoding a GUID as an id is BigInt arithmetic; a page repeats the same few thousand often.
const ids = new Map<string, string>();
function messageId(guid: string): string {
  let id = ids.get(guid);
  if (id === undefined) {
    if (ids.size >= 100_000) ids.clear();
    ids.set(guid, (id = idFromGuid('msg', guid)));
  }
  return id;
}

/**
 * Results derived from the index, kept until the inbox's index version changes. Hot pages and
 * details are then one map lookup (and the version's one-row read) after the freshness check.
 * The version comes from the store, so another process's writes to a shared store are seen.
 */
class DerivedCache<T> {
  private readonly entries = new Map<string, { version: number; value: T }>();
  constructor(private readonly max: number) {}

  /**
   * A hit costs no store read beyond the version. The version is read before `make` reads the
   * rows, so a write in between can only file newer rows under an older version (recomputed at
   * the next read), never older rows under a newer one.
   */
  async get(key: string, version: number, make: () => Promise<T>): Promise<T> {
    const hit = this.entries.get(key);
    if (hit && hit.version === version) return hit.value;
    const value = await make();
    this.entries.delete(key);
    if (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { version, value });
    return value;
  }
}

/** Returns a function that withdraws the announcement (the change did not happen). */
export type FlagChangeAnnouncer = (inboxId: string, at: readonly LocationKey[], flags: readonly Flag[], actor: string) => () => void;

/**
 * Returns a function that withdraws the announcement. The message is about to be added to the
 * labels `added` and removed from `removed` (GUIDs), by `actor` (docs/organize.md, "Events").
 */
export type LabelChangeAnnouncer = (
  inboxId: string,
  msgId: string,
  added: readonly string[],
  removed: readonly string[],
  actor: string,
) => () => void;

/** The special-use folder each shortcut of `move` files into (docs/organize.md, "Move"). */
const SPECIAL_TARGETS = { archive: '\\Archive', trash: '\\Trash', junk: '\\Junk' } as const;

/** How many times a flag change follows a message a mail app keeps moving before it gives up (503). */
const STORE_ATTEMPTS = 3;

export interface MailServiceOptions {
  index: MailIndexStore;
  mirror: MailMirror;
  source: MailSource;
  /** Told of each flag change the API is about to make, and whose it is (the event log's actor). */
  announce?: FlagChangeAnnouncer;
  /** Told of each label change the API is about to make, and whose it is. */
  announceLabels?: LabelChangeAnnouncer;
}

export class MailService {
  private readonly pages = new DerivedCache<MessageList | null>(2000);
  private readonly details = new DerivedCache<{ detail: IndexedDetail; etag: string } | null>(5000);

  private readonly index: MailIndexStore;
  private readonly mirror: MailMirror;
  private readonly source: MailSource;
  private readonly announce: FlagChangeAnnouncer;
  private readonly announceLabels: LabelChangeAnnouncer;

  constructor(o: MailServiceOptions) {
    this.index = o.index;
    this.mirror = o.mirror;
    this.source = o.source;
    this.announce = o.announce ?? (() => () => undefined);
    this.announceLabels = o.announceLabels ?? (() => () => undefined);
  }

  async labels(inbox: MailInbox): Promise<Label[]> {
    await this.mirror.refresh(inbox);
    const [counts, labels] = await Promise.all([this.index.counts(inbox.id), this.index.labels(inbox.id)]);
    return labels.sort(compareLabels).map((l) => {
      const c = counts.get(l.guid) ?? { total: 0, unread: 0 };
      return {
        id: idFromGuid('lbl', l.guid),
        name: l.path,
        total: c.total,
        unread: c.unread,
        ...(l.specialUse ? { specialUse: l.specialUse } : {}),
      };
    });
  }

  async messages(inbox: MailInbox, labelId: string, options: { limit: number; before?: number }): Promise<MessageList> {
    const guid = guidFromId('lbl', labelId);
    if (!guid) throw notFound('label not found');
    // During the inbox's first fill the page is answered as soon as the fill has it all.
    await this.mirror.refresh(inbox, () => this.filled(inbox.id, guid, options));
    // The addresses decide `direction`: a change to them must not serve an old page.
    const key = `${inbox.id} ${guid} ${options.before ?? ''} ${options.limit} ${inbox.addresses.join(',')}`;
    const page = await this.pages.get(key, await this.index.version(inbox.id), () => this.page(inbox, guid, options));
    if (!page) throw notFound('label not found');
    return page;
  }

  /**
   * Whether the index holds this page whole while the label's first fill runs (newest first):
   * every UID from `fillLow` up is in, so a page whose next row (the one telling whether there
   * is a next page) is at or above it is complete, cursor included. Never a page with a gap.
   */
  private async filled(inboxId: string, guid: string, options: { limit: number; before?: number }): Promise<boolean> {
    const label = await this.index.label(inboxId, guid);
    if (!label) return false;
    if (label.fillLow == null) return true;
    const rows = await this.index.page(inboxId, guid, options.before ?? null, options.limit + 1);
    return rows.length > options.limit && rows.at(-1)!.location.uid >= label.fillLow;
  }

  private async page(inbox: MailInbox, guid: string, options: { limit: number; before?: number }): Promise<MessageList | null> {
    if (!(await this.index.label(inbox.id, guid))) return null;
    // One more than asked tells whether a next page exists without a count.
    const rows = await this.index.page(inbox.id, guid, options.before ?? null, options.limit + 1);
    const more = rows.length > options.limit;
    const shown = rows.slice(0, options.limit);
    const sent = new Set((await this.index.labels(inbox.id)).filter((l) => l.specialUse === '\\Sent').map((l) => l.guid));
    const messages = shown.map(({ message, location }) =>
      summarize(message, location, location.uid, directionOf(inbox, message, [location], sent)),
    );
    const last = shown.at(-1);
    return more && last ? { messages, before: last.location.uid } : { messages };
  }

  /** The detail and its ETag, which changes with any change to what the detail says. */
  async message(inbox: MailInbox, msgId: string): Promise<{ detail: IndexedDetail; etag: string }> {
    await this.mirror.refresh(inbox);
    const found = await this.details.get(`${inbox.id} ${msgId} ${inbox.addresses.join(',')}`, await this.index.version(inbox.id), () =>
      this.detail(inbox, msgId),
    );
    if (!found) throw notFound('message not found');
    return found;
  }

  private async detail(inbox: MailInbox, msgId: string): Promise<{ detail: IndexedDetail; etag: string } | null> {
    const guid = guidFromId('msg', msgId);
    const stored = guid ? await this.index.message(inbox.id, guid) : null;
    if (!stored || stored.locations.length === 0) return null;
    const found = await this.find(inbox, msgId);
    const labels = await this.index.labels(inbox.id);
    const primary = primaryLocation(found.locations, labels);
    const sent = new Set(labels.filter((l) => l.specialUse === '\\Sent').map((l) => l.guid));
    const m = found.message;
    const detail: IndexedDetail = {
      message: summarize(m, primary, 0, directionOf(inbox, m, found.locations, sent)),
      ...(m.cc ? { cc: m.cc } : {}),
      ...(m.replyTo ? { replyTo: m.replyTo } : {}),
      ...(m.messageId ? { messageId: m.messageId } : {}),
      ...(m.inReplyTo ? { inReplyTo: m.inReplyTo } : {}),
    };
    // Derived from the body itself, so no change (flags, data added later) can leave it stale.
    const etag = `"${createHash('sha256').update(JSON.stringify(detail)).digest('base64url').slice(0, 27)}"`;
    return { detail, etag };
  }

  /**
   * docs/api.md, "Message flags": an IMAP STORE on every label the message is in; returns the flags after it. A flag
   * both added and removed is refused by the route (400) before this is called.
   *
   * The answer is the truth. The index may be behind a mail app that just moved or expunged the
   * message (a live watcher is trusted without a sync), and a STORE on a UID that is gone is a
   * no-op in IMAP: so the STORE says where it found nothing, that label is synced, and the change
   * follows the message to where it is now; 404 only when it is gone from every label.
   */
  async changeFlags(inbox: MailInbox, msgId: string, add: readonly Flag[], remove: readonly Flag[], actor: string): Promise<Flag[]> {
    const found = await this.storeEverywhere(inbox, msgId, add.map(toImapFlag), remove.map(toImapFlag), actor);
    return fromImapFlags(primaryLocation(found.locations, await this.index.labels(inbox.id)).flags).flags;
  }

  /**
   * docs/organize.md, "Keywords": adds and removes custom IMAP keywords (atoms the route checked,
   * none of them a Flag's spelling) as a flag change does; answers the keywords after it.
   */
  async changeKeywords(
    inbox: MailInbox,
    msgId: string,
    add: readonly string[],
    remove: readonly string[],
    actor: string,
  ): Promise<{ keywords: string[] }> {
    checkKeywords(add, remove);
    const found = await this.storeEverywhere(inbox, msgId, add, remove, actor);
    return { keywords: fromImapFlags(primaryLocation(found.locations, await this.index.labels(inbox.id)).flags).keywords };
  }

  /**
   * A change reaches the index (and the stream) through the same sync as any other. Unlike a
   * read, this one may not fall back on the index: it would answer with the state from before.
   */
  private async readBack(inbox: MailInbox): Promise<void> {
    await this.mirror.syncNow(inbox).catch((err: unknown) => {
      throw isDomainError(err) && err.kind === 'unavailable'
        ? err
        : unavailable('the change was made but could not be read back from the mail server; try again');
    });
  }

  /** The STORE at every place of the message, read back, following it where a mail app moved it. */
  private async storeEverywhere(inbox: MailInbox, msgId: string, add: readonly string[], remove: readonly string[], actor: string) {
    await this.mirror.refresh(inbox);
    let found = await this.find(inbox, msgId);
    if (add.length > 0 || remove.length > 0) {
      for (let attempt = 1; ; attempt++) {
        const missed = await this.store(inbox, found.locations, add, remove, actor);
        await this.readBack(inbox);
        found = await this.find(inbox, msgId);
        if (missed.length === 0) break;
        // Still somewhere (moved, or copied before an expunge): the STORE goes to where it is now
        // (again where it is already done: idempotent, and nothing announced there twice).
        if (attempt >= STORE_ATTEMPTS) throw unavailable('the message keeps moving on the mail server; try again');
      }
    }
    return found;
  }

  /**
   * One STORE at each place of the message (the index may be a moment behind, so even where it
   * shows the flags already); returns the places where the message was not. Every announcement
   * of a change that did not happen is withdrawn, whatever went wrong: a mail app's identical
   * change must not be put down to this caller.
   */
  private async store(
    inbox: MailInbox,
    locations: readonly Location[],
    add: readonly string[],
    remove: readonly string[],
    actor: string,
  ): Promise<LocationKey[]> {
    const withdraw = new Map<string, () => void>();
    const places = locations.map((l) => ({ labelGuid: l.labelGuid, uid: l.uid }));
    const removing = new Set(remove.map((f) => f.toLowerCase()));
    for (const l of locations) {
      // IMAP flags and keywords are case-insensitive (RFC 3501 2.3.2).
      const before = new Set(l.flags.map((f) => f.toLowerCase()));
      const now = [...l.flags.filter((f) => !removing.has(f.toLowerCase())), ...add];
      const after = new Set(now.map((f) => f.toLowerCase()));
      // No change, no event: nothing to attribute. A keyword change is a message.flags too (with
      // the same Flags), so it is announced as well.
      if (after.size === before.size && [...after].every((f) => before.has(f))) continue;
      withdraw.set(
        `${l.labelGuid}:${l.uid}`,
        this.announce(inbox.id, [{ labelGuid: l.labelGuid, uid: l.uid }], fromImapFlags(now).flags, actor),
      );
    }
    let missed: LocationKey[];
    try {
      ({ missed } = await this.source.storeFlags(inbox, places, [...add], [...remove]));
    } catch (err) {
      for (const w of withdraw.values()) w();
      if (isDomainError(err)) throw err;
      // Refused by the server: most likely the message or its label went away meanwhile.
      await this.mirror.syncNow(inbox).catch(() => undefined);
      await this.find(inbox, msgIdOf(locations));
      throw unavailable('the mail server did not accept the change; try again');
    }
    for (const m of missed) withdraw.get(`${m.labelGuid}:${m.uid}`)?.();
    return missed;
  }

  /**
   * docs/organize.md, "Labels": files the message into the labels `add` and out of `remove` (label
   * ids), and answers where it is after. Adding a label it is in, or removing one it is not in,
   * changes nothing. It must stay in at least one label (a conflict otherwise). Like a flag change,
   * the answer is read back from the mail server, and the change follows a message a mail app
   * moved meanwhile.
   */
  async changeLabels(
    inbox: MailInbox,
    msgId: string,
    add: readonly string[],
    remove: readonly string[],
    actor: string,
  ): Promise<MessagePlacement> {
    const both = add.filter((l) => remove.includes(l));
    if (both.length > 0) throw invalid(`a label cannot be added and removed at once: ${both.join(', ')}`);
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const known = new Set(labels.map((l) => l.guid));
    const guidsOf = (ids: readonly string[]) =>
      ids.map((id) => {
        const guid = guidFromId('lbl', id);
        if (!guid || !known.has(guid)) throw unprocessable(`label ${id} does not exist in this inbox`);
        return guid;
      });
    return this.relabel(inbox, msgId, () => ({ add: guidsOf(add), remove: guidsOf(remove) }), actor);
  }

  /**
   * docs/organize.md, "Move": the message leaves every label it is in for `to` alone: INBOX, a
   * special-use folder (a conflict when the inbox has none), or a label id. Into \Junk it is also
   * marked junk (`$Junk`, `$NotJunk` cleared); from \Junk to INBOX, not junk (the reverse).
   */
  async move(inbox: MailInbox, msgId: string, to: string, actor: string): Promise<MessagePlacement> {
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const target = moveTarget(labels, to);
    const junk = labels.find((l) => l.specialUse === '\\Junk');
    const found = await this.find(inbox, msgId);
    // Every spelling of the other mark goes (a mail app may have written NonJunk or Junk).
    const mark = (flag: Flag, other: Flag) => this.storeEverywhere(inbox, msgId, [toImapFlag(flag)], imapSpellings(other), actor);
    if (target === junk) await mark('junk', 'not_junk');
    else if (to === 'inbox' && junk && found.locations.some((l) => l.labelGuid === junk.guid)) await mark('not_junk', 'junk');
    const into = target.guid;
    return this.relabel(inbox, msgId, (now) => ({ add: [into], remove: now.filter((g) => g !== into) }), actor);
  }

  /**
   * The one way a label change is made: `plan` says, from the labels the message is in now, what
   * to add and remove (GUIDs); it runs again when the message moved under us.
   */
  private async relabel(
    inbox: MailInbox,
    msgId: string,
    plan: (now: readonly string[]) => { add: readonly string[]; remove: readonly string[] },
    actor: string,
  ): Promise<MessagePlacement> {
    let found = await this.find(inbox, msgId);
    for (let attempt = 1; ; attempt++) {
      const now = found.locations.map((l) => l.labelGuid);
      const wanted = plan(now);
      const add = [...new Set(wanted.add)].filter((g) => !now.includes(g));
      const remove = found.locations.filter((l) => wanted.remove.includes(l.labelGuid));
      if (add.length === 0 && remove.length === 0) break;
      if (add.length === 0 && remove.length === found.locations.length) {
        throw conflict('a message must stay in at least one label: add another label, or move it (to trash, for instance) instead');
      }
      // The copy's source: a place the message leaves (then it is a MOVE), else any place.
      const from = remove[0] ?? found.locations[0];
      const withdraw = this.announceLabels(
        inbox.id,
        msgId,
        add,
        remove.map((l) => l.labelGuid),
        actor,
      );
      let missed: boolean;
      try {
        ({ missed } = await this.source.relabel(inbox, {
          from: { labelGuid: from.labelGuid, uid: from.uid },
          add,
          remove: remove.map((l) => ({ labelGuid: l.labelGuid, uid: l.uid })),
        }));
      } catch (err) {
        withdraw();
        if (isDomainError(err)) throw err;
        await this.mirror.syncNow(inbox).catch(() => undefined);
        await this.find(inbox, msgId);
        throw unavailable('the mail server did not accept the change; try again');
      }
      if (missed) withdraw();
      await this.readBack(inbox);
      found = await this.find(inbox, msgId);
      if (!missed) break;
      if (attempt >= STORE_ATTEMPTS) throw unavailable('the message keeps moving on the mail server; try again');
    }
    return this.placement(inbox, found.locations);
  }

  private async placement(inbox: MailInbox, locations: [Location, ...Location[]]): Promise<MessagePlacement> {
    const labels = (await this.index.labels(inbox.id)).sort(compareLabels);
    const inLabels = new Set(locations.map((l) => l.labelGuid));
    return {
      labels: labels.filter((l) => inLabels.has(l.guid)).map((l) => idFromGuid('lbl', l.guid)),
      flags: fromImapFlags(primaryLocation(locations, labels).flags).flags,
    };
  }

  watch(inbox: MailInbox, listener: (change: LiveChange) => void, onGap?: () => void): Promise<Unwatch> {
    return this.mirror.watch(inbox, listener, onGap);
  }

  private async find(inbox: MailInbox, msgId: string): Promise<{ message: MessageRecord; locations: [Location, ...Location[]] }> {
    const guid = guidFromId('msg', msgId);
    const found = guid ? await this.index.message(inbox.id, guid) : null;
    const [first, ...rest] = found?.locations ?? [];
    if (!found || !first) throw notFound('message not found');
    return { message: found.message, locations: [first, ...rest] };
  }
}

/**
 * docs/organize.md, "Keywords": custom keywords only (no Flag's spelling), none both added and
 * removed (compared without case, as IMAP does).
 */
export function checkKeywords(add: readonly string[], remove: readonly string[]): void {
  const flags = [...add, ...remove].filter((k) => fromImapFlags([k]).flags.length > 0);
  if (flags.length > 0)
    throw invalid(
      `${flags.join(', ')} ${flags.length > 1 ? 'are flags' : 'is a flag'}, not a custom keyword: use …/flags, or …/move for junk`,
    );
  const both = add.filter((k) => remove.some((r) => r.toLowerCase() === k.toLowerCase()));
  if (both.length > 0) throw invalid(`a keyword cannot be added and removed at once: ${both.join(', ')}`);
}

/** docs/organize.md, "Move": the label `to` names (inbox, archive, trash, junk or a label id). */
export function moveTarget(labels: readonly LabelState[], to: string): LabelState {
  if (to === 'inbox') {
    const inbox = labels.find((l) => l.path.toUpperCase() === 'INBOX');
    if (!inbox) throw conflict('this inbox has no INBOX folder');
    return inbox;
  }
  if (to === 'archive' || to === 'trash' || to === 'junk') {
    const use = SPECIAL_TARGETS[to];
    const special = labels.find((l) => l.specialUse === use);
    if (!special) throw conflict(`this inbox has no ${use} folder to move the message to (the mail server declares none)`);
    return special;
  }
  const guid = guidFromId('lbl', to);
  const label = guid ? labels.find((l) => l.guid === guid) : undefined;
  if (!label) throw unprocessable(`label ${to} does not exist in this inbox`);
  return label;
}

const msgIdOf = (locations: readonly Location[]): string => messageId(locations[0]!.msgGuid);

/** The location whose flags a message shows outside a label: the first in label order. */
export function primaryLocation(locations: [Location, ...Location[]], labels: LabelState[]): Location {
  const byGuid = new Map(labels.map((l) => [l.guid, l]));
  return [...locations].sort((a, b) => {
    const la = byGuid.get(a.labelGuid);
    const lb = byGuid.get(b.labelGuid);
    return (la && lb ? compareLabels(la, lb) : 0) || a.uid - b.uid;
  })[0]!;
}

/** `out` when the message is in Sent or comes from one of the inbox's own addresses. */
export function directionOf(inbox: MailInbox, m: MessageRecord, locations: readonly Location[], sent: ReadonlySet<string>): 'in' | 'out' {
  if (locations.some((l) => sent.has(l.labelGuid))) return 'out';
  if (m.fromAddress && inbox.addresses.some((a) => a.toLowerCase() === m.fromAddress)) return 'out';
  return 'in';
}

export function summarize(m: MessageRecord, at: Location, uid: number, direction: 'in' | 'out'): MessageSummary {
  const { flags, keywords } = fromImapFlags(at.flags);
  return {
    id: messageId(m.guid),
    uid,
    receivedAt: new Date(m.receivedAt).toISOString(),
    flags,
    size: m.size,
    ...(m.date ? { date: m.date } : {}),
    ...(m.from ? { from: m.from } : {}),
    ...(m.to ? { to: m.to } : {}),
    ...(m.subject !== null ? { subject: m.subject } : {}),
    ...(keywords.length > 0 ? { keywords } : {}),
    direction,
    // An extension (docs/threads.md): absent until the index has placed the message.
    ...(m.threadGuid ? { threadId: idFromGuid('thr', m.threadGuid) } : {}),
  };
}
