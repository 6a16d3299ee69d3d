// The bus across several Postern processes: Redis pub/sub through ioredis. One subscriber
// connection per process, whatever the number of local receivers: each channel is subscribed
// once and its messages fanned out in memory. Delivery is at most once (a Redis restart drops
// what was published meanwhile); receivers heal from the store, and `onReconnect` tells them
// when to look.
import { Redis } from 'ioredis';
import type { Bus, Unsubscribe } from '../../lib/bus.ts';

export interface RedisBusOptions {
  /** Called when the subscriber connection is back after a loss (messages may have been missed). */
  onReconnect?: () => void;
  log?: { warn(obj: object, msg: string): void };
}

export class RedisBus implements Bus {
  private readonly pub: Redis;
  private readonly sub: Redis;
  private readonly channels = new Map<string, Set<(message: string) => void>>();
  private everReady = false;
  private closing = false;

  constructor(url: string, private readonly options: RedisBusOptions = {}) {
    // Publishing never waits for a Redis that is down: the event is already committed and
    // receivers find it in the store, so fail fast instead of queueing without bound.
    this.pub = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: false });
    this.sub = new Redis(url, { autoResubscribe: true, maxRetriesPerRequest: null });
    const warn = (which: string) => (err: Error) => {
      if (!this.closing) this.options.log?.warn({ err: err.message, which }, 'redis bus connection error');
    };
    this.pub.on('error', warn('publisher'));
    this.sub.on('error', warn('subscriber'));
    this.sub.on('ready', () => {
      if (this.everReady) this.options.onReconnect?.();
      this.everReady = true;
    });
    this.sub.on('message', (channel: string, message: string) => {
      for (const handler of this.channels.get(channel) ?? []) {
        try {
          handler(message);
        } catch {
          // One failing receiver must not starve the others; receivers log their own failures.
        }
      }
    });
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.pub.publish(channel, message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    let set = this.channels.get(channel);
    if (!set) {
      this.channels.set(channel, (set = new Set()));
      await this.sub.subscribe(channel);
    }
    const entry = (m: string) => handler(m);
    set.add(entry);
    return async () => {
      set.delete(entry);
      if (set.size === 0 && this.channels.get(channel) === set) {
        this.channels.delete(channel);
        if (!this.closing) await this.sub.unsubscribe(channel).catch(() => undefined);
      }
    };
  }

  async close(): Promise<void> {
    this.closing = true;
    this.channels.clear();
    await Promise.all([this.pub.quit().catch(() => this.pub.disconnect()), this.sub.quit().catch(() => this.sub.disconnect())]);
  }
}
