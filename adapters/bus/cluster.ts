// The bus between the workers of one clustered Postern (POSTERN_WORKERS > 1) when no Redis is
// configured: a worker sends each message to the primary over its IPC channel, and the primary
// relays it to every other worker. Receivers in the sending worker get it at once, as with the
// in-process bus. Delivery is at most once (a worker that restarts misses what was sent
// meanwhile); receivers heal from the store, as they do for Redis. What one worker publishes in
// one turn of its event loop travels as one IPC message: a group commit of a hundred events costs
// the primary one relay, not a hundred.
import cluster from 'node:cluster';
import type { Bus, Unsubscribe } from '../../lib/bus.ts';
import { MemoryBus } from './memory.ts';

/** Channel and message, alternating. */
interface BusBatch {
  postern: 'bus';
  items: string[];
}

function isBusBatch(value: unknown): value is BusBatch {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Partial<BusBatch>;
  return m.postern === 'bus' && Array.isArray(m.items) && m.items.length % 2 === 0 && m.items.every((i) => typeof i === 'string');
}

/** A worker's side: publishes through the primary, receives what the other workers publish. */
export class ClusterBus implements Bus {
  // Receivers in this worker: the in-process bus does the local fan-out.
  private readonly local = new MemoryBus();
  readonly spansProcesses = true;
  private outgoing: string[] = [];
  private sent: Promise<void> | null = null;
  private readonly onMessage = (m: unknown): void => {
    if (!isBusBatch(m)) return;
    for (let i = 0; i < m.items.length; i += 2) void this.local.publish(m.items[i]!, m.items[i + 1]!);
  };

  constructor() {
    if (!process.send) throw new Error('ClusterBus runs only in a cluster worker (no IPC channel)');
    process.on('message', this.onMessage);
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.local.publish(channel, message);
    this.outgoing.push(channel, message);
    this.sent ??= new Promise<void>((resolve, reject) => {
      setImmediate(() => {
        const batch: BusBatch = { postern: 'bus', items: this.outgoing };
        this.outgoing = [];
        this.sent = null;
        if (!process.send || !process.connected) return reject(new Error('the cluster primary is gone'));
        process.send(batch, (err: Error | null) => (err ? reject(err) : resolve()));
      });
    });
    return this.sent;
  }

  subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    return this.local.subscribe(channel, handler);
  }

  async close(): Promise<void> {
    process.off('message', this.onMessage);
    await this.local.close();
  }
}

/** The primary's side: relays every bus message from one worker to all the others. */
export function relayClusterBus(): () => void {
  const relay = (from: { id: number }, m: unknown): void => {
    if (!isBusBatch(m)) return;
    for (const worker of Object.values(cluster.workers ?? {})) {
      // With a callback, a worker dying meanwhile is an answer here, not an 'error' event; the
      // bus is at most once, and a restarted worker reads what it missed from the store.
      if (worker && worker.id !== from.id && worker.isConnected()) worker.send(m, undefined, undefined, () => undefined);
    }
  };
  cluster.on('message', relay);
  return () => void cluster.off('message', relay);
}
