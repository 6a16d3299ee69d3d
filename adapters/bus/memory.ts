// The in-process bus: one Postern process alone, no Redis needed.
import type { Bus, Unsubscribe } from '../../lib/bus.ts';

export class MemoryBus implements Bus {
  readonly spansProcesses = false;
  private readonly channels = new Map<string, Set<(message: string) => void>>();

  async publish(channel: string, message: string): Promise<void> {
    for (const handler of this.channels.get(channel) ?? []) {
      try {
        handler(message);
      } catch {
        // One failing receiver must not starve the others; receivers log their own failures.
      }
    }
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    let set = this.channels.get(channel);
    if (!set) this.channels.set(channel, (set = new Set()));
    // Wrap so the same function subscribed twice is two subscriptions.
    const entry = (m: string) => handler(m);
    set.add(entry);
    return async () => {
      set.delete(entry);
      if (set.size === 0) this.channels.delete(channel);
    };
  }

  async close(): Promise<void> {
    this.channels.clear();
  }
}
