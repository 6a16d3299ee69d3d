// The watcher of one inbox (docs/mail.md, "The watcher and the stream"): its own IMAP connection that only listens. INBOX is
// EXAMINEd so its changes arrive unasked (EXISTS / FETCH / VANISHED under IDLE); NOTIFY (RFC
// 5465) reports every other folder as `* STATUS` and folder
// creation, deletion and renames as `* LIST`. The watcher does not interpret any of it: each
// signal asks for a sync, and the sync's diffs are the live changes. A poll every `pollMs` and
// every reconnect ask for one too, so a lost signal or a dropped connection delays a change but
// never loses it. Dovecot sends each of these 500 ms after the change, whatever the folder:
// push hints, where configured, are what make a stream fast (docs/mail.md).
//
// A Dovecot without NOTIFY (it needs `mailbox_list_index = yes`) is detected once, at the first
// connection: the watcher then keeps IDLE on INBOX and asks for a pass (one LIST-STATUS when
// nothing changed) every `fallbackPollMs`, and says it is not `complete`, so reads keep syncing
// for themselves (docs/mail.md). Without this it would reconnect every few seconds forever.
import type { ImapFlow } from 'imapflow';
import type { Logger } from 'pino';
import type { MailWatcher } from '../../lib/mail/ports.ts';
import { PoolBusyError } from './pool.ts';
import { atom, onUnsolicited, rawCommand } from './raw.ts';

export interface WatcherOptions {
  open: () => Promise<ImapFlow>;
  /** Something may have changed: sync. */
  onSignal: () => void;
  log: Logger;
  pollMs: number;
  /** The poll when the server has no NOTIFY: how late a change outside INBOX may be seen. */
  fallbackPollMs: number;
}

/** Said once per process, not once per inbox and reconnect. */
let toldNoNotify = false;

const EVENTS = ['MessageNew', 'MessageExpunge', 'FlagChange'];

export class Watcher implements MailWatcher {
  private client: ImapFlow | null = null;
  /** null until the first connection tells; false: the server has no usable NOTIFY. */
  private notify: boolean | null = null;
  private fallbackPoll: NodeJS.Timeout | null = null;
  private stopped = false;
  private backoff = 100;
  private retryTimer: NodeJS.Timeout | null = null;
  private readonly poll: NodeJS.Timeout;
  /** Connected and listening: reads may trust the index without a sync of their own. */
  live = false;
  /** Settles after the first attempt to connect, whether it worked or not. */
  readonly started: Promise<void>;
  /** Why the last attempt to connect failed (null once connected). */
  lastError: unknown = null;

  /** Every label's changes are signalled (NOTIFY works here). */
  get complete(): boolean {
    return this.live && this.notify === true;
  }

  /** Refused at the connection cap (not a server that is down). */
  get refused(): boolean {
    return this.lastError instanceof PoolBusyError;
  }

  constructor(private readonly o: WatcherOptions) {
    this.poll = setInterval(() => o.onSignal(), o.pollMs);
    this.poll.unref();
    this.started = this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.live = false;
    clearInterval(this.poll);
    if (this.fallbackPoll) clearInterval(this.fallbackPoll);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = null;
    client?.close();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    let client: ImapFlow | null = null;
    try {
      client = await this.o.open();
      if (this.stopped) {
        client.close();
        return;
      }
      this.client = client;
      const signal = () => this.o.onSignal();
      client.on('close', () => this.dropped(client!));
      for (const event of ['exists', 'expunge', 'flags']) client.on(event, signal);
      onUnsolicited(client, 'STATUS', signal);
      onUnsolicited(client, 'LIST', signal);
      await client.mailboxOpen('INBOX', { readOnly: true });
      if (this.notify !== false) await this.setNotify(client);
      // No maxIdleTime is set: IDLE lasts until the connection ends (nothing else is ever sent on
      // it), and the returned promise ends with it. Dovecot's `* OK Still here` during IDLE
      // (imap_idle_notify_interval) keeps the socket timeout from firing on a quiet inbox.
      client.idle().catch((err: unknown) => this.o.log.debug({ err }, 'watcher idle ended'));
      this.live = true;
      this.lastError = null;
      this.backoff = 100;
      // Whatever happened while no one was listening (first start, or a reconnect).
      this.o.onSignal();
    } catch (err) {
      this.lastError = err;
      this.o.log.warn({ err }, 'inbox watcher could not connect; retrying');
      client?.close();
      this.retry();
    }
  }

  /** NOTIFY SET, or the fallback when the server has none (not advertised, or refused). */
  private async setNotify(client: ImapFlow): Promise<void> {
    let refusal: unknown = null;
    if (client.capabilities.has('NOTIFY')) {
      try {
        await rawCommand(client, 'NOTIFY', [
          atom('SET'),
          atom('STATUS'),
          [atom('SELECTED'), [atom('MessageNew'), [atom('UID'), atom('FLAGS')], atom('MessageExpunge'), atom('FlagChange')]],
          [atom('PERSONAL'), [...EVENTS.map(atom), atom('MailboxName')]],
        ]);
        this.notify = true;
        return;
      } catch (err) {
        // A dead connection is an outage (retried); a NO or BAD on a live one is the server's answer.
        if (!client.usable) throw err;
        refusal = err;
      }
    }
    this.notify = false;
    this.fallbackPoll = setInterval(() => this.o.onSignal(), this.o.fallbackPollMs);
    this.fallbackPoll.unref();
    if (!toldNoNotify) {
      toldNoNotify = true;
      this.o.log.warn(
        { err: refusal, pollMs: this.o.fallbackPollMs },
        'the IMAP server has no NOTIFY (Dovecot needs mailbox_list_index = yes): watching INBOX with IDLE and polling the other folders (docs/mail.md)',
      );
    }
  }

  private dropped(client: ImapFlow): void {
    if (this.client !== client) return;
    this.client = null;
    this.live = false;
    if (!this.stopped) {
      this.o.log.info('inbox watcher lost its connection; reconnecting');
      this.retry();
    }
  }

  private retry(): void {
    if (this.stopped || this.retryTimer) return;
    const delay = this.backoff;
    this.backoff = Math.min(this.backoff * 2, 5000);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.connect();
    }, delay);
    this.retryTimer.unref();
  }
}
