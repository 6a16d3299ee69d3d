// The OutboxStore contract (lib/send/ports.ts): what every engine guarantees, run the same way
// against each (outbox.test.ts). Stores opened by one engine share its database as processes
// sharing the store do; each test works in inboxes of its own and never assumes an empty table.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { OutboxEntry, OutboxStore, Reservation } from '../../lib/send/ports.ts';
import { newId } from '../../lib/ids.ts';

export interface OutboxEngine {
  /** Another store on the engine's database: another process, as far as its rows tell. */
  newStore(): OutboxStore;
  /** The owner of entry `id` now names a process that no longer runs (a pid with no /proc entry). */
  killOwnerOf(id: string): Promise<void>;
  /** Entry `id` as rows written before owners were recorded. */
  unown(id: string): Promise<void>;
  close(): Promise<void>;
}

const HOUR = 3_600_000;
const RATE = { since: 0, max: 1_000_000 };

function entry(inboxId: string, at = Date.now(), more: Partial<OutboxEntry> = {}): OutboxEntry {
  return {
    id: randomBytes(16).toString('hex'),
    inboxId,
    projectId: 'prj_contract',
    actor: 'tok_contract',
    draftId: null,
    fingerprint: null,
    state: 'relaying',
    outcomeUnknown: false,
    settledBy: null,
    mailFrom: 'a@x.test',
    recipients: 1,
    messageId: `<${randomBytes(6).toString('hex')}@x.test>`,
    size: 10,
    attempts: 0,
    claims: 0,
    nextAttemptAt: at,
    sendAt: null,
    holdUntil: null,
    failure: null,
    createdAt: at,
    ...more,
  };
}

const copyOf = (e: OutboxEntry) => [Buffer.from(`copy of ${e.id}`)];

