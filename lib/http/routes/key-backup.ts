// GET/PUT /me/key-backup: the member's private key, encrypted in the browser (lib/crypto/key-backups.ts).
// Sessions only: only the web app holds what unlocks it, and API tokens have no use for it.
import type { KeyBackupWrite } from '../../../schemas/wire.ts';
import type { Access } from '../../auth/access.ts';
import type { KeyBackups } from '../../crypto/key-backups.ts';
import { MAX_KEY_BACKUP_CHARS } from '../../crypto/key-backups.ts';
import { readJson } from '../body.ts';
import { authenticate } from '../authenticate.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';
import type { CredentialRate } from '../../rate.ts';

const WRITE = 'https://postern.dev/schemas/app.json#/$defs/KeyBackupWrite';

export function keyBackupRoutes(deps: { access: Access; backups: KeyBackups; validator: Validator; rate: CredentialRate }) {
  const { access, backups, validator } = deps;
  const session = authenticate(access, 'session', deps.rate);
  return (router: AppRouter): void => {
    router.get('/me/key-backup', session, async (ctx) => {
      ctx.body = await backups.get(ctx.state.principal.memberId);
    });
    router.put('/me/key-backup', session, async (ctx) => {
      // The JSON around the blob is small; the schema bounds the blob itself.
      const req = validator.body<KeyBackupWrite>(WRITE, await readJson(ctx, MAX_KEY_BACKUP_CHARS + 1024));
      ctx.body = await backups.put(ctx.state.principal.memberId, req.blob, req.replaces);
    });
  };
}
