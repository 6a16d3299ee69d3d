// The bus across several Postern processes: Redis pub/sub through ioredis. One subscriber
// connection per process, whatever the number of local receivers: each channel is subscribed
// once and its messages fanned out in memory. Delivery is at most once (a Redis restart drops
// what was published meanwhile); receivers heal from the store, and `onReconnect` tells them
// when to look.
import { Redis } from 'ioredis';
import type { Bus, Unsubscribe } from '../../lib/bus.ts';
import { Listeners } from '../../lib/listeners.ts';
import type { WarnLog } from '../../lib/warn-log.ts';

export interface RedisBusOptions {
  /** Called when the subscriber connection is back after a loss (messages may have been missed). */
  onReconnect?: () => void;
  log?: WarnLog;
}

export class RedisBus implements Bus {
  readonly spansProcesses = true;
  private readonly pub: Redis;
  private readonly sub: Redis;
  // The last receiver of a channel gone: unsubscribe (not awaited: with Redis down it would wait
  // for the reconnect).
  private readonly channels = new Listeners<string>((channel) => {
    if (!this.closing) this.sub.unsubscribe(channel).catch(() => undefined);
  });
  private everReady = false;
  private closing = false;

  constructor(
    url: string,
    private readonly options: RedisBusOptions = {},
  ) {
    // Publishing never waits for a Redis that is down: the event is already committed and
    // receivers find it in the store, so fail fast instead of queueing without bound.
    this.pub = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: false });
    this.sub = new Redis(url, { autoResubscribe: true, maxRetriesPerRequest: null });
    // One warning per outage and connection, not one per reconnect attempt.
    const down = new Set<string>();
    const warn = (which: string) => (err: Error) => {
      if (this.closing || down.has(which)) return;
      down.add(which);
      this.options.log?.warn({ err: err.message, which }, 'redis bus unavailable; live events fall back to reading the store');
    };
    this.pub.on('error', warn('publisher'));
    this.sub.on('error', warn('subscriber'));
    this.pub.on('ready', () => down.delete('publisher'));
    this.sub.on('ready', () => {
      down.delete('subscriber');
      if (this.everReady) this.options.onReconnect?.();
      this.everReady = true;
    });
    this.sub.on('message', (channel: string, message: string) => {
      // One failing receiver must not starve the others; receivers log their own failures.
      this.channels.emit(channel, message);
    });
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.pub.publish(channel, message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    if (!this.channels.has(channel)) {
      // Not awaited: with Redis down, Postern still starts (receivers read the store meanwhile),
      // and ioredis subscribes once it connects, and again after every reconnect.
      // A refusal (ACL, NOAUTH) is not a passing outage: say so, or fan-out silently degrades.
      this.sub.subscribe(channel).catch((err: Error) => {
        if (!this.closing)
          this.options.log?.warn(
            { err: err.message, channel },
            'redis refused the subscription; live events fall back to reading the store',
          );
      });
    }
    const remove = this.channels.add(channel, handler);
    return async () => remove();
  }

  async close(): Promise<void> {
    this.closing = true;
    this.channels.clear();
    // disconnect, not quit: QUIT would wait for a Redis that may be down, and nothing is pending.
    this.pub.disconnect();
    this.sub.disconnect();
  }
}
