// Keys (`/keys`, `/compose`: docs/api.md, "Inboxes", "Sending") and the member's own key (`PUT /me/key`, web app).
import type { AuthenticationResponseJSON } from '@simplewebauthn/server';
import type { ComposeData, EpochKeyList, UserKey } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import type { MemberKeyChange } from '../../auth/key-change.ts';
import type { EpochKeys } from '../../crypto/epoch-keys.ts';
import type { MemberKeys } from '../../crypto/member-keys.ts';
import { invalid, forbidden } from '../../errors.ts';
import { allow, DEFAULT_RULE } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

/** The key and, to replace one, the passkey's answer to a 'replace-key' challenge. */
const SET_KEY = 'https://postern.dev/schemas/app.json#/$defs/SetKeyRequest';

export function keyRoutes(access: Access, epochs: EpochKeys, memberKeys: MemberKeys, keyChange: MemberKeyChange, validator: Validator) {
  return (router: AppRouter): void => {
    router.get('/inboxes/:inbox/keys', allow(access, DEFAULT_RULE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:read');
      const body: EpochKeyList = { epochs: await memberKeys.sealedEpochs(ctx.state.principal.memberId, inbox.id) };
      ctx.body = body;
    });

    router.get('/inboxes/:inbox/compose', allow(access, { token: 'send', session: true }), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'send');
      const current = await epochs.current(inbox.id);
      const body: ComposeData = {
        addresses: inbox.addresses,
        epoch: current.epoch,
        epochPublic: Buffer.from(current.publicBytes).toString('base64'),
        epochFingerprint: current.fingerprint,
      };
      ctx.body = body;
    });

    // The web app sets the member's key; an API token acts for a member but is not the member.
    router.put('/me/key', allow(access, { token: 'any', session: true }), async (ctx) => {
      if (ctx.state.principal.kind !== 'session')
        throw forbidden('the encryption key is set from the web app (a session), not with an API token');
      const { publicKey, reauth } = validator.body<UserKey & { reauth?: AuthenticationResponseJSON }>(SET_KEY, await readJson(ctx));
      const trimmed = publicKey.trim();
      let bytes: Uint8Array;
      if (trimmed.startsWith('-----BEGIN PGP')) bytes = Buffer.from(trimmed, 'utf8');
      else if (/^[A-Za-z0-9+/\s]+={0,2}$/.test(trimmed)) bytes = Buffer.from(trimmed, 'base64');
      else throw invalid('publicKey must be an ASCII-armored OpenPGP key or base64 of the binary key');
      ctx.body = await keyChange.set(ctx.state.principal, bytes, reauth);
    });
  };
}
