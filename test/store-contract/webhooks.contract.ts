// The WebhookStore contract (lib/webhooks/store.ts): what every engine guarantees, run the same
// way against each (webhooks.test.ts).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { newId } from '../../lib/ids.ts';
import type { WebhookEndpointRecord, WebhookStore } from '../../lib/webhooks/store.ts';

export interface WebhookEngine {
  /** Another process's store on the engine's database. */
  newStore(): WebhookStore;
  close(): Promise<void>;
}

function endpoint(projectId: string, over: Partial<WebhookEndpointRecord> = {}): WebhookEndpointRecord {
  return {
    id: newId('whk'),
    projectId,
    tokenId: newId('tok'),
    url: 'https://hooks.example.org/in',
    types: ['message.*', 'ext.order.shipped'],
    inboxes: [newId('ibx')],
    description: 'orders',
    secretSealed: randomBytes(61),
    previousSecretSealed: null,
    previousExpiresAt: null,
    disabledAt: null,
    disabledReason: null,
    position: 1234567890123,
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_000,
    ...over,
  };
}

export function webhooksContract(engineName: string, open: () => Promise<WebhookEngine>): void {
  describe(`WebhookStore contract: ${engineName}`, function () {
    let engine: WebhookEngine;
    let a: WebhookStore;
    let b: WebhookStore;

    before(async () => {
      engine = await open();
      a = engine.newStore();
      b = engine.newStore();
    });
    after(async () => {
      await engine?.close();
    });

    it('keeps an endpoint as created, every field, and another process reads it', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      expect(await b.get(e.projectId, e.id)).to.deep.equal(e);
      const nulls = endpoint(e.projectId, { types: null, inboxes: null, description: null, position: 0 });
      await a.create(nulls);
      expect(await b.get(e.projectId, nulls.id)).to.deep.equal(nulls);
    });

    it('answers only within the endpoint\'s project', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const other = newId('prj');
      expect(await b.get(other, e.id)).to.equal(null);
      expect(await b.list(other)).to.deep.equal([]);
      expect(await b.update(other, e.id, { ...e, url: 'https://evil.example/' })).to.equal(null);
      expect(await b.rotateSecret(other, e.id, randomBytes(61), 1, 1)).to.equal(null);
      expect(await b.setDisabled(other, e.id, 1, 'x', 1)).to.equal(null);
      expect(await b.delete(other, e.id)).to.equal(false);
      expect(await a.get(e.projectId, e.id)).to.deep.equal(e);
    });

    it('lists a project\'s endpoints oldest first', async () => {
      const project = newId('prj');
      const first = endpoint(project);
      const second = endpoint(project);
      await a.create(second.id > first.id ? first : second);
      await a.create(second.id > first.id ? second : first);
      expect((await b.list(project)).map((e) => e.id)).to.deep.equal([first.id, second.id].sort());
    });

    it('updates what may change and nothing else', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const change = {
        url: 'https://hooks.example.org/other',
        types: null,
        inboxes: [newId('ibx'), newId('ibx')],
        description: null,
        updatedAt: 1_700_000_001_000,
      };
      const updated = await b.update(e.projectId, e.id, change);
      expect(updated).to.deep.equal({ ...e, ...change });
      expect(await a.get(e.projectId, e.id)).to.deep.equal(updated);
    });

    it('disables and enables, and an edit leaves that as it is', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const off = await b.setDisabled(e.projectId, e.id, 1_700_000_002_000, 'failing for 3 days', 1_700_000_002_000);
      expect(off).to.deep.equal({ ...e, disabledAt: 1_700_000_002_000, disabledReason: 'failing for 3 days', updatedAt: 1_700_000_002_000 });
      const edited = await a.update(e.projectId, e.id, { url: 'https://hooks.example.org/new', types: e.types, inboxes: e.inboxes, description: e.description, updatedAt: 1_700_000_003_000 });
      expect(edited).to.include({ disabledAt: 1_700_000_002_000, disabledReason: 'failing for 3 days', url: 'https://hooks.example.org/new' });
      const on = await b.setDisabled(e.projectId, e.id, null, null, 1_700_000_004_000);
      expect(on).to.deep.equal({ ...edited, disabledAt: null, disabledReason: null, updatedAt: 1_700_000_004_000 });
    });

    it('rotates: the current secret becomes the previous one, in one write', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const next = randomBytes(61);
      const rotated = await b.rotateSecret(e.projectId, e.id, next, 1_700_086_400_000, 1_700_000_000_500);
      expect(rotated).to.deep.equal({ ...e, secretSealed: next, previousSecretSealed: e.secretSealed, previousExpiresAt: 1_700_086_400_000, updatedAt: 1_700_000_000_500 });
      const again = randomBytes(61);
      const twice = await a.rotateSecret(e.projectId, e.id, again, 1_700_086_500_000, 1_700_000_100_000);
      expect(twice!.secretSealed).to.deep.equal(again);
      expect(twice!.previousSecretSealed).to.deep.equal(next);
    });

    it('deletes once', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      expect(await b.delete(e.projectId, e.id)).to.equal(true);
      expect(await a.get(e.projectId, e.id)).to.equal(null);
      expect(await a.delete(e.projectId, e.id)).to.equal(false);
    });

    it('refuses a second endpoint with the same id', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      let failed = false;
      try {
        await b.create(endpoint(e.projectId, { id: e.id }));
      } catch {
        failed = true;
      }
      expect(failed).to.equal(true);
    });
  });
}
