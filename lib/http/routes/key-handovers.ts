// /me/key-handovers: a new device gets the member's key from a signed-in one, sealed between the
// two browsers (lib/crypto/key-handovers.ts, docs/app.md "A new device"). Sessions only, as
// /me/key-backup: only the web app holds the key, and API tokens have no use for it.
import type { KeyHandoverApproval, KeyHandoverRequest } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import { deviceName } from '../../auth/device-name.ts';
import type { HandoverCaller, KeyHandovers } from '../../crypto/key-handovers.ts';
import { MAX_SEALED_CHARS } from '../../crypto/key-handovers.ts';
import type { CredentialRate } from '../../rate.ts';
import { authenticate } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppContext, AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const REQUEST = 'https://postern.dev/schemas/app.json#/$defs/KeyHandoverRequest';
const APPROVAL = 'https://postern.dev/schemas/app.json#/$defs/KeyHandoverApproval';

function caller(ctx: AppContext): HandoverCaller {
  const p = ctx.state.principal;
  return { memberId: p.memberId, projectId: p.projectId, sessionId: p.credentialId };
}

export function keyHandoverRoutes(deps: { access: Access; handovers: KeyHandovers; validator: Validator; rate: CredentialRate }) {
  const { access, handovers, validator } = deps;
  const session = authenticate(access, 'session', deps.rate);
  return (router: AppRouter): void => {
    router.post('/me/key-handovers', session, async (ctx) => {
      const req = validator.body<KeyHandoverRequest>(REQUEST, await readJson(ctx, 1024));
      ctx.status = 201;
      ctx.body = await handovers.create(caller(ctx), req.publicKey, deviceName(ctx.get('user-agent')));
    });
    router.get('/me/key-handovers', session, async (ctx) => {
      ctx.body = await handovers.listPending(caller(ctx));
    });
    router.get('/me/key-handovers/:id', session, async (ctx) => {
      ctx.body = await handovers.get(caller(ctx), ctx.params.id!);
    });
    router.post('/me/key-handovers/:id/approve', session, async (ctx) => {
      const req = validator.body<KeyHandoverApproval>(APPROVAL, await readJson(ctx, MAX_SEALED_CHARS + 1024));
      ctx.body = await handovers.approve(caller(ctx), ctx.params.id!, req.publicKey, req.sealed);
    });
    router.delete('/me/key-handovers/:id', session, async (ctx) => {
      await handovers.remove(caller(ctx), ctx.params.id!);
      ctx.status = 204;
    });
  };
}
