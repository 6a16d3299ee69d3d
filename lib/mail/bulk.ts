// One change to many messages (docs/organize.md, "Bulk"): labels, flags, keywords or a move
// applied to up to MAX_BULK messages with one IMAP command per label and step (UID sets), and an
// answer per id. Planned from the index, made by a BulkSource (adapters/imap/bulk.ts), read back
// from the mail server like every change (docs/mail.md, "The sync").
import { invalid, isDomainError, unavailable, unprocessable } from '../errors.ts';
import { guidFromId } from '../ids.ts';
import type { Flag } from '../../schemas/wire.ts';
import { fromImapFlags, imapSpellings, toImapFlag } from './flags.ts';
import type { MailMirror } from './mirror.ts';
import { checkKeywords, moveTarget, type FlagChangeAnnouncer, type LabelChangeAnnouncer } from './service.ts';
import type { LabelState, Location, MailInbox } from './types.ts';
import type { MailIndexStore } from './ports.ts';

/** At most this many message ids in one call: over it, a 400 before anything is done. */
export const MAX_BULK = 1000;

/**
 * The change a bulk call applies, one per call. `destroy` deletes forever (docs/organize.md,
 * "Delete forever"): every place of the message is expunged, allowed per message only when each
 * is in Trash or Junk, unless `confirm`.
 */
export type BulkChange =
  | { kind: 'labels'; add: readonly string[]; remove: readonly string[] }
  | { kind: 'flags'; add: readonly Flag[]; remove: readonly Flag[] }
  | { kind: 'keywords'; add: readonly string[]; remove: readonly string[] }
  | { kind: 'move'; to: string }
  | { kind: 'destroy'; confirm: boolean };

export type BulkStatus = 'changed' | 'unchanged' | 'not_found' | 'refused';

export interface BulkResult {
  id: string;
  status: BulkStatus;
  /** Why, for refused. */
  error?: string;
}

export interface BulkAnswer {
  results: BulkResult[];
  changed: number;
  unchanged: number;
  notFound: number;
  refused: number;
  /** True when this answers a repeated Idempotency-Key: nothing was done this time. */
  replayed?: boolean;
}

/** One IMAP command (or a few, for a long UID set) in one label. */
export type BulkStep =
  | { op: 'store'; label: string; uids: readonly number[]; add: readonly string[]; remove: readonly string[] }
  | { op: 'copy' | 'move'; label: string; uids: readonly number[]; to: string }
  | { op: 'expunge'; label: string; uids: readonly number[] };

/** Runs the steps in order on one connection; per step, the UIDs that were there. */
export interface BulkSource {
  run(inbox: MailInbox, steps: readonly BulkStep[]): Promise<Array<Set<number>>>;
}

/** The answers of earlier calls by Idempotency-Key, and where this call's goes (lib/mail/bulk-journal.ts). */
export interface BulkJournal {
  prior(projectId: string, inboxId: string, key: string): Promise<BulkAnswer | null>;
  record(
    input: { projectId: string; inboxId: string; actor: string; key?: string; change: BulkChange },
    answer: BulkAnswer,
  ): Promise<BulkAnswer>;
}

/** What one message needs: keyword/flag stores per place, labels to enter and places to leave. */
interface Plan {
  stores: Array<{ at: Location; add: readonly string[]; remove: readonly string[] }>;
  add: string[];
  remove: Location[];
  refused?: string;
}

interface Target {
  msgId: string;
  locations: Location[];
}

/** How many times a message a mail app keeps moving is followed before it is refused. */
const ATTEMPTS = 3;

export interface MailBulkOptions {
  index: MailIndexStore;
  mirror: MailMirror;
  /** Runs the IMAP steps (adapters/imap/bulk.ts). */
  source: BulkSource;
  /** Records each call and keeps its answer for a repeated Idempotency-Key (lib/mail/bulk-journal.ts). */
  journal: BulkJournal;
  /** Told of each flag change about to be made, and whose it is (the event log's actor). */
  announce?: FlagChangeAnnouncer;
  /** Told of each label change about to be made, and whose it is. */
  announceLabels?: LabelChangeAnnouncer;
}

export class MailBulk {
  /** Per inbox and key: a repeat waits for the first call, then answers with its answer. */
  private readonly running = new Map<string, Promise<unknown>>();

