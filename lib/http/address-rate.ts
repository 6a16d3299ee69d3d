// A per-address request budget for public endpoints that cost the server something before anyone
// is known (the passkey ceremonies store a challenge per call). Without it one address could take
// the whole shared challenge cap and lock every member out. A fixed window per process: cheap,
// bounded memory (the map is dropped each window), and good enough for abuse control; clustered
// workers each keep their own count, so the effective budget is workers × limit (docs/access.md).
import type { Middleware } from 'koa';
import { rateLimited } from '../errors.ts';

export interface AddressRate {
  /** Requests one address may make per window; 0 turns the limit off. */
  limit: number;
  windowMs: number;
  now?: () => number;
}

export function perAddressRate(opts: AddressRate): Middleware {
  const now = opts.now ?? Date.now;
  let windowStart = now();
  let counts = new Map<string, number>();
  return async (ctx, next) => {
    if (opts.limit > 0) {
      const t = now();
      if (t - windowStart >= opts.windowMs) {
        windowStart = t;
        counts = new Map();
      }
      // ctx.ip is the client's address, from X-Forwarded-For only when POSTERN_TRUST_PROXY is on.
      const used = (counts.get(ctx.ip) ?? 0) + 1;
      counts.set(ctx.ip, used);
      if (used > opts.limit) {
        const retryAfter = Math.max(1, Math.ceil((windowStart + opts.windowMs - t) / 1000));
        throw rateLimited('too many sign-in attempts from this address; try again later', retryAfter);
      }
    }
    await next();
  };
}
