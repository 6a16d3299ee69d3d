// Authentication per base address and authorization per operation, as Koa middleware over the
// one access module (lib/auth/access.ts).
import type { Next } from 'koa';
import type { Access, AccessRule, Principal } from '../auth/access.ts';
import type { CredentialRate } from '../rate.ts';
import type { AppContext, Surface } from './context.ts';

/**
 * Tokens are accepted only on {base_url}, sessions only on {app_url} (docs/api.md,
 * "Authentication", rule 8). Every authenticated request is charged to its credential's request
 * budget (429 once it is spent).
 */
export function authenticate(access: Access, surface: Surface, rate: CredentialRate) {
  return async function authenticateRequest(ctx: AppContext, next: Next): Promise<void> {
    ctx.state.surface = surface;
    ctx.state.principal = await authenticateAs(access, surface, presentedCredential(ctx, surface));
    await charged(rate, () => rate.request(ctx.state.principal));
    // Started in the credential's share of this turn of the event loop, or of a later one.
    await rate.inShare(ctx.state.principal, next);
  };
}

/** After `allow`: an expensive operation (a search, a whole message) is charged to that budget too. */
export function expensive(rate: CredentialRate) {
  return async function chargeExpensive(ctx: AppContext, next: Next): Promise<void> {
    await charged(rate, () => rate.expensive(ctx.state.principal));
    await next();
  };
}

/** Charges a budget; its refusal (429) is thrown once CredentialRate.refused has held it. */
async function charged(rate: CredentialRate, charge: () => void): Promise<void> {
  try {
    charge();
  } catch (err) {
    await rate.refused(err);
    throw err;
  }
}

/** The credential a request presents on its surface: the header differs between the two. */
export function presentedCredential(ctx: AppContext, surface: Surface): string | undefined {
  return ctx.get(surface === 'token' ? 'authorization' : 'x-svc-token') || undefined;
}

/** Who a presented credential is now (401 when it is not valid); live streams re-check with it. */
export function authenticateAs(access: Access, surface: Surface, credential: string | undefined): Promise<Principal> {
  return surface === 'token' ? access.authenticateToken(credential) : access.authenticateSession(credential);
}

/** 403 unless the caller's credential kind and scopes allow this operation. */
export function allow(access: Access, rule: AccessRule) {
  return async function authorizeRequest(ctx: AppContext, next: Next): Promise<void> {
    access.authorize(ctx.state.principal, rule);
    await next();
  };
}

/** docs/api.md, "Endpoints summary": operations with no requirement of their own need T(messages:read) or S. */
export const DEFAULT_RULE: AccessRule = { token: 'messages:read', session: true };
