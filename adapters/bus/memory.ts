// The in-process bus: one Postern process alone, no Redis needed.
import type { Bus, Unsubscribe } from '../../lib/bus.ts';
import { Listeners } from '../../lib/listeners.ts';

export class MemoryBus implements Bus {
  readonly spansProcesses = false;
  private readonly channels = new Listeners<string>();

  async publish(channel: string, message: string): Promise<void> {
    // One failing receiver must not starve the others; receivers log their own failures.
    this.channels.emit(channel, message);
  }

  async subscribe(channel: string, handler: (message: string) => void): Promise<Unsubscribe> {
    const remove = this.channels.add(channel, handler);
    return async () => remove();
  }

  async close(): Promise<void> {
    this.channels.clear();
  }
}
