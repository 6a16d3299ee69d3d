// The events context: the project event log on the store and a bus. The same for `postern serve`
// (the configured bus) and staff commands (an in-memory bus: what they record goes to the store,
// where a running server's readers find it).
import type { Logger } from 'pino';
import type { Bus } from '../bus.ts';
import type { Config } from '../config.ts';
import { EventLog } from '../events/log.ts';
import type { EventMetrics } from '../metrics.ts';
import type { Store } from '../store.ts';

export interface EventsContextOptions {
  config: Config;
  store: Store;
  bus: Bus;
  log?: Logger;
  metrics?: EventMetrics;
  /** Where a reconnected bus is told (Core.onBusReconnect): the live feed heals from the store. */
  onBusReconnect?: (listener: () => void) => void;
}

export interface EventsContext {
  /** `events.record(...)` is how every part of Postern emits an event. */
  events: EventLog;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function eventsContext(o: EventsContextOptions): EventsContext {
  const events = new EventLog(o.store.events, o.bus, {
    settleMs: o.config.events.settleMs,
    ...(o.log ? { log: o.log.child({ part: 'events' }) } : {}),
    ...(o.metrics ? { metrics: o.metrics } : {}),
  });
  o.onBusReconnect?.(() => events.live.heal());
  return {
    events,
    start: () => events.start(),
    stop: () => events.close(),
  };
}
