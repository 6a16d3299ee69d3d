// Every change the mail index applies is also recorded in the project event log, as the same
// message.added / message.removed / message.flags (and label.created / label.renamed /
// label.deleted: docs/organize.md, "Events") the inbox stream carries. A change is recorded
// when Postern's index learns of it: at once for an inbox with a live watcher, otherwise at the
// next read of the inbox. `message.received` (arrival from outside) needs the delivery ingress
// and is not recorded from here.
//
// Who acted: a change the API made (POST …/flags, …/labels, …/move) is recorded with the token or
// member that made it. The route announces the change before it makes it (expect(),
// expectLabels()); the first message.flags recorded here for that message in that label with
// exactly the announced flags, or the first message.added / message.removed of that message in
// that label, carries that actor. Anything else (a mail app, a delivery) is the service acting. If another
// process records the change first (it holds the watcher lease and its watcher saw the change
// before this process read it back), that record, as the service acting, is the one kept.
//
// Exactly once across processes: every Postern process sharing the store syncs on its own, and
// two of them can detect the same change at the same moment (the diff is computed against the
// shared index outside the write that applies it). So each event carries a dedupe key naming the
// change itself, and the log stores the first of them only (EventLog.record, dedupeKey).
import type { DirectoryStore } from '../directory/ports.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { Flag } from '../../schemas/wire.ts';
import { isLabelChange, type LabelChange, type LiveChange, type MessageChange } from './types.ts';
import type { WarnLog } from '../warn-log.ts';

/**
 * What makes a change this change, whichever process saw it: a UID is never reused in a label
 * within one UIDVALIDITY, so label + UIDVALIDITY + UID names an addition or a removal. Flags can
 * go back and forth (flagged, unflagged, flagged again: three changes, two with the same flags),
 * so a flag change is named by the MODSEQ the server gave that state. Without a MODSEQ (a server
 * without CONDSTORE) there is no safe key: recording a rare duplicate beats dropping a change.
 */
export function dedupeKeyOf(inboxId: string, change: LiveChange): string | undefined {
  if (isLabelChange(change)) {
    // A label's GUID is never reused: it is created once and deleted once. A rename has no such
    // name (A to B, back, and to B again are three), so it has no key, like a flag change
    // without MODSEQ (docs/organize.md, "Events").
    return change.type === 'label.renamed' ? undefined : `${change.type}:${inboxId}:${change.at.labelGuid}`;
  }
  const { labelGuid, uidValidity, uid, modseq } = change.at;
  const where = `${change.type}:${inboxId}:${labelGuid}:${uidValidity}:${uid}`;
  // The same place has an addition and, later, a removal: each is followed by its own message.labels.
  if (change.type === 'message.labels') return `${where}:${change.at.after ?? ''}`;
  if (change.type !== 'message.flags' && change.type !== 'message.keywords') return where;
  return modseq !== undefined && modseq > 0 ? `${where}:${modseq}` : undefined;
}

function dataOf(change: LiveChange): EventData {
  if (isLabelChange(change)) {
    const data: EventData = { labelId: change.labelId, name: change.name };
    if (change.previousName !== undefined) data.previousName = change.previousName;
    return data;
  }
  const data: EventData = { msgId: change.msgId };
  if (change.labelId !== undefined) data.labelId = change.labelId;
  if (change.uid !== undefined) data.uid = change.uid;
  if (change.flags !== undefined) data.flags = [...change.flags];
  if (change.labelIds !== undefined) data.labelIds = [...change.labelIds];
  if (change.keywords !== undefined) data.keywords = [...change.keywords];
  return data;
}

/** How long an announced API change waits for its record before it is forgotten. */
const EXPECT_MS = 30_000;

const sameFlags = (a: readonly string[], b: readonly string[]) =>
  a.length === b.length && [...a].sort().join(' ') === [...b].sort().join(' ');

interface Expected {
  actor: string;
  until: number;
  /** message.flags only: the flags announced. */
  flags?: readonly Flag[];
}

/** Announced API changes by key, oldest first, each kept EXPECT_MS at most. */
class Expectations {
  private readonly byKey = new Map<string, Expected[]>();

