// The identities store contract (lib/send/identities.ts): what every engine guarantees, run the
// same way against each (identities.test.ts).
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import type { DirectoryStore } from '../../lib/directory/ports.ts';
import type { Inbox } from '../../lib/directory/types.ts';
import { newId } from '../../lib/ids.ts';
import { Identities } from '../../lib/send/identities.ts';
import type { IdentityStore } from '../../lib/send/ports.ts';

export interface IdentityEngine {
  directory: DirectoryStore;
  identities: IdentityStore;
  close(): Promise<void>;
}

async function newInbox(d: DirectoryStore): Promise<Inbox> {
  const tag = randomUUID().slice(0, 8);
  const projectId = newId('prj');
  await d.createProject({ id: projectId, name: `identities ${tag}`, createdAt: 1 });
  const inbox: Inbox = {
    id: newId('ibx'),
    projectId,
    imapUser: `user-${tag}`,
    addresses: [`main-${tag}@example.test`, `Alias-${tag}@example.test`],
    mode: 'compatible',
    createdAt: 1,
  };
  await d.createInbox(inbox);
  return inbox;
}

export function identitiesContract(name: string, open: () => Promise<IdentityEngine>): void {
  describe(`identities store contract: ${name}`, () => {
    let e: IdentityEngine;
    before(async () => {
      e = await open();
    });
    after(() => e.close());

    it('keeps one identity per address of an inbox, replaced by the next put, none for an address never set', async () => {
      const inbox = await newInbox(e.directory);
      const other = await newInbox(e.directory);
      const ids = new Identities(e.identities, () => 1000);
      const [main, alias] = inbox.addresses.map((a) => a.toLowerCase()) as [string, string];
      expect(await ids.list(inbox)).to.deep.equal([
        { address: main, displayName: null, signatureText: null, signatureHtml: null, updatedAt: null },
        { address: alias, displayName: null, signatureText: null, signatureHtml: null, updatedAt: null },
      ]);
      await ids.set(inbox, 'owner', inbox.addresses[1]!, { displayName: 'Zoë Ångström', signatureText: '-- \nZoë', signatureHtml: null });
      await e.identities.put(inbox.id, {
        address: main,
        displayName: 'First',
        signatureText: null,
        signatureHtml: '<p>x</p>',
        updatedAt: 5,
      });
      await e.identities.put(inbox.id, { address: main, displayName: 'Second', signatureText: 'sig', signatureHtml: null, updatedAt: 6 });
      expect(await ids.list(inbox)).to.deep.equal([
        { address: main, displayName: 'Second', signatureText: 'sig', signatureHtml: null, updatedAt: 6 },
        { address: alias, displayName: 'Zoë Ångström', signatureText: '-- \nZoë', signatureHtml: null, updatedAt: 1000 },
      ]);
      // Another inbox's identities are its own.
      expect((await e.identities.list(other.id)).length).to.equal(0);
    });

    it('refuses an address that is not the inbox’s, and a role that is not owner', async () => {
      const inbox = await newInbox(e.directory);
      const ids = new Identities(e.identities);
      const none = { displayName: 'x', signatureText: null, signatureHtml: null };
      await expectKind(ids.set(inbox, 'owner', 'someone@else.test', none), 'not-found');
      await expectKind(ids.set(inbox, 'member', inbox.addresses[0]!, none), 'forbidden');
      expect(await e.identities.list(inbox.id)).to.deep.equal([]);
    });

    it('goes with its inbox', async () => {
      const inbox = await newInbox(e.directory);
      await new Identities(e.identities).set(inbox, 'owner', inbox.addresses[0]!, {
        displayName: 'Gone',
        signatureText: null,
        signatureHtml: null,
      });
      expect(await e.directory.deleteInbox(inbox.id, Date.now())).to.equal(true);
      expect(await e.identities.list(inbox.id)).to.deep.equal([]);
    });
  });
}

async function expectKind(p: Promise<unknown>, kind: string): Promise<void> {
  try {
    await p;
  } catch (err) {
    expect((err as { kind?: string }).kind).to.equal(kind);
    return;
  }
  throw new Error(`expected a ${kind} error`);
}
