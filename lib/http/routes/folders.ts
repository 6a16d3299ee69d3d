// Creating, renaming and deleting labels, and deleting a message forever (docs/organize.md,
// "Folders", "Delete forever"): extensions of version 1.
import type { Access, AccessRule, Principal } from '../../auth/access.ts';
import type { LabelName } from '../../../schemas/wire.ts';
import type { MailFolders } from '../../mail/folders.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppRouter } from '../context.ts';
import type { Validator } from '../validate.ts';

const LABEL_NAME = 'https://postern.dev/schemas/mail.json#/$defs/LabelName';
const LABEL_DELETE = 'https://postern.dev/schemas/mail.json#/$defs/LabelDeleteQuery';
const MESSAGE_DESTROY = 'https://postern.dev/schemas/mail.json#/$defs/MessageDestroyQuery';
/** Labels are organizing: messages:write, as filing messages is (docs/organize.md, "Who may"). */
const ORGANIZE: AccessRule = { token: 'messages:write', session: true };
/** What cannot be undone needs a scope no other implies (docs/organize.md, "Delete forever"). */
export const DESTROY: AccessRule = { token: 'messages:destroy', session: true };

export function folderRoutes(access: Access, folders: MailFolders, validator: Validator) {
  /** The inbox, if the caller may destroy mail in it: the scope (tokens) and the role (everyone). */
  const destroying = async (p: Principal, inboxId: string) => {
    access.authorize(p, DESTROY);
    return (await access.inboxAccess(p, inboxId, 'messages:destroy')).inbox;
  };
  return (router: AppRouter): void => {
    router.post('/inboxes/:inbox/labels', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const body = validator.body<LabelName>(LABEL_NAME, await readJson(ctx));
      ctx.status = 201;
      ctx.body = await folders.create(inbox, body.name, ctx.state.principal.actor);
    });

    router.patch('/inboxes/:inbox/labels/:label', allow(access, ORGANIZE), async (ctx) => {
      const { inbox } = await access.inboxAccess(ctx.state.principal, ctx.params.inbox!, 'messages:write');
      const body = validator.body<LabelName>(LABEL_NAME, await readJson(ctx));
      ctx.body = await folders.rename(inbox, ctx.params.label!, body.name, ctx.state.principal.actor);
    });

    router.delete('/inboxes/:inbox/labels/:label', allow(access, ORGANIZE), async (ctx) => {
      const p = ctx.state.principal;
      const { inbox } = await access.inboxAccess(p, ctx.params.inbox!, 'messages:write');
      const query = validator.query<{ moveTo?: string; removeMessages?: boolean }>(LABEL_DELETE, ctx.query);
      // Letting a label's mail go with it destroys that mail: the destroy rule as well.
      if (query.removeMessages) await destroying(p, inbox.id);
      await folders.remove(inbox, ctx.params.label!, query, p.actor);
      ctx.status = 204;
    });

    router.delete('/inboxes/:inbox/messages/:msg', allow(access, DESTROY), async (ctx) => {
      const p = ctx.state.principal;
      const inbox = await destroying(p, ctx.params.inbox!);
      const query = validator.query<{ confirm?: boolean }>(MESSAGE_DESTROY, ctx.query);
      await folders.destroy(inbox, ctx.params.msg!, query.confirm === true, p.actor);
      ctx.status = 204;
    });
  };
}