  /** Adds one entry per key; returns the function that withdraws them (the change did not happen). */
  add(keys: readonly string[], make: () => Expected): () => void {
    const now = Date.now();
    for (const [key, list] of this.byKey) {
      const live = list.filter((e) => e.until >= now);
      if (live.length === 0) this.byKey.delete(key);
      else if (live.length < list.length) this.byKey.set(key, live);
    }
    const added = keys.map((key): [string, Expected] => {
      const entry = make();
      this.byKey.set(key, [...(this.byKey.get(key) ?? []), entry]);
      return [key, entry];
    });
    // Forgotten, or a mail app's identical change within the window would be put down to this caller.
    return () => {
      for (const [key, entry] of added) {
        const rest = (this.byKey.get(key) ?? []).filter((e) => e !== entry);
        if (rest.length === 0) this.byKey.delete(key);
        else this.byKey.set(key, rest);
      }
    };
  }

  /** The actor of the oldest live entry under `key`, left in place (it stands for many changes). */
  peek(key: string): string | undefined {
    const now = Date.now();
    return (this.byKey.get(key) ?? []).find((e) => e.until >= now)?.actor;
  }

  /** The actor of the oldest live entry under `key` that `matches`, taken; undefined if none. */
  take(key: string, matches: (e: Expected) => boolean): string | undefined {
    const list = this.byKey.get(key) ?? [];
    const now = Date.now();
    const i = list.findIndex((e) => e.until >= now && matches(e));
    if (i < 0) return undefined;
    const [entry] = list.splice(i, 1);
    if (list.length === 0) this.byKey.delete(key);
    return entry!.actor;
  }
}

const locationKey = (inboxId: string, type: string, labelGuid: string, msgId: string) => `${inboxId}:${type}:${labelGuid}:${msgId}`;
const folderKey = (inboxId: string, type: string, key: string) => `${inboxId}:${type}:${key}`;

export class MailChangeRecorder {
  /** Per inbox, the batches still being recorded: batches are recorded in the order applied. */
  private readonly chains = new Map<string, Promise<void>>();
  /**
   * API changes announced and not yet recorded: flag changes by inbox, label GUID and UID; label
   * changes (docs/organize.md, "Events") by inbox, type, label GUID and message, since the UID a
   * COPY gives is not known before it.
   */
  private readonly expected = new Expectations();

  /**
   * The API is about to set the flags of a message to `flags` in each of these places; the
   * change is `actor`'s. Called by the flags route before it stores the change.
   */
  readonly expect = (
    inboxId: string,
    at: ReadonlyArray<{ labelGuid: string; uid: number }>,
    flags: readonly Flag[],
    actor: string,
  ): (() => void) =>
    this.expected.add(
      at.map(({ labelGuid, uid }) => `${inboxId}:${labelGuid}:${uid}`),
      () => ({ actor, flags, until: Date.now() + EXPECT_MS }),
    );

  /** The API is about to add the message to the labels `added` and remove it from `removed` (GUIDs); the change is `actor`'s. */
  readonly expectLabels = (
    inboxId: string,
    msgId: string,
    added: readonly string[],
    removed: readonly string[],
    actor: string,
  ): (() => void) =>
    this.expected.add(
      [
        ...added.map((g) => locationKey(inboxId, 'message.added', g, msgId)),
        ...removed.map((g) => locationKey(inboxId, 'message.removed', g, msgId)),
      ],
      () => ({ actor, until: Date.now() + EXPECT_MS }),
    );

  /** Many messages about to be added to `added` and removed from `removed` at once (one announcement). */
  readonly expectMoves = (
    inboxId: string,
    msgIds: readonly string[],
    added: readonly string[],
    removed: readonly string[],
    actor: string,
  ): (() => void) =>
    this.expected.add(
      msgIds.flatMap((msgId) => [
        ...added.map((g) => locationKey(inboxId, 'message.added', g, msgId)),
        ...removed.map((g) => locationKey(inboxId, 'message.removed', g, msgId)),
      ]),
      () => ({ actor, until: Date.now() + EXPECT_MS }),
    );

  /**
   * The API is about to create (`key`: the new label's name), rename or delete (`key`: its GUID)
   * a label; the change is `actor`'s (docs/organize.md, "Events").
   */
  readonly expectFolder = (inboxId: string, type: LabelChange['type'], key: string, actor: string): (() => void) =>
    this.expected.add([folderKey(inboxId, type, key)], () => ({ actor, until: Date.now() + EXPECT_MS }));

