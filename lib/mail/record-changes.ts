// Every change the mail index applies is also recorded in the project event log, as the same
// message.added / message.removed / message.flags the inbox stream carries. A change is recorded
// when Postern's index learns of it: at once for an inbox with a live watcher, otherwise at the
// next read of the inbox. `message.received` (arrival from outside) needs the delivery ingress
// and is not recorded from here.
import type { DirectoryStore } from '../directory/store.ts';
import { SYSTEM_ACTOR, type EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { LiveChange } from './types.ts';

interface Logger {
  warn(obj: object, msg: string): void;
}

function dataOf(change: LiveChange): EventData {
  const data: EventData = { msgId: change.msgId };
  if (change.labelId !== undefined) data.labelId = change.labelId;
  if (change.uid !== undefined) data.uid = change.uid;
  if (change.flags !== undefined) data.flags = [...change.flags];
  return data;
}

export class MailChangeRecorder {
  /** Per inbox, the batches still being recorded: batches are recorded in the order applied. */
  private readonly chains = new Map<string, Promise<void>>();

  constructor(
    private readonly directory: DirectoryStore,
    private readonly events: EventLog,
    private readonly log: Logger,
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
    // Issued together, in order: one commit for the batch, positions in the order applied.
    await Promise.all(
      changes.map((c) =>
        this.events.record({ type: c.type, projectId: inbox.projectId, inboxId, actor: SYSTEM_ACTOR, subject: c.msgId, data: dataOf(c) }),
      ),
    );
  }

  /** Resolves when every batch handed over so far is recorded (before the log closes). */
  async drain(): Promise<void> {
    while (this.chains.size > 0) await Promise.all([...this.chains.values()]);
  }
}
