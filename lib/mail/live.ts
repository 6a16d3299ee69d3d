// The inbox streams' live feed across processes. Every Postern process sharing a store syncs
// inboxes on its own (a read, a flag change, a watcher), and only the process whose sync applied
// a diff knows the changes in it. So each process delivers what it applied to its own listeners
// at once and publishes it on the Bus; every process delivers what the others published to its
// own listeners of that inbox.
//
// - Own publications come back (Redis and the cluster bus echo to the sender): each message
//   starts with the publishing process's origin id, and a process skips its own unparsed.
// - Two processes can apply the same change (both computed their diff against the index before
//   either wrote it): a listener sees each change once because every delivery, local or from the
//   bus, is checked against the change's identity (dedupeKeyOf, the key the event log uses),
//   remembered per inbox for a while (bounded in time and number).
// - Order: changes from one origin arrive in the order applied (one bus connection per process,
//   delivered as they come, never reordered here).
// - The bus is at most once. A lost message cannot be replayed: the index is current (a read
//   shows the change, and so does the project event log, which records every change from the
//   store), but this process's sync finds nothing left to announce. So when the bus reconnects
//   after a loss (Redis restarted), every inbox stream here is ended (gap()): its client
//   reconnects and reads, as after any reconnect, instead of silently missing changes.
import { randomBytes } from 'node:crypto';
import type { Bus, Unsubscribe } from '../bus.ts';
import { dedupeKeyOf } from './record-changes.ts';
import type { LabelChange, LiveChange, MessageChange } from './types.ts';
import { Listeners } from '../listeners.ts';
import type { WarnLog } from '../warn-log.ts';

/** The bus channel of one store's mail changes: processes sharing a store share it. */
export const mailChannel = (logId: string): string => `postern:mail:${logId}`;

export type MailListener = (change: LiveChange) => void;

export interface MailLiveOptions {
  log?: WarnLog;
  /** A message's size bound in characters; a bigger batch goes out in several (default 64 Ki). */
  maxMessageChars?: number;
  /** How long a delivered change is remembered, to skip another process's copy of it (default 2 min). */
  rememberMs?: number;
  /** At most this many changes remembered per inbox (default 4096); the oldest are forgotten first. */
  rememberPerInbox?: number;
  /** This process's id on the bus (random by default). */
  origin?: string;
}

/** What the inbox of a message is: ids never hold spaces. */
const INBOX_ID = /^\S+$/;

export class MailLiveFeed {
  readonly origin: string;
  // An inbox without listeners forgets the changes it has seen.
  private readonly listeners = new Listeners<LiveChange>((inboxId) => this.seen.delete(inboxId));
  private readonly gaps = new Listeners<void>();
  /** Per inbox with listeners: change identity → until when it is remembered (insertion order = expiry order). */
  private readonly seen = new Map<string, Map<string, number>>();
  private readonly maxChars: number;
  private readonly rememberMs: number;
  private readonly rememberMax: number;
  private channel: Promise<string> | null = null;
  private started: Promise<void> | null = null;
  private unsubscribe: Unsubscribe | null = null;
  private closed = false;
  private failing = false;

  /** @param channelName the channel to use, resolved once (e.g. mailChannel of the event log's id) */
  constructor(
    private readonly bus: Bus,
    private readonly channelName: () => Promise<string>,
    private readonly options: MailLiveOptions = {},
  ) {
    this.origin = options.origin ?? randomBytes(8).toString('hex');
    this.maxChars = options.maxMessageChars ?? 64 * 1024;
    this.rememberMs = options.rememberMs ?? 120_000;
    this.rememberMax = options.rememberPerInbox ?? 4096;
  }

  /** Subscribes to the bus; idempotent. Resolves once the bus took the subscription. */
  start(): Promise<void> {
    this.started ??= (async () => {
      const channel = await this.resolveChannel();
      const unsubscribe = await this.bus.subscribe(channel, (m) => this.arrive(m));
      if (this.closed) await unsubscribe();
      else this.unsubscribe = unsubscribe;
    })().catch((err: unknown) => {
      // The next caller tries again.
      this.started = null;
      this.channel = null;
      throw err;
    });
    return this.started;
  }

  /**
   * `onGap` is called if changes may have been missed: the bus lost messages (gap()). An inbox
   * stream has no position to resume from, so its subscriber ends the stream and the client
   * reconnects and reads what it missed, as after any reconnect.
   */
  subscribe(inboxId: string, listener: MailListener, onGap?: () => void): () => void {
    const remove = this.listeners.add(inboxId, listener);
    const removeGap = onGap ? this.gaps.add(inboxId, onGap) : () => undefined;
    return () => {
      remove();
      removeGap();
    };
  }

  /** The bus reconnected after a loss: what other processes published meanwhile is gone. */
  gap(): void {
    this.gaps.emitAll(undefined, (err) => this.options.log?.warn({ err }, 'a live change gap handler failed'));
  }