  /**
   * Who last added or removed each message (by inbox and message): its message.labels, which the
   * sync derives after the pass (lib/mail/derived-changes.ts), is theirs. Bounded: the oldest go.
   */
  private readonly placedBy = new Map<string, string>();

  private actorOf(inboxId: string, c: LiveChange, batch: ReadonlyMap<LiveChange, string>): string {
    if (isLabelChange(c)) {
      const key = folderKey(inboxId, c.type, c.type === 'label.created' ? c.name : c.at.labelGuid);
      return this.expected.take(key, () => true) ?? SYSTEM_ACTOR;
    }
    if (c.type === 'message.keywords') {
      // Derived from the message.flags of the same place and MODSEQ, in the same batch: its actor.
      for (const [other, actor] of batch)
        if (other.type === 'message.flags' && other.at.labelGuid === c.at.labelGuid && other.at.uid === c.at.uid) return actor;
      return SYSTEM_ACTOR;
    }
    if (c.type === 'message.labels') return this.placedBy.get(`${inboxId}:${c.msgId}`) ?? SYSTEM_ACTOR;
    if (c.type === 'message.added' || c.type === 'message.removed') {
      const actor = this.takeActor(inboxId, c);
      const key = `${inboxId}:${c.msgId}`;
      this.placedBy.delete(key);
      if (this.placedBy.size >= 10_000) this.placedBy.delete(this.placedBy.keys().next().value!);
      this.placedBy.set(key, actor);
      return actor;
    }
    return this.takeActor(inboxId, c);
  }

  private takeActor(inboxId: string, c: MessageChange): string {
    if (c.type === 'message.flags') {
      const flags = c.flags;
      if (!flags) return SYSTEM_ACTOR;
      return (
        this.expected.take(`${inboxId}:${c.at.labelGuid}:${c.at.uid}`, (e) => e.flags !== undefined && sameFlags(e.flags, flags)) ??
        SYSTEM_ACTOR
      );
    }
    return (
      this.expected.take(locationKey(inboxId, c.type, c.at.labelGuid, c.msgId), () => true) ??
      // The mail a label held when the API deleted it left it by the same hand.
      (c.type === 'message.removed' ? this.expected.peek(folderKey(inboxId, 'label.deleted', c.at.labelGuid)) : undefined) ??
      SYSTEM_ACTOR
    );
  }

  constructor(
    private readonly directory: DirectoryStore,
    private readonly events: EventLog,
    private readonly log: WarnLog,
  ) {}

  /** The hook the mail source calls with each batch of changes it applied. */
  readonly onChanges = (inboxId: string, changes: readonly LiveChange[]): void => {
    if (changes.length === 0) return;
    const next = (this.chains.get(inboxId) ?? Promise.resolve())
      .then(() => this.record(inboxId, changes))
      .catch((err: unknown) => this.log.warn({ err, inboxId }, 'recording mail changes in the event log failed'));
    this.chains.set(inboxId, next);
    void next.finally(() => {
      if (this.chains.get(inboxId) === next) this.chains.delete(inboxId);
    });
  };

  private async record(inboxId: string, changes: readonly LiveChange[]): Promise<void> {
    const inbox = await this.directory.getInbox(inboxId);
    if (!inbox) return;
    // Issued together, in order: one commit for the batch, positions in the order applied. A
    // change another process recorded first resolves with null here.
    const actors = new Map<LiveChange, string>();
    for (const c of changes) actors.set(c, this.actorOf(inboxId, c, actors));
    await Promise.all(
      changes.map((c) =>
        this.events.record({
          type: c.type,
          projectId: inbox.projectId,
          inboxId,
          actor: actors.get(c)!,
          subject: isLabelChange(c) ? c.labelId : c.msgId,
          data: dataOf(c),
          dedupeKey: dedupeKeyOf(inboxId, c),
        }),
      ),
    );
  }

  /** Resolves when every batch handed over so far is recorded (before the log closes). */
  async drain(): Promise<void> {
    while (this.chains.size > 0) await Promise.all([...this.chains.values()]);
  }
}
