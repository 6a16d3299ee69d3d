// When a failed webhook delivery is tried again: an exponential schedule spread over about three
// days (Standard Webhooks' and Svix's shape), each wait jittered so receivers coming back are not
// hit by every sender at the same second, and a receiver's Retry-After heeded on 429 and 503.

/** The waits after the 1st, 2nd, … failed attempt; after the last one the delivery is given up. */
export const DEFAULT_SCHEDULE = '5s,5m,30m,2h,5h,10h,14h,20h,24h';
/** An endpoint whose every attempt has failed for this long is disabled. */
export const DEFAULT_DISABLE_AFTER = '3d';
/** A Retry-After longer than this is capped: the receiver may not park a delivery for weeks. */
const MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000;
const JITTER = 0.2;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `250ms`, `5s`, `5m`, `2h`, `3d` → milliseconds; null when it is not one of those. */
export function parseDuration(text: string): number | null {
  const m = /^(\d{1,9})(ms|s|m|h|d)$/.exec(text.trim());
  return m ? Number(m[1]) * UNIT_MS[m[2]!]! : null;
}

/** A comma-separated list of durations, at least one; null when any is malformed. */
export function parseSchedule(text: string): number[] | null {
  const items = text.split(',').map(parseDuration);
  return items.length > 0 && items.every((n): n is number => n !== null) ? items : null;
}

export interface RetryPolicy {
  /** Waits after each failed attempt, in order. */
  scheduleMs: readonly number[];
  /** Random in [0, 1): tests pin it. */
  random?: () => number;
}

/**
 * When to try again after the `attempts`-th failed attempt (1 after the first), or null when the
 * schedule is spent. A Retry-After the receiver sent replaces the wait (capped at a day).
 */
export function nextAttempt(policy: RetryPolicy, attempts: number, now: number, retryAfterSeconds: number | null): number | null {
  const wait = policy.scheduleMs[attempts - 1];
  if (wait === undefined) return null;
  if (retryAfterSeconds !== null) return now + Math.min(retryAfterSeconds * 1000, MAX_RETRY_AFTER_MS);
  const spread = 1 + (2 * (policy.random ?? Math.random)() - 1) * JITTER;
  return now + Math.round(wait * spread);
}
