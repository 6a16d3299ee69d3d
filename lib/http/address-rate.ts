// A per-address request budget for public endpoints that cost the server something before anyone
// is known (the passkey ceremonies store a challenge per call). Without it one address could take
// the whole shared challenge cap and lock every member out. The same token buckets as the
// credentials' budgets (lib/rate.ts): `limit` a minute, all of it at once at most; bounded memory
// (an address not seen for a minute is dropped); clustered workers each keep their own, so the
// effective budget is workers × limit (docs/access.md).
import type { Middleware } from 'koa';
import { rateLimited } from '../errors.ts';
import type { RateMetrics } from '../metrics.ts';
import { RateBuckets } from '../rate.ts';

export interface AddressRate {
  /** Requests one address may make a minute; 0 turns the limit off. */
  perMinute: number;
  metrics: RateMetrics;
}

export function perAddressRate(opts: AddressRate): Middleware {
  const buckets = new RateBuckets({ perSecond: opts.perMinute / 60, burst: opts.perMinute });
  return async (ctx, next) => {
    // ctx.ip is the client's address, from X-Forwarded-For only when POSTERN_TRUST_PROXY is on.
    const retryAfter = buckets.take(ctx.ip);
    if (retryAfter > 0) {
      opts.metrics.refused('sign_in');
      throw rateLimited('too many sign-in attempts from this address; try again later', retryAfter);
    }
    await next();
  };
}