  private readonly index: MailIndexStore;
  private readonly mirror: MailMirror;
  private readonly source: BulkSource;
  private readonly journal: BulkJournal;
  private readonly announce: FlagChangeAnnouncer;
  private readonly announceLabels: LabelChangeAnnouncer;

  constructor(o: MailBulkOptions) {
    this.index = o.index;
    this.mirror = o.mirror;
    this.source = o.source;
    this.journal = o.journal;
    this.announce = o.announce ?? (() => () => undefined);
    this.announceLabels = o.announceLabels ?? (() => () => undefined);
  }

  /**
   * Applies `change` to the messages `ids` (1 to MAX_BULK, duplicates answered once). With `key`
   * (an Idempotency-Key), a call repeating a key used in the last 24 hours on this inbox does
   * nothing and answers as the first did.
   */
  async apply(
    inbox: MailInbox,
    projectId: string,
    ids: readonly string[],
    change: BulkChange,
    actor: string,
    key?: string,
  ): Promise<BulkAnswer> {
    if (ids.length === 0) throw invalid('ids must name at least one message');
    if (ids.length > MAX_BULK) throw invalid(`at most ${MAX_BULK} message ids in one call (got ${ids.length}); split the change`);
    this.check(change);
    if (key === undefined)
      return this.journal.record({ projectId, inboxId: inbox.id, actor, change }, await this.run(inbox, ids, change, actor));
    const slot = `${inbox.id} ${key}`;
    // One at a time per key in this process, so a quick retry waits for the first and replays it.
    for (let busy = this.running.get(slot); busy; busy = this.running.get(slot)) await busy.catch(() => undefined);
    const work = (async () => {
      const prior = await this.journal.prior(projectId, inbox.id, key);
      if (prior) return { ...prior, replayed: true };
      return this.journal.record({ projectId, inboxId: inbox.id, actor, key, change }, await this.run(inbox, ids, change, actor));
    })();
    this.running.set(slot, work);
    try {
      return await work;
    } finally {
      if (this.running.get(slot) === work) this.running.delete(slot);
    }
  }

  /** What is wrong with the change itself: a 400 before anything is done. */
  private check(change: BulkChange): void {
    if (change.kind === 'move' || change.kind === 'destroy') return;
    const both = change.add.filter((a) => (change.remove as readonly string[]).some((r) => r.toLowerCase() === a.toLowerCase()));
    if (both.length > 0) throw invalid(`cannot be added and removed at once: ${both.join(', ')}`);
    if (change.add.length === 0 && change.remove.length === 0) throw invalid('the change must add or remove something');
    if (change.kind === 'keywords') checkKeywords(change.add, change.remove);
  }

  private async run(inbox: MailInbox, ids: readonly string[], change: BulkChange, actor: string): Promise<BulkAnswer> {
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const planOf = this.planner(labels, change);
    const unique = [...new Set(ids)];
    const status = new Map<string, BulkResult>();
    let pending: string[] = unique;
    for (let attempt = 1; pending.length > 0; attempt++) {
      const targets: Target[] = [];
      for (const msgId of pending) {
        const guid = guidFromId('msg', msgId);
        const found = guid ? await this.index.message(inbox.id, guid) : null;
        // Found earlier and now gone (a mail app expunged it meanwhile): not found either.
        if (!found || found.locations.length === 0) status.set(msgId, { id: msgId, status: 'not_found' });
        else targets.push({ msgId, locations: found.locations });
      }
      const missed = await this.once(inbox, targets, planOf, status, actor);
      await this.readBack(inbox);
      pending = missed;
      if (pending.length > 0 && attempt >= ATTEMPTS) {
        for (const msgId of pending)
          status.set(msgId, { id: msgId, status: 'refused', error: 'the message keeps moving on the mail server; try again' });
        break;
      }
    }
    const results = unique.map((id) => status.get(id) ?? { id, status: 'unchanged' as const });
    const count = (s: BulkStatus) => results.filter((r) => r.status === s).length;
    return { results, changed: count('changed'), unchanged: count('unchanged'), notFound: count('not_found'), refused: count('refused') };
  }

