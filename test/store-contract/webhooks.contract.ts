// The WebhookStore contract (lib/webhooks/ports.ts): what every engine guarantees, run the same
// way against each (webhooks.test.ts).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { newId } from '../../lib/ids.ts';
import type { DeliveryOutcome, NewDelivery, WebhookEndpointRecord, WebhookStore } from '../../lib/webhooks/ports.ts';

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
    disabledBy: null,
    position: 1234567890123,
    failingSince: null,
    createdAt: 1_700_000_000_000,
    updatedAt: 1_700_000_000_000,
    ...over,
  };
}

const delivery = (position: number): NewDelivery => ({ eventId: newId('evt'), position, type: 'message.added' });

const outcome = (
  endpointId: string,
  d: Pick<DeliveryOutcome, 'eventId' | 'position'>,
  owner: string,
  over: Partial<DeliveryOutcome> = {},
): DeliveryOutcome => ({
  endpointId,
  eventId: d.eventId,
  position: d.position,
  owner,
  state: 'delivered',
  nextAttemptAt: 0,
  at: 5_000,
  status: 204,
  error: null,
  ms: 12,
  receiver: 'up',
  ...over,
});

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

    it("answers only within the endpoint's project", async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const other = newId('prj');
      expect(await b.get(other, e.id)).to.equal(null);
      expect(await b.list(other)).to.deep.equal([]);
      expect(await b.update(other, e.id, { ...e, url: 'https://evil.example/' })).to.equal(null);
      expect(await b.rotateSecret(other, e.id, randomBytes(61), 1, 1)).to.equal(null);
      expect(await b.setDisabled(other, e.id, { at: 1, by: 'owner', reason: 'x' }, 1)).to.equal(null);
      expect(await b.delete(other, e.id)).to.equal(false);
      expect(await a.get(e.projectId, e.id)).to.deep.equal(e);
    });

    it("lists a project's endpoints oldest first", async () => {
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
      const off = await b.setDisabled(
        e.projectId,
        e.id,
        { at: 1_700_000_002_000, by: 'dispatcher', reason: 'failing for 3 days' },
        1_700_000_002_000,
      );
      expect(off).to.deep.equal({
        ...e,
        disabledAt: 1_700_000_002_000,
        disabledBy: 'dispatcher',
        disabledReason: 'failing for 3 days',
        updatedAt: 1_700_000_002_000,
      });
      const edited = await a.update(e.projectId, e.id, {
        url: 'https://hooks.example.org/new',
        types: e.types,
        inboxes: e.inboxes,
        description: e.description,
        updatedAt: 1_700_000_003_000,
      });
      expect(edited).to.include({
        disabledAt: 1_700_000_002_000,
        disabledBy: 'dispatcher',
        disabledReason: 'failing for 3 days',
        url: 'https://hooks.example.org/new',
      });
      // Who disabled it is kept as said (staff's stays staff's until it is enabled).
      const staff = await a.setDisabled(e.projectId, e.id, { at: 1_700_000_003_500, by: 'staff', reason: 'abuse' }, 1_700_000_003_500);
      expect(staff).to.include({ disabledAt: 1_700_000_003_500, disabledBy: 'staff', disabledReason: 'abuse' });
      expect(await b.get(e.projectId, e.id)).to.deep.equal(staff);
      const on = await b.setDisabled(e.projectId, e.id, null, 1_700_000_004_000);
      expect(on).to.deep.equal({ ...edited, disabledAt: null, disabledBy: null, disabledReason: null, updatedAt: 1_700_000_004_000 });
    });

    it('rotates: the current secret becomes the previous one, in one write', async () => {
      const e = endpoint(newId('prj'));
      await a.create(e);
      const next = randomBytes(61);
      const rotated = await b.rotateSecret(e.projectId, e.id, next, 1_700_086_400_000, 1_700_000_000_500);
      expect(rotated).to.deep.equal({
        ...e,
        secretSealed: next,
        previousSecretSealed: e.secretSealed,
        previousExpiresAt: 1_700_086_400_000,
        updatedAt: 1_700_000_000_500,
      });
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

    describe('deliveries', () => {
      // Claims look at every endpoint's due rows: each test disables its endpoints when done, so
      // what it leaves pending is no other test's to claim.
      const made: WebhookEndpointRecord[] = [];
      async function fresh(position = 10): Promise<WebhookEndpointRecord> {
        const e = endpoint(newId('prj'), { position });
        await a.create(e);
        made.push(e);
        return e;
      }
      afterEach(async () => {
        for (const e of made.splice(0)) await a.setDisabled(e.projectId, e.id, { at: 1, by: 'owner', reason: 'test over' }, 1);
      });

      it('moves the position and adds deliveries in one step, only from where it stands', async () => {
        const e = await fresh(10);
        const batch = [delivery(11), delivery(13)];
        expect(await a.enqueue(e.id, 10, 13, batch, 1_000)).to.deep.equal([]);
        // Another process read from the same place: it loses, and writes nothing.
        expect(await b.enqueue(e.id, 10, 14, [delivery(14)], 1_000)).to.equal(null);
        expect((await b.get(e.projectId, e.id))!.position).to.equal(13);
        // How far it has been served is not a change to the endpoint.
        expect((await b.get(e.projectId, e.id))!.updatedAt).to.equal(e.updatedAt);
        const listed = await b.deliveries(e.projectId, e.id, null, 10);
        expect(listed.map((d) => d.position)).to.deep.equal([13, 11]);
        expect(listed[0]).to.deep.include({
          endpointId: e.id,
          projectId: e.projectId,
          state: 'pending',
          attempts: 0,
          nextAttemptAt: 1_000,
          lastStatus: null,
        });
        expect(await a.deliveries(newId('prj'), e.id, null, 10)).to.deep.equal([]);
        expect((await b.all()).some((x) => x.id === e.id)).to.equal(true);
        expect(await a.enqueue(newId('whk'), 0, 1, [delivery(1)], 1_000)).to.equal(null);
      });

      it('leases the first deliveries to the enqueuing process as they are made; a claim takes only the rest until the lease lapses', async () => {
        const e = await fresh(0);
        const batch = [1, 2, 3, 4].map(delivery);
        const leased = await a.enqueue(e.id, 0, 4, batch, 1_000, { owner: 'p1', until: 60_000, count: 3 });
        expect(leased!.map((d) => d.position)).to.deep.equal([1, 2, 3]);
        expect(leased![0]).to.deep.include({
          endpointId: e.id,
          projectId: e.projectId,
          eventId: batch[0]!.eventId,
          state: 'pending',
          attempts: 0,
          nextAttemptAt: 1_000,
        });
        const others = await b.claim({ owner: 'p2', now: 2_000, leaseUntil: 90_000, endpoints: [{ id: e.id, limit: 10 }] });
        expect(others.map((d) => d.position)).to.deep.equal([4]);
        // Held under the lease: its outcome is the owner's to write.
        expect(await b.finish([outcome(e.id, leased![0]!, 'p2')])).to.deep.equal(new Map());
        expect((await a.finish([outcome(e.id, leased![0]!, 'p1')])).get(e.id)).to.equal(null);
        // The lease lapses: the two left are anyone's.
        expect(
          (await b.claim({ owner: 'p2', now: 60_000, leaseUntil: 90_000, endpoints: [{ id: e.id, limit: 10 }] })).map((d) => d.position),
        ).to.deep.equal([2, 3]);
      });

      it('claims due deliveries of enabled endpoints once, at most so many per endpoint, and again once the lease lapses', async () => {
        const e = await fresh(0);
        const f = await fresh(0);
        const off = await fresh(0);
        await a.enqueue(e.id, 0, 5, [1, 2, 3, 4, 5].map(delivery), 1_000);
        await a.enqueue(f.id, 0, 2, [1, 2].map(delivery), 1_000);
        await a.enqueue(off.id, 0, 1, [delivery(1)], 1_000);
        await a.setDisabled(off.projectId, off.id, { at: 900, by: 'owner', reason: 'off' }, 900);
        const all3 = (limit: number) => [e, f, off].map((x) => ({ id: x.id, limit }));
        // Not yet due.
        expect(await a.claim({ owner: 'p1', now: 999, leaseUntil: 60_000, endpoints: all3(10) })).to.deep.equal([]);
        const [first, second] = await Promise.all([
          a.claim({
            owner: 'p1',
            now: 2_000,
            leaseUntil: 60_000,
            endpoints: [
              { id: e.id, limit: 3 },
              { id: f.id, limit: 1 },
              { id: off.id, limit: 3 },
            ],
          }),
          b.claim({ owner: 'p2', now: 2_000, leaseUntil: 60_000, endpoints: all3(3) }),
        ]);
        const all = [...first, ...second];
        const keys = all.map((d) => `${d.endpointId} ${d.position}`);
        expect(new Set(keys).size).to.equal(keys.length);
        expect(all.some((d) => d.endpointId === off.id)).to.equal(false);
        const ofE = (list: typeof all) => list.filter((d) => d.endpointId === e.id).length;
        expect(ofE(first)).to.be.at.most(3);
        expect(ofE(second)).to.be.at.most(3);
        expect(first.filter((d) => d.endpointId === f.id).length).to.be.at.most(1);
        expect(ofE(all)).to.equal(5);
        // Oldest due first, within an endpoint.
        const mine = first.filter((d) => d.endpointId === e.id).map((d) => d.position);
        expect(mine).to.deep.equal([...mine].sort((x, y) => x - y));
        // Held: nothing left to claim until the leases lapse.
        expect(await a.claim({ owner: 'p3', now: 59_999, leaseUntil: 90_000, endpoints: all3(10) })).to.deep.equal([]);
        const again = await a.claim({ owner: 'p3', now: 60_000, leaseUntil: 90_000, endpoints: all3(10) });
        expect(again.length).to.equal(7);
      });

      it('writes an outcome only under its lease, and keeps whether the receiver has been failing since when', async () => {
        const e = await fresh(0);
        await a.enqueue(e.id, 0, 3, [1, 2, 3].map(delivery), 1_000);
        const claimed = await a.claim({ owner: 'p1', now: 1_000, leaseUntil: 60_000, endpoints: [{ id: e.id, limit: 10 }] });
        const [d1, d2, d3] = claimed.filter((d) => d.endpointId === e.id);
        // Not the owner: nothing written.
        expect(await b.finish([outcome(e.id, d1!, 'p2')])).to.deep.equal(new Map());
        const down = await b.finish([
          outcome(e.id, d1!, 'p1', { state: 'pending', nextAttemptAt: 6_000, at: 5_000, status: 503, error: 'HTTP 503', receiver: 'down' }),
        ]);
        expect(down.get(e.id)).to.equal(5_000);
        const stillDown = await a.finish([
          outcome(e.id, d2!, 'p1', {
            state: 'pending',
            nextAttemptAt: 8_000,
            at: 7_000,
            status: null,
            error: 'timeout',
            ms: null,
            receiver: 'down',
          }),
        ]);
        expect(stillDown.get(e.id)).to.equal(5_000);
        expect((await a.get(e.projectId, e.id))!.failingSince).to.equal(5_000);
        // Never called (the token may no longer read it): not a word about the receiver.
        expect(
          await a.finish([outcome(e.id, d3!, 'p1', { state: 'failed', status: null, error: 'not readable', ms: null, receiver: null })]),
        ).to.deep.equal(new Map());
        const [r1] = await b.deliveries(e.projectId, e.id, 2, 10);
        expect(r1).to.deep.include({
          state: 'pending',
          attempts: 1,
          nextAttemptAt: 6_000,
          lastAttemptAt: 5_000,
          lastStatus: 503,
          lastError: 'HTTP 503',
          lastMs: 12,
        });
        const r3 = (await b.deliveries(e.projectId, e.id, null, 1))[0]!;
        expect(r3).to.deep.include({ state: 'failed', attempts: 0, lastAttemptAt: null });
        const retried = await a.claim({ owner: 'p1', now: 6_000, leaseUntil: 60_000, endpoints: [{ id: e.id, limit: 10 }] });
        expect(retried.map((d) => d.eventId)).to.deep.equal([d1!.eventId]);
        const up = await a.finish([outcome(e.id, d1!, 'p1', { at: 9_000 })]);
        expect(up.get(e.id)).to.equal(null);
        expect((await b.deliveries(e.projectId, e.id, 2, 1))[0]).to.deep.include({
          state: 'delivered',
          attempts: 2,
          lastStatus: 204,
          lastError: null,
        });
      });

      it('in one batch of outcomes, a success clears the failing before it and a failure after it starts it again', async () => {
        const e = await fresh(0);
        const f = await fresh(0);
        await a.enqueue(e.id, 0, 4, [1, 2, 3, 4].map(delivery), 1_000);
        await a.enqueue(f.id, 0, 2, [1, 2].map(delivery), 1_000);
        const got = await a.claim({
          owner: 'p1',
          now: 1_000,
          leaseUntil: 60_000,
          endpoints: [
            { id: e.id, limit: 10 },
            { id: f.id, limit: 10 },
          ],
        });
        const [e1, e2, e3, e4] = got.filter((d) => d.endpointId === e.id);
        const [f1, f2] = got.filter((d) => d.endpointId === f.id);
        const down = (at: number) => ({
          state: 'pending' as const,
          nextAttemptAt: 90_000,
          at,
          status: 503,
          error: 'HTTP 503',
          receiver: 'down' as const,
        });
        await a.finish([outcome(e.id, e1!, 'p1', down(3_000)), outcome(f.id, f1!, 'p1', down(3_000))]);
        const after = await b.finish([
          outcome(e.id, e2!, 'p1', down(5_000)),
          outcome(e.id, e3!, 'p1', { at: 6_000 }),
          outcome(e.id, e4!, 'p1', down(7_000)),
          outcome(f.id, f2!, 'p1', down(8_000)),
        ]);
        expect(after.get(e.id)).to.equal(7_000);
        expect(after.get(f.id)).to.equal(3_000);
      });

      it('a rewind sends again: the deliveries after it are made pending afresh', async () => {
        const e = await fresh(0);
        const batch = [1, 2].map(delivery);
        await a.enqueue(e.id, 0, 2, batch, 1_000);
        const claimed = (await a.claim({ owner: 'p1', now: 1_000, leaseUntil: 60_000, endpoints: [{ id: e.id, limit: 10 }] })).filter(
          (d) => d.endpointId === e.id,
        );
        await a.finish(claimed.map((d) => outcome(e.id, d, 'p1')));
        expect(await b.rewind(newId('prj'), e.id, 0, 2_000)).to.equal(null);
        const back = await b.rewind(e.projectId, e.id, 1, 2_000);
        expect(back!.position).to.equal(1);
        // A rewind past where it stands changes nothing.
        expect((await b.rewind(e.projectId, e.id, 5, 2_000))!.position).to.equal(1);
        expect(await a.enqueue(e.id, 1, 2, [batch[1]!], 3_000)).to.deep.equal([]);
        const listed = await a.deliveries(e.projectId, e.id, null, 10);
        expect(listed.map((d) => [d.position, d.state, d.attempts])).to.deep.equal([
          [2, 'pending', 0],
          [1, 'delivered', 1],
        ]);
        expect(listed[0]!.nextAttemptAt).to.equal(3_000);
      });

      it('says when the longest-due pending delivery of an enabled endpoint was due', async () => {
        // Other tests' endpoints are disabled once they end: only this test's count.
        expect(await a.oldestDue()).to.equal(null);
        const e = await fresh(0);
        const off = await fresh(0);
        await a.enqueue(off.id, 0, 1, [delivery(1)], 500);
        await a.setDisabled(off.projectId, off.id, { at: 600, by: 'owner', reason: 'off' }, 600);
        await a.enqueue(e.id, 0, 2, [delivery(1)], 1_000);
        await a.enqueue(e.id, 2, 3, [delivery(3)], 3_000);
        expect(await b.oldestDue()).to.equal(1_000);
        const [d1] = (await a.claim({ owner: 'p1', now: 1_000, leaseUntil: 60_000, endpoints: [{ id: e.id, limit: 1 }] })).filter(
          (d) => d.endpointId === e.id,
        );
        await a.finish([outcome(e.id, d1!, 'p1', { at: 2_000 })]);
        expect(await b.oldestDue()).to.equal(3_000);
      });

      it('forgets settled deliveries past the cutoff, and all of an endpoint deleted', async () => {
        const e = await fresh(0);
        await a.enqueue(e.id, 0, 2, [1, 2].map(delivery), 1_000);
        const [d1] = (await a.claim({ owner: 'p1', now: 1_000, leaseUntil: 60_000, endpoints: [{ id: e.id, limit: 10 }] })).filter(
          (d) => d.endpointId === e.id,
        );
        await a.finish([outcome(e.id, d1!, 'p1', { at: 4_000 })]);
        expect(await b.purgeDeliveries(4_001)).to.be.at.least(1);
        expect((await a.deliveries(e.projectId, e.id, null, 10)).map((d) => d.position)).to.deep.equal([2]);
        expect(await a.delete(e.projectId, e.id)).to.equal(true);
        expect(await a.deliveries(e.projectId, e.id, null, 10)).to.deep.equal([]);
        made.splice(made.indexOf(e), 1);
      });
    });
  });
}
