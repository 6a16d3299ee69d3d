// Attempts' outcomes, written behind the attempts (docs/webhooks.md): those of every attempt
// ending within FLUSH_DELAY_MS go to the store in one transaction, so a fast receiver costs one
// write per batch, not one per attempt. A write that fails loses nothing: the deliveries' leases
// lapse and they are tried again.
import type { Logger } from 'pino';
import { Soon, after } from './coalesce.ts';
import type { DeliveryOutcome, DeliveryRecord, WebhookStore } from './ports.ts';

/** Outcomes are written this long after an attempt ends, with those of every attempt ending meanwhile. */
export const FLUSH_DELAY_MS = 20;

/**
 * An attempt's outcome, written as one literal: V8 adds each property after a spread (`{...base,
 * state}`) on a slow path, several microseconds an outcome.
 */
export function outcomeOf(
  d: DeliveryRecord,
  owner: string,
  state: DeliveryOutcome['state'],
  nextAttemptAt: number,
  at: number,
  status: number | null,
  error: string | null,
  ms: number | null,
  receiver: DeliveryOutcome['receiver'],
): DeliveryOutcome {
  return {
    endpointId: d.endpointId,
    eventId: d.eventId,
    position: d.position,
    owner,
    state,
    nextAttemptAt,
    at,
    status,
    error,
    ms,
    receiver,
  };
}

/** Hands a delivery back untried: pending as it was, its lease given up. */
export function handedBack(d: DeliveryRecord, owner: string, at: number): DeliveryOutcome {
  return outcomeOf(d, owner, 'pending', d.nextAttemptAt, at, d.lastStatus, d.lastError, d.lastMs, null);
}

export interface OutcomeWriterOptions {
  store: Pick<WebhookStore, 'finish'>;
  log: Logger;
  /** After each write: the endpoints' failingSince as the store has them now, and the outcomes written. */
  written: (failing: Map<string, number | null>, batch: readonly DeliveryOutcome[]) => Promise<void>;
  /** How `soon()` defers its write (tests: at once). */
  defer?: (run: () => void) => void;
}

export class OutcomeWriter {
  private outcomes: DeliveryOutcome[] = [];
  private flushing: Promise<void> | null = null;
  private readonly later: Soon;

  constructor(private readonly o: OutcomeWriterOptions) {
    this.later = new Soon(o.defer ?? after(FLUSH_DELAY_MS), () => void this.flush());
  }

  /** Kept for the next write. */
  push(outcome: DeliveryOutcome): void {
    this.outcomes.push(outcome);
  }

  /** Outcomes are written a moment from now, with every one pushed meanwhile. */
  soon(): void {
    this.later.ask();
  }

  /** Writes the outcomes gathered so far (one transaction), after any write under way. */
  async flush(): Promise<void> {
    while (this.flushing) await this.flushing;
    if (this.outcomes.length === 0) return;
    const batch = this.outcomes;
    this.outcomes = [];
    this.flushing = (async () => {
      try {
        await this.o.written(await this.o.store.finish(batch), batch);
      } catch (err) {
        // Their leases lapse and the deliveries are tried again.
        this.o.log.warn({ err, outcomes: batch.length }, 'writing webhook outcomes failed');
      } finally {
        this.flushing = null;
      }
    })();
    await this.flushing;
  }
}
