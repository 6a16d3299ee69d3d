// The bus between the workers of one clustered Postern (POSTERN_WORKERS > 1) when no Redis is
// configured: a worker sends each message to the primary over its IPC channel, and the primary
// relays it to every other worker. Receivers in the sending worker get it at once, as with the
// in-process bus. Delivery is at most once (a worker that restarts misses what was sent
// meanwhile); receivers heal from the store, as they do for Redis.
import cluster from 'node:cluster';
import type { Bus, Unsubscribe } from '../../lib/bus.ts';
import { MemoryBus } from './memory.ts';

interface BusMessage {
  postern: 'bus';
  channel: string;
  message: string;
}

function isBusMessage(value: unknown): value is BusMessage {
  if (typeof value !== 'object' || value === null) return false;
  const m = value as Partial<BusMessage>;
  return m.postern === 'bus' && typeof m.channel === 'string' && typeof m.message === 'string';
}

/** A worker's side: publishes through the primary, receives what the other workers publish. */
export class ClusterBus implements Bus {
  // Receivers in this worker: the in-process bus does the local fan-out.
  private readonly local = new MemoryBus();
  private readonly onMessage = (m: unknown): void => {
    if (isBusMessage(m)) void this.local.publish(m.channel, m.message);
  };

  constructor() {
    if (!process.send) throw new Error('ClusterBus runs only in a cluster worker (no IPC channel)');
    process.on('message', this.onMessage);
  }

  async publish(channel: string, message: string): Promise<void> {
    await this.local.publish(channel, message);
    if (!process.send || !process.connected) throw new Error('the cluster primary is gone');
    const m: BusMessage = { postern: 'bus', channel, message };
    await new Promise<void>((resolve, reject) => {
      process.send!(m, (err: Error | null) => (err ? reject(err) : resolve()));
    });
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
    if (!isBusMessage(m)) return;
    for (const worker of Object.values(cluster.workers ?? {})) {
      if (worker && worker.id !== from.id && worker.isConnected()) worker.send(m);
    }
  };
  cluster.on('message', relay);
  return () => void cluster.off('message', relay);
}