  /** The plan of one message from where it is now; shared by every attempt. */
  private planner(labels: readonly LabelState[], change: BulkChange): (t: Target) => Plan {
    const known = new Set(labels.map((l) => l.guid));
    const guidsOf = (ids: readonly string[]) =>
      ids.map((id) => {
        const guid = guidFromId('lbl', id);
        if (!guid || !known.has(guid)) throw unprocessable(`label ${id} does not exist in this inbox`);
        return guid;
      });
    const relabel = (t: Target, add: readonly string[], remove: readonly string[]): Plan => {
      const now = t.locations.map((l) => l.labelGuid);
      const adding = [...new Set(add)].filter((g) => !now.includes(g));
      const leaving = t.locations.filter((l) => remove.includes(l.labelGuid));
      if (adding.length === 0 && leaving.length === t.locations.length && leaving.length > 0)
        return { stores: [], add: [], remove: [], refused: 'a message must stay in at least one label' };
      return { stores: [], add: adding, remove: leaving };
    };
    switch (change.kind) {
      case 'flags':
      case 'keywords': {
        const add = change.kind === 'flags' ? change.add.map(toImapFlag) : [...change.add];
        const remove = change.kind === 'flags' ? change.remove.map(toImapFlag) : [...change.remove];
        return (t) => ({ stores: t.locations.map((at) => ({ at, add, remove })), add: [], remove: [] });
      }
      case 'labels': {
        const add = guidsOf(change.add);
        const remove = guidsOf(change.remove);
        return (t) => relabel(t, add, remove);
      }
      case 'destroy': {
        const bin = new Set(labels.filter((l) => l.specialUse === '\\Trash' || l.specialUse === '\\Junk').map((l) => l.guid));
        return (t) => {
          const outside = labels.filter((l) => t.locations.some((at) => at.labelGuid === l.guid) && !bin.has(l.guid));
          if (!change.confirm && outside.length > 0)
            return {
              stores: [],
              add: [],
              remove: [],
              refused: `the message is in ${outside.map((l) => l.path).join(', ')}: deleting forever cannot be undone, so it is allowed from trash or junk only; move it to trash first, or confirm`,
            };
          return { stores: [], add: [], remove: [...t.locations] };
        };
      }
      case 'move': {
        const target = moveTarget(labels, change.to);
        const junk = labels.find((l) => l.specialUse === '\\Junk');
        return (t) => {
          const plan = relabel(
            t,
            [target.guid],
            t.locations.map((l) => l.labelGuid).filter((g) => g !== target.guid),
          );
          // Marked before the move, so the mark travels with the message (docs/organize.md, "Move").
          const mark =
            target === junk
              ? { add: [toImapFlag('junk')], remove: imapSpellings('not_junk') }
              : change.to === 'inbox' && junk && t.locations.some((l) => l.labelGuid === junk.guid)
                ? { add: [toImapFlag('not_junk')], remove: imapSpellings('junk') }
                : null;
          if (mark) plan.stores = t.locations.map((at) => ({ at, ...mark }));
          return plan;
        };
      }
    }
  }

