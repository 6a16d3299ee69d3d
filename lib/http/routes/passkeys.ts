// Passkey enrollment, sign-in and sign-out, and the member's passkeys and sessions: Postern's
// own endpoints under {app_url} (not in the contract's table, docs/api.md, "Endpoints summary"). The ceremonies are public (the
// passkey is the credential); everything else needs the session.
import type { Access } from '../../auth/access.ts';
import { deviceName } from '../../auth/device-name.ts';
import type { Passkeys } from '../../auth/passkeys.ts';
import type { ReauthOperation } from '../../auth/ports.ts';
import type { AuthenticationResponseJSON, RegistrationResponseJSON } from '@simplewebauthn/server';
import { readJson } from '../body.ts';
import { authenticate } from '../authenticate.ts';
import { perAddressRate } from '../address-rate.ts';
import type { AppContext, AppRouter } from '../context.ts';
import type { RateMetrics } from '../../metrics.ts';
import type { CredentialRate } from '../../rate.ts';
import type { Validator } from '../validate.ts';

const APP = 'https://postern.dev/schemas/app.json#/$defs/';
/** A WebAuthn response is a few KiB; an attestation with a certificate chain stays far below this. */
const CEREMONY_BODY_LIMIT = 96 * 1024;

export function passkeyRoutes(deps: {
  access: Access;
  passkeys: Passkeys;
  validator: Validator;
  ceremoniesPerMinute: number;
  rate: CredentialRate;
  metrics: RateMetrics;
}) {
  const { access, passkeys, validator } = deps;
  // One budget for the four public ceremony endpoints: each options call stores a challenge.
  const ceremony = perAddressRate({ perMinute: deps.ceremoniesPerMinute, metrics: deps.metrics });
  const session = authenticate(access, 'session', deps.rate);
  const body = async <T>(ctx: AppContext, def: string): Promise<T> =>
    validator.body<T>(`${APP}${def}`, await readJson(ctx, CEREMONY_BODY_LIMIT));
  const me = (ctx: AppContext) => ctx.state.principal.memberId;

  return (router: AppRouter): void => {
    router.post('/auth/enroll/options', ceremony, async (ctx) => {
      const { invite } = await body<{ invite: string }>(ctx, 'InviteRef');
      ctx.body = { publicKey: await passkeys.enrollOptions(invite) };
    });
    router.post('/auth/enroll', ceremony, async (ctx) => {
      const req = await body<{ invite: string; name?: string; response: RegistrationResponseJSON }>(ctx, 'EnrollRequest');
      ctx.status = 201;
      ctx.body = await passkeys.enroll(req.invite, req.response, req.name, deviceName(ctx.get('user-agent')));
    });
    router.post('/auth/sign-in/options', ceremony, async (ctx) => {
      ctx.body = { publicKey: await passkeys.signInOptions() };
    });
    router.post('/auth/sign-in', ceremony, async (ctx) => {
      const req = await body<{ response: AuthenticationResponseJSON }>(ctx, 'SignInRequest');
      ctx.body = await passkeys.signIn(req.response, deviceName(ctx.get('user-agent')));
    });
    router.post('/auth/sign-out', session, async (ctx) => {
      await passkeys.endSession(me(ctx), ctx.state.principal.credentialId);
      // The device's HTTP cache holds message details (sender, subject) the next user of a
      // shared browser profile could read; dropping the cached /raw ciphertext with it is cheap.
      ctx.set('Clear-Site-Data', '"cache"');
      ctx.status = 204;
    });

    router.get('/auth/passkeys', session, async (ctx) => {
      ctx.body = { passkeys: await passkeys.listPasskeys(me(ctx)) };
    });
    router.post('/auth/passkeys/options', session, async (ctx) => {
      ctx.body = { publicKey: await passkeys.addOptions(me(ctx)) };
    });
    router.post('/auth/passkeys', session, async (ctx) => {
      const req = await body<{ name?: string; response: RegistrationResponseJSON; reauth?: AuthenticationResponseJSON }>(
        ctx,
        'AddPasskeyRequest',
      );
      ctx.status = 201;
      ctx.body = await passkeys.add(me(ctx), req.response, req.name, req.reauth);
    });
    // Re-authentication before an operation that widens what the session's member can reach.
    router.post('/me/reauth/options', session, async (ctx) => {
      const { operation } = await body<{ operation: ReauthOperation }>(ctx, 'ReauthOptionsRequest');
      ctx.body = { publicKey: await passkeys.reauthOptions(me(ctx), operation) };
    });
    router.delete('/auth/passkeys/:passkey', session, async (ctx) => {
      await passkeys.removePasskey(me(ctx), ctx.params.passkey!);
      ctx.status = 204;
    });

    router.get('/auth/sessions', session, async (ctx) => {
      ctx.body = { sessions: await passkeys.listSessions(me(ctx), ctx.state.principal.credentialId) };
    });
    router.delete('/auth/sessions/:session', session, async (ctx) => {
      await passkeys.endSession(me(ctx), ctx.params.session!);
      ctx.status = 204;
    });
  };
}