export function outboxContract(engineName: string, open: () => Promise<OutboxEngine>): void {
  describe(`OutboxStore contract: ${engineName}`, function () {
    let engine: OutboxEngine;
    let store: OutboxStore;

    before(async () => {
      engine = await open();
      store = engine.newStore();
    });
    after(async () => {
      await engine?.close();
    });

    it('reserves an entry in state relaying with its copy, joined from its pieces across parts', async () => {
      const inbox = newId('ibx');
      const e = entry(inbox, Date.now(), { draftId: 'drf_1', fingerprint: 'f1' });
      // 2.5 parts of 1 MB, in pieces that do not fall on part edges.
      const big = randomBytes(2.5 * 1024 * 1024);
      expect(await store.reserve(e, [big.subarray(0, 7), big.subarray(7, 1_500_000), big.subarray(1_500_000)], RATE)).to.deep.equal({
        ok: true,
      });
      expect(await store.get(e.id)).to.deep.equal(e);
      expect(await store.byDraft(inbox, 'drf_1')).to.deep.equal(e);
      expect((await store.copy(e.id))!.equals(big)).to.equal(true);
      const empty = entry(inbox);
      await store.reserve(empty, [], RATE);
      expect(await store.copy(empty.id)).to.deep.equal(Buffer.alloc(0));
      expect(await store.get(randomBytes(16).toString('hex'))).to.equal(null);
      expect(await store.copy(randomBytes(16).toString('hex'))).to.equal(null);
    });

    it('takes a draft once per inbox: a second reservation gets the first entry; another inbox, or after a drop, may send it', async () => {
      const inbox = newId('ibx');
      const first = entry(inbox, Date.now(), { draftId: 'drf_x' });
      expect(await store.reserve(first, copyOf(first), RATE)).to.deep.equal({ ok: true });
      const again = entry(inbox, Date.now(), { draftId: 'drf_x' });
      expect(await store.reserve(again, copyOf(again), RATE)).to.deep.equal({ ok: false, reason: 'draft', existing: first });
      expect(await store.get(again.id)).to.equal(null);
      const elsewhere = entry(newId('ibx'), Date.now(), { draftId: 'drf_x' });
      expect(await store.reserve(elsewhere, copyOf(elsewhere), RATE)).to.deep.equal({ ok: true });
      // Sends without a draft never clash.
      for (let i = 0; i < 2; i++) expect(await store.reserve(entry(inbox), [], RATE)).to.deep.equal({ ok: true });
      await store.drop(first.id);
      expect(await store.get(first.id)).to.equal(null);
      expect(await store.copy(first.id)).to.equal(null);
      expect(await store.reserve(again, copyOf(again), RATE)).to.deep.equal({ ok: true });
    });

    it('concurrent reservations of one draft from several processes: exactly one wins, the others get its entry', async () => {
      const stores = Array.from({ length: 8 }, () => engine.newStore());
      // Each has written once already (its process registered, its connection open): they start together.
      await Promise.all(stores.map((s) => s.reserve(entry(newId('ibx')), [], RATE)));
      for (let round = 0; round < 5; round++) {
        const inbox = newId('ibx');
        const entries = stores.map(() => entry(inbox, Date.now(), { draftId: 'drf_race' }));
        const results = await Promise.all(stores.map((s, i) => s.reserve(entries[i]!, copyOf(entries[i]!), RATE)));
        const won = results.flatMap((r, i) => (r.ok ? [entries[i]!] : []));
        expect(won).to.have.length(1);
        for (const r of results.filter((r) => !r.ok)) expect(r).to.deep.equal({ ok: false, reason: 'draft', existing: won[0] });
        expect(await store.byDraft(inbox, 'drf_race')).to.deep.equal(won[0]);
      }
    });

    it('concurrent reservations of one inbox from several processes never exceed the rate', async () => {
      const inbox = newId('ibx');
      const now = Date.now();
      const stores = Array.from({ length: 10 }, () => engine.newStore());
      const results = await Promise.all(stores.map((s) => s.reserve(entry(inbox, now), [], { since: now - HOUR, max: 3 })));
      expect(results.filter((r) => r.ok)).to.have.length(3);
      for (const r of results.filter((r) => !r.ok)) expect(r).to.deep.equal({ ok: false, reason: 'rate', sent: 3 });
      expect(await store.sentSince(inbox, now - HOUR, 100)).to.equal(3);
    });

    describe('the sending rate', () => {
      /** A moment 20 s into a minute, so sends land on either side of a minute's edge. */
      const T = Math.floor(Date.now() / 60_000) * 60_000 + 20_000;
      const reserveAt = (inbox: string, at: number, max: number, now = at): Promise<Reservation> =>
        store.reserve(entry(inbox, at), [], { since: now - HOUR, max });

      it('counts exactly the sends of the last hour, to the millisecond, across minute edges', async () => {
        const inbox = newId('ibx');
        const start = T + 90_000 - HOUR; // the window of a send at T + 90 s starts here, mid-minute
        const times = [T - 61 * 60_000, start - 2, start - 1, start, start + 1, start + 2, T, T + 1, T + 60_000, T + 61_000, T + 89_000];
        for (const at of times) expect(await reserveAt(inbox, at, 1000)).to.deep.equal({ ok: true });
        // In the window of T + 90 s: start, start + 1, start + 2 and the 5 after: 8.
        expect(await store.sentSince(inbox, T + 90_000 - HOUR, 1000)).to.equal(8);
        expect(await reserveAt(inbox, T + 90_000, 8)).to.deep.equal({ ok: false, reason: 'rate', sent: 8 });
        expect(await reserveAt(inbox, T + 90_000, 9)).to.deep.equal({ ok: true });
        // One millisecond later the send at `start` has left the window: 8 again, with the one just made.
        expect(await reserveAt(inbox, T + 90_001, 9)).to.deep.equal({ ok: true });
        expect(await reserveAt(inbox, T + 90_001, 10)).to.deep.equal({ ok: true });
        expect(await reserveAt(inbox, T + 90_001, 10)).to.deep.equal({ ok: false, reason: 'rate', sent: 10 });
      });

      it('counts each inbox apart, and a dropped send for nothing', async () => {
        const inbox = newId('ibx');
        const first = entry(inbox, T);
        expect(await store.reserve(first, [], { since: T - HOUR, max: 2 })).to.deep.equal({ ok: true });
        expect(await reserveAt(inbox, T + 1, 2)).to.deep.equal({ ok: true });
        expect(await reserveAt(inbox, T + 2, 2)).to.deep.equal({ ok: false, reason: 'rate', sent: 2 });
        expect(await reserveAt(newId('ibx'), T + 2, 1)).to.deep.equal({ ok: true });
        await store.drop(first.id);
        expect(await store.sentSince(inbox, T - HOUR, 10)).to.equal(1);
        expect(await reserveAt(inbox, T + 3, 2)).to.deep.equal({ ok: true });
      });

      it('keeps counting a send once relayed and filed', async () => {
        const inbox = newId('ibx');
        const e = entry(inbox, T);
        await store.reserve(e, [], { since: T - HOUR, max: 1 });
        await store.sending(e.id);
        await store.relayed(e.id, T);
        // No longer droppable: the relay took it.
        await store.drop(e.id);
        await store.filed([e.id], T + 1);
        expect((await store.get(e.id))?.state).to.equal('filed');
        expect(await reserveAt(inbox, T + 2, 1)).to.deep.equal({ ok: false, reason: 'rate', sent: 1 });
      });
    });

    it('files a copy: due once relayed, one claimer per attempt, retries counted, filed drops the copy and keeps the entry', async () => {
      const inbox = newId('ibx');
      const now = Date.now();
      const e = entry(inbox, now);
      await store.reserve(e, copyOf(e), RATE);
      expect((await store.due(now + 10, 1000)).map((d) => d.id)).to.not.include(e.id);
      await store.sending(e.id);
      expect((await store.get(e.id))?.state).to.equal('sending');
      await store.relayed(e.id, now + 5);
      expect(await store.get(e.id)).to.deep.include({ state: 'filing', nextAttemptAt: now + 5, outcomeUnknown: false });
      expect((await store.due(now + 4, 1000)).map((d) => d.id)).to.not.include(e.id);
      expect((await store.due(now + 5, 1000)).map((d) => d.id)).to.include(e.id);
      // Two processes claim the same attempt: one gets it.
      const other = engine.newStore();
      const claims = await Promise.all([store.claim(e.id, now + 5, now + 60_000), other.claim(e.id, now + 5, now + 60_000)]);
      expect(claims.filter(Boolean)).to.have.length(1);
      expect(await store.get(e.id)).to.deep.include({ claims: 1, nextAttemptAt: now + 60_000 });
      expect(await store.claim(e.id, now + 5, now + 70_000)).to.equal(false);
      await store.retryAt(e.id, now + 30);
      expect(await store.get(e.id)).to.deep.include({ attempts: 1, nextAttemptAt: now + 30 });
      expect(await store.claim(e.id, now + 30, now + 60_000)).to.equal(true);
      expect(await store.get(e.id)).to.deep.include({ claims: 2 });
      expect(await store.copy(e.id)).to.deep.equal(copyOf(e)[0]);
      await store.filed([e.id], now + 40);
      expect(await store.copy(e.id)).to.equal(null);
      expect(await store.get(e.id)).to.deep.include({ state: 'filed', attempts: 1, claims: 2 });
      expect((await store.due(now + 100_000, 1000)).map((d) => d.id)).to.not.include(e.id);
      // A filed entry is never relayed again, nor retried.
      await store.retryAt(e.id, now + 50);
      expect(await store.get(e.id)).to.deep.include({ state: 'filed', attempts: 1 });
    });

    it("lists an inbox's backlog: its entries not filed yet, in every state, oldest first, up to the limit", async () => {
      const inbox = newId('ibx');
      const now = Date.now();
      const [relaying, sending, filing, unknown, filed] = [4, 3, 2, 1, 0].map((age) => entry(inbox, now - age * 1000)) as [
        OutboxEntry,
        OutboxEntry,
        OutboxEntry,
        OutboxEntry,
        OutboxEntry,
      ];
      for (const e of [filed, unknown, filing, sending, relaying]) await store.reserve(e, copyOf(e), RATE);
      await store.reserve(entry(newId('ibx'), now - 5000), [], RATE);
      await store.sending(sending.id);
      await store.relayed(filing.id, now);
      await store.sending(unknown.id);
      await store.outcomeUnknown(unknown.id, now);
      await store.relayed(filed.id, now);
      await store.filed([filed.id], now);
      const ids = (list: OutboxEntry[]) => list.map((e) => e.id);
      expect(ids(await store.backlog(inbox, 100))).to.deep.equal([relaying.id, sending.id, filing.id, unknown.id]);
      expect(await store.backlog(inbox, 100)).to.deep.equal(
        await Promise.all([relaying, sending, filing, unknown].map(async (e) => store.get(e.id))),
      );
      expect(ids(await store.backlog(inbox, 2))).to.deep.equal([relaying.id, sending.id]);
      expect(await store.backlog(newId('ibx'), 100)).to.deep.equal([]);
    });

    it('answers a lost reply as outcome unknown (kept with its copy, never filed, not droppable), and a refusal after the bytes by dropping the send', async () => {
      const inbox = newId('ibx');
      const [a, b] = [entry(inbox, Date.now(), { draftId: 'drf_a' }), entry(inbox)];
      for (const e of [a, b]) {
        await store.reserve(e, copyOf(e), RATE);
        await store.sending(e.id);
      }
      await store.outcomeUnknown(a.id, 5);
      await store.drop(b.id);
      expect(await store.get(a.id)).to.deep.include({ state: 'unknown', outcomeUnknown: true, settledBy: null });
      expect(await store.get(b.id)).to.equal(null);
      await store.drop(a.id);
      expect(await store.byDraft(inbox, 'drf_a')).to.deep.include({ id: a.id, outcomeUnknown: true });
      expect((await store.due(Date.now() + 60_000, 100_000)).map((d) => d.id)).to.not.include(a.id);
      expect((await store.list(inbox, true, 10)).map((d) => d.id)).to.include(a.id);
      expect(await store.copy(a.id)).to.deep.equal(Buffer.concat(copyOf(a)));
    });

    it('settles an outcome-unknown send on evidence: filing, its copy due now, once; nothing else is settled', async () => {
      const inbox = newId('ibx');
      const [a, b] = [entry(inbox, Date.now(), { draftId: 'drf_s' }), entry(inbox)];
      for (const e of [a, b]) await store.reserve(e, copyOf(e), RATE);
      await store.sending(a.id);
      await store.outcomeUnknown(a.id, 5);
      const now = Date.now();
      expect(await store.settle(b.id, 'dsn', now), 'a send whose outcome is known').to.equal(null);
      expect(await store.settle(a.id, 'dsn', now)).to.deep.include({ id: a.id, state: 'filing', outcomeUnknown: false, settledBy: 'dsn' });
      expect(await store.settle(a.id, 'dsn', now + 1), 'settled already').to.equal(null);
      expect(await store.byDraft(inbox, 'drf_s')).to.deep.include({
        state: 'filing',
        outcomeUnknown: false,
        settledBy: 'dsn',
        nextAttemptAt: now,
      });
      expect((await store.due(now, 100_000)).map((d) => d.id)).to.include(a.id);
      expect(await store.copy(a.id)).to.deep.equal(Buffer.concat(copyOf(a)));
    });

    it('settles what a dead process left: drops its unsent reservations, keeps the sent as outcome unknown, takes back its claims at once', async () => {
      const inbox = newId('ibx');
      const dead = engine.newStore();
      const live = engine.newStore();
      const now = Date.now();
      // Another live process's rows, which must stay as they are.
      const bystander = engine.newStore();
      const kept = entry(inbox, now);
      await bystander.reserve(kept, [], RATE);

      const [e1, e2, e3, e4] = [1, 2, 3, 4].map(() => entry(inbox, now, { draftId: randomBytes(4).toString('hex') })) as [
        OutboxEntry,
        OutboxEntry,
        OutboxEntry,
        OutboxEntry,
      ];
      for (const e of [e1, e2, e3, e4]) await dead.reserve(e, copyOf(e), { since: now - HOUR, max: 100 });
      // 1 its end of data never written; 2 its end of data written, reply pending; 3 accepted, its copy claimed for 2 minutes; 4 accepted, due.
      await dead.sending(e2.id);
      await dead.relayed(e3.id, now);
      await dead.relayed(e4.id, now);
      expect(await dead.claim(e3.id, now, now + 120_000)).to.equal(true);

      // While it runs, nothing of it is touched.
      const before = await live.recover(now + 1);
      expect(before).to.deep.equal({ dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] });
      expect((await live.get(e1.id))?.state).to.equal('relaying');

      await engine.killOwnerOf(e1.id);
      expect(await live.recover(now + 2)).to.deep.equal({ dropped: 1, unknown: 1, reclaimed: 1, unknownIds: [e2.id] });
      expect(await live.get(e1.id)).to.equal(null);
      expect(await live.copy(e1.id)).to.equal(null);
      // Its draft may be sent again, and it no longer counts.
      expect(await live.byDraft(inbox, e1.draftId!)).to.equal(null);
      expect(await live.sentSince(inbox, now - HOUR, 100)).to.equal(4);
      // The end of its data may have been written: unknown, its copy kept and not filed.
      expect(await live.get(e2.id)).to.deep.include({ state: 'unknown', outcomeUnknown: true });
      expect(await live.copy(e2.id)).to.deep.equal(Buffer.concat(copyOf(e2)));
      expect(await live.get(e3.id)).to.deep.include({ state: 'filing', outcomeUnknown: false, nextAttemptAt: now + 2, claims: 1 });
      expect(await live.get(e4.id)).to.deep.include({ nextAttemptAt: now });
      expect(await live.get(kept.id)).to.deep.include({ state: 'relaying' });
      const due = await live.due(now + 2, 100_000);
      expect(due.map((e) => e.id)).to.include.members([e3.id, e4.id]);
      expect(due.map((e) => e.id)).to.not.include(e2.id);
      // Settled once: nothing more to do.
      expect(await live.recover(now + 3)).to.deep.equal({ dropped: 0, unknown: 0, reclaimed: 0, unknownIds: [] });
    });

    describe('scheduled sends (docs/sending.md, "Send later")', () => {
      const sealed = {
        draftId: 'draft_contract-sealed-1',
        epoch: 3,
        wrappedDek: Buffer.from('dek'),
        ciphertext: randomBytes(1.5 * 1024 * 1024),
      };
      const later = (inbox: string, sendAt: number, more: Partial<OutboxEntry> = {}) =>
        entry(inbox, Date.now(), { state: 'scheduled', sendAt, nextAttemptAt: sendAt, ...more });

      it('stores a scheduled send with its envelope and sealed body, due at its time, claimed by one process', async () => {
        const inbox = newId('ibx');
        const now = Date.now();
        const e = later(inbox, now + 1000, { draftId: 'draft_contract-1', holdUntil: now + 500 });
        expect(await store.reserve(e, copyOf(e), RATE, { envelope: ['a@x.test', 'b@x.test'], sealed })).to.deep.equal({ ok: true });
        expect(await store.get(e.id)).to.deep.equal(e);
        expect(await store.nextScheduled()).to.be.at.most(now + 1000);
        const parts = await store.scheduledParts(e.id);
        expect(parts?.envelope).to.deep.equal(['a@x.test', 'b@x.test']);
        expect(parts?.sealed?.ciphertext.equals(sealed.ciphertext)).to.equal(true);
        expect(parts?.sealed).to.deep.include({ draftId: sealed.draftId, epoch: 3 });
        expect((await store.dueScheduled(now + 999, 100_000)).map((x) => x.id)).to.not.include(e.id);
        expect((await store.dueScheduled(now + 1000, 100_000)).map((x) => x.id)).to.include(e.id);
        expect(await store.list(inbox, true, 10)).to.deep.equal([e]);
        // Of several processes, one claims it; then it can no longer be cancelled or rescheduled.
        const stores = Array.from({ length: 4 }, () => engine.newStore());
        const won = await Promise.all(stores.map((s) => s.claimScheduled(e.id, now + 1000)));
        expect(won.filter(Boolean)).to.have.length(1);
        expect(await store.cancel(e.id)).to.equal(false);
        expect(await store.reschedule(e.id, now)).to.equal(false);
        expect((await store.get(e.id))?.state).to.equal('relaying');
        await store.relayed(e.id, now + 1001);
        await store.forget(e.id);
        expect(await store.scheduledParts(e.id)).to.equal(null);
        // The Sent copy stays for filing.
        expect(await store.copy(e.id)).to.not.equal(null);
        expect(await store.list(inbox, true, 10)).to.deep.equal([]);
        expect((await store.list(inbox, false, 10)).map((x) => x.state)).to.deep.equal(['filing']);
      });

      it('claims due sends in batches, earliest first, each by one of several processes at once; not one due later', async () => {
        const inbox = newId('ibx');
        // Due long ago (times no other test uses), so the batches hold these and nothing else.
        const due = Array.from({ length: 30 }, (_, i) => later(inbox, 1000 + i));
        const notYet = later(inbox, 5000);
        for (const e of [...due, notYet]) await store.reserve(e, copyOf(e), RATE, { envelope: ['a@x.test'], sealed: null });
        const first = await store.claimDue(1100, 5);
        expect(first.map((e) => e.id)).to.deep.equal(due.slice(0, 5).map((e) => e.id));
        expect(first.every((e) => e.state === 'relaying')).to.equal(true);
        // The rest, by four processes at once: each taken by exactly one.
        const stores = Array.from({ length: 4 }, () => engine.newStore());
        const batches = await Promise.all(stores.map((s) => s.claimDue(1100, 10)));
        const ids = batches.flat().map((e) => e.id);
        expect(new Set(ids).size, 'claimed twice').to.equal(ids.length);
        expect(ids.sort()).to.deep.equal(
          due
            .slice(5)
            .map((e) => e.id)
            .sort(),
        );
        for (const b of batches)
          expect(b.map((e) => e.nextAttemptAt)).to.deep.equal([...b.map((e) => e.nextAttemptAt)].sort((x, y) => x - y));
        expect(await store.claimDue(1100, 10)).to.deep.equal([]);
        expect((await store.get(notYet.id))?.state).to.equal('scheduled');
        expect((await store.claimDue(5000, 10)).map((e) => e.id)).to.deep.equal([notYet.id]);
      });

      it('cancels and reschedules only while it waits; a cancel or failure frees its draft and its rate count', async () => {
        const inbox = newId('ibx');
        const now = Date.now();
        const e = later(inbox, now + 60_000, { draftId: 'draft_contract-2', holdUntil: now + 90_000 });
        await store.reserve(e, copyOf(e), RATE, { envelope: ['a@x.test'], sealed: null });
        expect(await store.sentSince(inbox, now - HOUR, 100)).to.equal(1);
        // Rescheduled earlier than its hold: due when the hold ends.
        expect(await store.reschedule(e.id, now + 1000)).to.equal(true);
        expect(await store.get(e.id)).to.deep.include({ sendAt: now + 1000, nextAttemptAt: now + 90_000 });
        expect(await store.cancel(e.id)).to.equal(true);
        expect(await store.cancel(e.id)).to.equal(false);
        expect(await store.get(e.id)).to.deep.include({ state: 'cancelled', draftId: null });
        expect(await store.byDraft(inbox, 'draft_contract-2')).to.equal(null);
        expect(await store.sentSince(inbox, now - HOUR, 100)).to.equal(0);
        // Its bytes stay for the draft it becomes, until forgotten.
        expect(await store.scheduledParts(e.id)).to.deep.include({ sealed: null });
        expect(await store.copy(e.id)).to.not.equal(null);
        await store.forget(e.id);
        expect(await store.copy(e.id)).to.equal(null);
        expect(await store.scheduledParts(e.id)).to.equal(null);

        const f = later(inbox, now, { draftId: 'draft_contract-3' });
        await store.reserve(f, copyOf(f), RATE, { envelope: ['a@x.test'], sealed });
        expect(await store.claimScheduled(f.id, now)).to.equal(true);
        await store.retryScheduled(f.id, now + 5000);
        expect(await store.get(f.id)).to.deep.include({ state: 'scheduled', attempts: 1, nextAttemptAt: now + 5000 });
        expect(await store.claimScheduled(f.id, now + 4999)).to.equal(false);
        expect(await store.claimScheduled(f.id, now + 5000)).to.equal(true);
        await store.failScheduled(f.id, 'refused');
        expect(await store.get(f.id)).to.deep.include({ state: 'failed', failure: 'refused', draftId: null });
        expect(await store.copy(f.id)).to.equal(null);
        expect(await store.scheduledParts(f.id)).to.equal(null);
        expect(await store.sentSince(inbox, now - HOUR, 100)).to.equal(0);
      });

      it("puts a dead process's claimed scheduled send back to wait, due at once; its waiting ones stay", async () => {
        const inbox = newId('ibx');
        const dead = engine.newStore();
        const live = engine.newStore();
        const now = Date.now();
        const [claimed, waiting] = [now - 10, now + 600_000].map((at) => later(inbox, at)) as [OutboxEntry, OutboxEntry];
        for (const e of [claimed, waiting]) await dead.reserve(e, copyOf(e), RATE, { envelope: ['a@x.test'], sealed: null });
        expect(await dead.claimScheduled(claimed.id, now)).to.equal(true);
        await engine.killOwnerOf(claimed.id);
        expect(await live.recover(now + 1)).to.deep.include({ dropped: 0, unknown: 0 });
        expect(await live.get(claimed.id)).to.deep.include({ state: 'scheduled', nextAttemptAt: now + 1 });
        expect(await live.get(waiting.id)).to.deep.include({ state: 'scheduled', nextAttemptAt: now + 600_000 });
        expect(await live.claimScheduled(claimed.id, now + 1)).to.equal(true);
      });
    });

    it('takes rows from before owners were recorded for outcome unknown', async () => {
      const e = entry(newId('ibx'));
      const s = engine.newStore();
      await s.reserve(e, [], RATE);
      await engine.unown(e.id);
      expect(await s.recover(Date.now())).to.deep.include({ unknown: 1 });
      expect(await s.get(e.id)).to.deep.include({ state: 'unknown', outcomeUnknown: true });
    });
  });
}