  /**
   * Changes this process just applied to the index (committed): delivered here at once, and
   * published for the other processes, in messages of at most `maxMessageChars` each.
   */
  applied(inboxId: string, changes: readonly LiveChange[]): void {
    if (this.closed || changes.length === 0) return;
    this.deliver(inboxId, changes);
    this.publish(inboxId, changes);
  }

  async close(): Promise<void> {
    this.closed = true;
    const unsubscribe = this.unsubscribe;
    this.unsubscribe = null;
    this.listeners.clear();
    this.seen.clear();
    if (unsubscribe) await unsubscribe();
  }

  private resolveChannel(): Promise<string> {
    this.channel ??= this.channelName();
    return this.channel;
  }

  /** `<origin> <inboxId> [change,…]`: each change serialized once, the batch cut where a message would pass the bound. */
  private publish(inboxId: string, changes: readonly LiveChange[]): void {
    // A process alone has delivered everything already.
    if (!this.bus.spansProcesses) return;
    const head = `${this.origin} ${inboxId} [`;
    const messages: string[] = [];
    let parts: string[] = [];
    let size = head.length + 1;
    for (const change of changes) {
      const text = JSON.stringify(change);
      // A change alone over the bound still goes, alone.
      if (parts.length > 0 && size + text.length + 1 > this.maxChars) {
        messages.push(`${head}${parts.join(',')}]`);
        parts = [];
        size = head.length + 1;
      }
      parts.push(text);
      size += text.length + 1;
    }
    if (parts.length > 0) messages.push(`${head}${parts.join(',')}]`);
    // Issued in order on one channel: the bus keeps the order of one publisher's messages.
    const channel = this.resolveChannel();
    for (const message of messages) {
      void channel
        .then((c) => this.bus.publish(c, message))
        .then(
          () => {
            this.failing = false;
          },
          (err: unknown) => {
            // One warning per outage, not one per batch.
            if (this.failing || this.closed) return;
            this.failing = true;
            this.options.log?.warn({ err, inboxId }, "publishing mail changes on the bus failed; other processes' streams miss them");
          },
        );
    }
  }

  private arrive(message: string): void {
    const first = message.indexOf(' ');
    const second = first < 0 ? -1 : message.indexOf(' ', first + 1);
    if (second < 0) return this.malformed(message);
    // Our own, echoed back: delivered already.
    if (message.slice(0, first) === this.origin) return;
    const inboxId = message.slice(first + 1, second);
    if (!INBOX_ID.test(inboxId)) return this.malformed(message);
    // Nobody here listens to that inbox: not even parsed.
    if (!this.listeners.has(inboxId)) return;
    let changes: LiveChange[];
    try {
      changes = JSON.parse(message.slice(second + 1)) as LiveChange[];
    } catch {
      return this.malformed(message);
    }
    if (!Array.isArray(changes) || !changes.every(isChange)) return this.malformed(message);
    this.deliver(inboxId, changes);
  }

  private malformed(message: string): void {
    this.options.log?.warn({ message: message.slice(0, 200) }, 'malformed mail change message ignored');
  }

  private deliver(inboxId: string, changes: readonly LiveChange[]): void {
    if (!this.listeners.has(inboxId)) return;
    for (const change of changes) {
      if (this.isNew(inboxId, change))
        this.listeners.emit(inboxId, change, (err) => this.options.log?.warn({ err }, 'a live change listener failed'));
    }
  }

  /** First time this change reaches this inbox's listeners (remembered for a while). */
  private isNew(inboxId: string, change: LiveChange): boolean {
    const key = dedupeKeyOf(inboxId, change);
    // A flag change without a MODSEQ has no identity: a rare repeat beats a lost change.
    if (key === undefined) return true;
    let memory = this.seen.get(inboxId);
    if (!memory) this.seen.set(inboxId, (memory = new Map()));
    const now = Date.now();
    for (const [k, until] of memory) {
      if (until > now && memory.size < this.rememberMax) break;
      memory.delete(k);
    }
    if (memory.has(key)) return false;
    memory.set(key, now + this.rememberMs);
    return true;
  }
}

function isChange(value: unknown): value is LiveChange {
  if (typeof value !== 'object' || value === null) return false;
  const l = value as Partial<LabelChange>;
  if (l.type === 'label.created' || l.type === 'label.renamed' || l.type === 'label.deleted')
    return typeof l.labelId === 'string' && typeof l.name === 'string' && typeof l.at === 'object' && typeof l.at?.labelGuid === 'string';
  const c = value as Partial<MessageChange>;
  return (
    (c.type === 'message.added' || c.type === 'message.removed' || c.type === 'message.flags') &&
    typeof c.msgId === 'string' &&
    typeof c.at === 'object' &&
    c.at !== null &&
    typeof c.at.labelGuid === 'string' &&
    typeof c.at.uidValidity === 'number' &&
    typeof c.at.uid === 'number'
  );
}
