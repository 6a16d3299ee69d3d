// Every change the mail index applies is also recorded in the project event log, as the same
// message.added / message.removed / message.flags the inbox stream carries. A change is recorded
// when Postern's index learns of it: at once for an inbox with a live watcher, otherwise at the
// next read of the inbox. `message.received` (arrival from outside) needs the delivery ingress
// and is not recorded from here.
//
// Who acted: a change the API made (POST …/flags) is recorded with the token or member that made
// it. The flags route announces the change before it stores it (expect()); the first
// message.flags recorded here for that message in that label with exactly the announced flags
// carries that actor. Anything else (a mail app, a delivery) is the service acting. If another
// process records the change first (it holds the watcher lease and its watcher saw the change
// before this process read it back), that record, as the service acting, is the one kept.
//
// Exactly once across processes: every Postern process sharing the store syncs on its own, and
// two of them can detect the same change at the same moment (the diff is computed against the
// shared index outside the write that applies it). So each event carries a dedupe key naming the
// change itself, and the log stores the first of them only (EventLog.record, dedupeKey).
import type { DirectoryStore } from '../directory/store.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { Flag } from '../../schemas/wire.ts';
import type { LiveChange } from './types.ts';
import type { WarnLog } from '../warn-log.ts';

/**
 * What makes a change this change, whichever process saw it: a UID is never reused in a label
 * within one UIDVALIDITY, so label + UIDVALIDITY + UID names an addition or a removal. Flags can
 * go back and forth (flagged, unflagged, flagged again: three changes, two with the same flags),
 * so a flag change is named by the MODSEQ the server gave that state. Without a MODSEQ (a server
 * without CONDSTORE) there is no safe key: recording a rare duplicate beats dropping a change.
 */
export function dedupeKeyOf(inboxId: string, change: LiveChange): string | undefined {
  const { labelGuid, uidValidity, uid, modseq } = change.at;
  const where = `${change.type}:${inboxId}:${labelGuid}:${uidValidity}:${uid}`;
  if (change.type !== 'message.flags') return where;
  return modseq !== undefined && modseq > 0 ? `${where}:${modseq}` : undefined;
}

function dataOf(change: LiveChange): EventData {
  const data: EventData = { msgId: change.msgId };
  if (change.labelId !== undefined) data.labelId = change.labelId;
  if (change.uid !== undefined) data.uid = change.uid;
  if (change.flags !== undefined) data.flags = [...change.flags];
  return data;
}

/** How long an announced API change waits for its record before it is forgotten. */
const EXPECT_MS = 30_000;

const sameFlags = (a: readonly string[], b: readonly string[]) => a.length === b.length && [...a].sort().join(' ') === [...b].sort().join(' ');

export class MailChangeRecorder {
  /** Per inbox, the batches still being recorded: batches are recorded in the order applied. */
  private readonly chains = new Map<string, Promise<void>>();
  /** API flag changes announced and not yet recorded, by inbox, label GUID and UID, oldest first. */
  private readonly expected = new Map<string, Array<{ actor: string; flags: readonly Flag[]; until: number }>>();

  /**
   * The API is about to set the flags of a message to `flags` in each of these places; the
   * change is `actor`'s. Called by the flags route before it stores the change.
   */
  readonly expect = (inboxId: string, at: ReadonlyArray<{ labelGuid: string; uid: number }>, flags: readonly Flag[], actor: string): (() => void) => {
    const now = Date.now();
    for (const [key, list] of this.expected) {
      const live = list.filter((e) => e.until >= now);
      if (live.length === 0) this.expected.delete(key);
      else if (live.length < list.length) this.expected.set(key, live);
    }
    const added: Array<[string, { actor: string; flags: readonly Flag[]; until: number }]> = [];
    for (const { labelGuid, uid } of at) {
      const key = `${inboxId}:${labelGuid}:${uid}`;
      const entry = { actor, flags, until: now + EXPECT_MS };
      this.expected.set(key, [...(this.expected.get(key) ?? []), entry]);
      added.push([key, entry]);
    }
    // The change did not happen (the STORE failed): forget it, or a mail app's identical change
    // within the window would be put down to this caller.
    return () => {
      for (const [key, entry] of added) {
        const rest = (this.expected.get(key) ?? []).filter((e) => e !== entry);
        if (rest.length === 0) this.expected.delete(key);
        else this.expected.set(key, rest);
      }
    };
  };

  private actorOf(inboxId: string, c: LiveChange): string {
    if (c.type !== 'message.flags' || !c.flags) return SYSTEM_ACTOR;
    const key = `${inboxId}:${c.at.labelGuid}:${c.at.uid}`;
    const list = this.expected.get(key) ?? [];
    const now = Date.now();
    const i = list.findIndex((e) => e.until >= now && sameFlags(e.flags, c.flags!));
    if (i < 0) return SYSTEM_ACTOR;
    const [entry] = list.splice(i, 1);
    if (list.length === 0) this.expected.delete(key);
    return entry!.actor;
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
    await Promise.all(
      changes.map((c) =>
        this.events.record({
          type: c.type,
          projectId: inbox.projectId,
          inboxId,
          actor: this.actorOf(inboxId, c),
          subject: c.msgId,
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