  /**
   * One attempt over these messages: stores, then copies and moves, then expunges, each phase
   * one command per label. Returns the messages not found where the index said (a mail app moved
   * them meanwhile): planned again after a sync.
   */
  private async once(
    inbox: MailInbox,
    targets: readonly Target[],
    planOf: (t: Target) => Plan,
    status: Map<string, BulkResult>,
    actor: string,
  ): Promise<string[]> {
    const plans = new Map<string, Plan>();
    for (const t of targets) {
      const plan = planOf(t);
      if (plan.refused) status.set(t.msgId, { id: t.msgId, status: 'refused', error: plan.refused });
      else plans.set(t.msgId, plan);
    }
    const missed = new Set<string>();
    const withdraw: Array<() => void> = [];
    const changed = (msgId: string) => status.set(msgId, { id: msgId, status: 'changed' });
    try {
      // 1. Flags and keywords, one STORE per label and change.
      const stores = new Map<string, { step: BulkStep & { op: 'store' }; owners: Map<number, string> }>();
      for (const [msgId, plan] of plans) {
        for (const s of plan.stores) {
          const k = `${s.at.labelGuid} ${s.add.join(' ')} ${s.remove.join(' ')}`;
          let group = stores.get(k);
          if (!group)
            stores.set(
              k,
              (group = { step: { op: 'store', label: s.at.labelGuid, uids: [], add: s.add, remove: s.remove }, owners: new Map() }),
            );
          (group.step.uids as number[]).push(s.at.uid);
          group.owners.set(s.at.uid, msgId);
          const removing = new Set(s.remove.map((f) => f.toLowerCase()));
          const now = [...s.at.flags.filter((f) => !removing.has(f.toLowerCase())), ...s.add];
          const before = new Set(s.at.flags.map((f) => f.toLowerCase()));
          const after = new Set(now.map((f) => f.toLowerCase()));
          // No change, no event: nothing to attribute (as a single change, lib/mail/service.ts).
          if (after.size === before.size && [...after].every((f) => before.has(f))) continue;
          withdraw.push(this.announce(inbox.id, [{ labelGuid: s.at.labelGuid, uid: s.at.uid }], fromImapFlags(now).flags, actor));
          changed(msgId);
        }
      }
      await this.phase(inbox, [...stores.values()], missed);

      // 2. Copies and moves: the source is a place the message leaves (then the last label added
      // is a MOVE), else its first place. 3. Expunges of the places left, but for a message whose
      // copy or move found nothing (it is not where the index said: it must not lose a place).
      const copies = new Map<string, { step: BulkStep & { op: 'copy' | 'move' }; owners: Map<number, string> }>();
      const expunges = new Map<string, { step: BulkStep & { op: 'expunge' }; owners: Map<number, string> }>();
      for (const [msgId, plan] of plans) {
        if (missed.has(msgId) || (plan.add.length === 0 && plan.remove.length === 0)) continue;
        const from: Location | undefined = plan.remove[0];
        const source = from ?? this.firstPlace(targets, msgId);
        const moving = from !== undefined && plan.add.length > 0;
        plan.add.forEach((to, i) => {
          const op = moving && i === plan.add.length - 1 ? 'move' : 'copy';
          const k = `${op} ${source.labelGuid} ${to}`;
          let group = copies.get(k);
          if (!group) copies.set(k, (group = { step: { op, label: source.labelGuid, uids: [], to }, owners: new Map() }));
          (group.step.uids as number[]).push(source.uid);
          group.owners.set(source.uid, msgId);
        });
        for (const l of plan.remove) {
          if (moving && l === from) continue;
          let group = expunges.get(l.labelGuid);
          if (!group) expunges.set(l.labelGuid, (group = { step: { op: 'expunge', label: l.labelGuid, uids: [] }, owners: new Map() }));
          (group.step.uids as number[]).push(l.uid);
          group.owners.set(l.uid, msgId);
        }
        withdraw.push(
          this.announceLabels(
            inbox.id,
            msgId,
            plan.add,
            plan.remove.map((l) => l.labelGuid),
            actor,
          ),
        );
        changed(msgId);
      }
      // Copies go in the order planned per message (the MOVE last), so the message is never in no label.
      const ordered = [...copies.values()].sort((a, b) => (a.step.op === b.step.op ? 0 : a.step.op === 'copy' ? -1 : 1));
      await this.phase(inbox, ordered, missed);
      const left = [...expunges.values()]
        .map((g) => {
          const uids = g.step.uids.filter((uid) => !missed.has(g.owners.get(uid)!));
          return { step: { ...g.step, uids }, owners: g.owners };
        })
        .filter((g) => g.step.uids.length > 0);
      await this.phase(inbox, left, missed);
    } catch (err) {
      for (const w of withdraw) w();
      if (isDomainError(err)) throw err;
      await this.mirror.syncNow(inbox).catch(() => undefined);
      throw unavailable('the mail server did not accept the change (part of it may be made: read the messages, then try again)');
    }
    for (const msgId of missed) status.delete(msgId);
    return [...missed];
  }

  private firstPlace(targets: readonly Target[], msgId: string): Location {
    return targets.find((t) => t.msgId === msgId)!.locations[0]!;
  }

  /** Runs one phase's steps; a UID a step did not find marks its message missed. */
  private async phase(
    inbox: MailInbox,
    groups: ReadonlyArray<{ step: BulkStep; owners: Map<number, string> }>,
    missed: Set<string>,
  ): Promise<void> {
    if (groups.length === 0) return;
    const found = await this.source.run(
      inbox,
      groups.map((g) => g.step),
    );
    groups.forEach((g, i) => {
      for (const uid of g.step.uids) if (!found[i]!.has(uid)) missed.add(g.owners.get(uid)!);
    });
  }

  private async readBack(inbox: MailInbox): Promise<void> {
    await this.mirror.syncNow(inbox).catch((err: unknown) => {
      throw isDomainError(err) && err.kind === 'unavailable'
        ? err
        : unavailable('the change was made but could not be read back from the mail server; try again');
    });
  }
}
