// The mail index contract (lib/mail/types.ts: MailIndexStore, WatchLeases, WatchReports): what
// every engine guarantees, run the same way against each (mail-index.test.ts). Indexes opened by
// one engine share its database as processes sharing the store do; each test works in inboxes of
// its own (index rows name no directory row).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { IndexOp, LabelState, Location, MessageRecord } from '../../lib/mail/types.ts';
import type { MailIndexStore, WatchLeases, WatchReport, WatchReports } from '../../lib/mail/ports.ts';
import { newId } from '../../lib/ids.ts';

export type MailIndex = MailIndexStore & WatchLeases & WatchReports;

export interface MailIndexEngine {
  /** Another index on the engine's database: another process's. */
  newIndex(): MailIndex;
  close(): Promise<void>;
}

const guid = () => randomBytes(16).toString('hex');

function message(g = guid(), more: Partial<MessageRecord> = {}): MessageRecord {
  return {
    guid: g,
    size: 100,
    receivedAt: 1_700_000_000_000,
    date: 'Tue, 14 Nov 2023 22:13:20 +0000',
    from: 'A <a@x.test>',
    to: 'b@x.test',
    cc: null,
    replyTo: null,
    subject: `subject ${g.slice(0, 6)}`,
    messageId: `<${g}@x.test>`,
    inReplyTo: null,
    fromAddress: 'a@x.test',
    ...more,
  };
}

const loc = (labelGuid: string, uid: number, msgGuid: string, modseq = 1, flags: string[] = []): Location => ({
  labelGuid,
  uid,
  msgGuid,
  modseq,
  flags,
});
const put = (m: MessageRecord, l: Location): IndexOp => ({ op: 'put', message: m, location: l });
const label = (g: string, more: Partial<LabelState> = {}): LabelState => ({
  guid: g,
  path: 'INBOX',
  specialUse: null,
  uidValidity: 1,
  uidNext: 1,
  highestModseq: 1,
  fillLow: null,
  ...more,
});

/** Sorted for comparing sets of places. */
const byPlace = (ls: Location[]) => [...ls].sort((a, b) => a.labelGuid.localeCompare(b.labelGuid) || a.uid - b.uid);

export function mailIndexContract(engineName: string, open: () => Promise<MailIndexEngine>): void {
  describe(`MailIndexStore contract: ${engineName}`, function () {
    let engine: MailIndexEngine;
    let index: MailIndex;

    before(async () => {
      engine = await open();
      index = engine.newIndex();
    });
    after(async () => {
      await engine?.close();
    });

    it('pages a label newest first, counts it, and answers by UID, by message and by label', async () => {
      const inbox = newId('ibx');
      const [inb, arch] = [guid(), guid()];
      const ms = Array.from({ length: 7 }, () => message());
      const ops = ms.map((m, i) => put(m, loc(inb, i + 1, m.guid, 10 + i, i % 2 === 0 ? ['\\Seen'] : ['$Important'])));
      // The first message is in Archive too (unread there: flags are per label).
      ops.push(put(ms[0]!, loc(arch, 4, ms[0]!.guid, 3)));
      expect(await index.apply(inbox, ops, label(inb, { uidNext: 8, highestModseq: 16 }))).to.deep.equal([]);
      await index.apply(inbox, [], label(arch, { path: 'Archive', specialUse: '\\Archive', uidNext: 5, highestModseq: 3 }));

      const first = await index.page(inbox, inb, null, 3);
      expect(first.map((r) => r.location.uid)).to.deep.equal([7, 6, 5]);
      expect(first[0]).to.deep.equal({
        message: { ...ms[6], threadGuid: ms[6]!.guid },
        location: loc(inb, 7, ms[6]!.guid, 16, ['\\Seen']),
      });
      expect((await index.page(inbox, inb, 5, 3)).map((r) => r.location.uid)).to.deep.equal([4, 3, 2]);
      expect((await index.page(inbox, inb, 2, 3)).map((r) => r.location.uid)).to.deep.equal([1]);
      expect(await index.page(inbox, guid(), null, 3)).to.deep.equal([]);

      const counts = await index.counts(inbox);
      expect(Object.fromEntries(counts)).to.deep.equal({ [inb]: { total: 7, unread: 3 }, [arch]: { total: 1, unread: 1 } });
      expect(await index.countIn(inbox, inb)).to.equal(7);
      expect(await index.countIn(inbox, guid())).to.equal(0);
      expect(await index.uidsOf(inbox, inb, 2, 3)).to.deep.equal([3, 4, 5].map((uid) => ({ uid, msgGuid: ms[uid - 1]!.guid })));
      // In the order asked; a UID not there is left out.
      expect((await index.locations(inbox, inb, [5, 99, 2])).map((l) => l.uid)).to.deep.equal([5, 2]);
      const one = await index.message(inbox, ms[0]!.guid);
      expect(one!.message).to.deep.equal({ ...ms[0], threadGuid: ms[0]!.guid });
      expect(byPlace(one!.locations)).to.deep.equal(byPlace([loc(inb, 1, ms[0]!.guid, 10, ['\\Seen']), loc(arch, 4, ms[0]!.guid, 3)]));
      expect(await index.message(inbox, guid())).to.equal(null);
      expect(await index.label(inbox, arch)).to.deep.equal(
        label(arch, { path: 'Archive', specialUse: '\\Archive', uidNext: 5, highestModseq: 3 }),
      );
      expect((await index.labels(inbox)).map((l) => l.guid).sort()).to.deep.equal([inb, arch].sort());
      expect(await index.label(inbox, guid())).to.equal(null);
      expect(await index.status(inbox)).to.deep.include({
        seeded: false,
        messages: 7,
        locations: 8,
        labels: 2,
        staged: 0,
        syncedAt: null,
        hintedAt: null,
        watcher: null,
      });
      // Another inbox sees none of it.
      expect(await index.countIn(newId('ibx'), inb)).to.equal(0);
    });

    it('bumps the version with every write, as any process sees it; seeded and synced are kept', async () => {
      const inbox = newId('ibx');
      const other = engine.newIndex();
      expect(await index.version(inbox)).to.equal(0);
      expect(await index.isSeeded(inbox)).to.equal(false);
      const versions = [await index.version(inbox)];
      const lbl = guid();
      const m = message();
      const writes: Array<() => Promise<unknown>> = [
        () => index.apply(inbox, [put(m, loc(lbl, 1, m.guid))]),
        () => other.apply(inbox, [{ op: 'flags', labelGuid: lbl, uid: 1, modseq: 2, flags: ['\\Seen'] }]),
        () => index.markSeeded(inbox, true),
        () => other.apply(inbox, [{ op: 'stage', message: message(), location: loc(lbl, 9, guid()) }]),
        () => index.commitStaged(inbox, label(lbl, { uidValidity: 2 })),
        () => other.dropLabel(inbox, lbl),
      ];
      for (const write of writes) {
        await write();
        const v = await other.version(inbox);
        expect(v, 'a new version after each write').to.not.be.oneOf(versions);
        versions.push(v);
      }
      expect(await other.isSeeded(inbox)).to.equal(true);
      await index.markSynced(inbox, 12345);
      expect(await other.status(inbox)).to.deep.include({ seeded: true, syncedAt: 12345 });
    });

    it('never goes backwards: older flags, an older put and a lower uidNext or MODSEQ change nothing', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const m = message();
      await index.apply(inbox, [put(m, loc(lbl, 1, m.guid, 5, ['\\Seen']))], label(lbl, { uidNext: 2, highestModseq: 5 }));
      const ops: IndexOp[] = [
        { op: 'flags', labelGuid: lbl, uid: 1, modseq: 4, flags: [] }, // older: unapplied
        { op: 'flags', labelGuid: lbl, uid: 2, modseq: 9, flags: [] }, // no such place: unapplied
        { op: 'remove', labelGuid: lbl, uid: 3 }, // no such place: unapplied
      ];
      expect(await index.apply(inbox, ops)).to.deep.equal([0, 1, 2]);
      expect((await index.locations(inbox, lbl, [1]))[0]).to.deep.equal(loc(lbl, 1, m.guid, 5, ['\\Seen']));
      // The same message at the same place fetched earlier, applied later: the newer flags stay.
      await index.apply(inbox, [put(m, loc(lbl, 1, m.guid, 3, []))]);
      expect((await index.locations(inbox, lbl, [1]))[0]!.flags).to.deep.equal(['\\Seen']);
      // Newer flags apply, the same MODSEQ again does not; MODSEQ 0 (no CONDSTORE) always applies.
      expect(await index.apply(inbox, [{ op: 'flags', labelGuid: lbl, uid: 1, modseq: 6, flags: ['\\Flagged'] }])).to.deep.equal([]);
      expect(await index.apply(inbox, [{ op: 'flags', labelGuid: lbl, uid: 1, modseq: 6, flags: ['\\Deleted'] }])).to.deep.equal([0]);
      expect((await index.locations(inbox, lbl, [1]))[0]!.flags).to.deep.equal(['\\Flagged']);
      expect(await index.apply(inbox, [{ op: 'flags', labelGuid: lbl, uid: 1, modseq: 0, flags: ['\\Answered'] }])).to.deep.equal([]);
      expect((await index.locations(inbox, lbl, [1]))[0]).to.deep.include({ flags: ['\\Answered'], modseq: 0 });
      expect(Object.fromEntries(await index.counts(inbox))).to.deep.equal({ [lbl]: { total: 1, unread: 1 } });
      // uidNext and highestModseq never decrease within one UIDVALIDITY; a new one replaces them.
      await index.apply(inbox, [], label(lbl, { uidNext: 1, highestModseq: 2, path: 'Renamed' }));
      expect(await index.label(inbox, lbl)).to.deep.include({ uidNext: 2, highestModseq: 5, path: 'Renamed' });
      await index.apply(inbox, [], label(lbl, { uidValidity: 7, uidNext: 1, highestModseq: 1 }));
      expect(await index.label(inbox, lbl)).to.deep.include({ uidValidity: 7, uidNext: 1, highestModseq: 1 });
      // So does a refill's: its counters replace the old validity's, then never decrease either.
      await index.commitStaged(inbox, label(lbl, { uidValidity: 8, uidNext: 3, highestModseq: 4 }));
      expect(await index.label(inbox, lbl)).to.deep.include({ uidValidity: 8, uidNext: 3, highestModseq: 4 });
      await index.apply(inbox, [], label(lbl, { uidValidity: 8, uidNext: 2, highestModseq: 2 }));
      expect(await index.label(inbox, lbl)).to.deep.include({ uidValidity: 8, uidNext: 3, highestModseq: 4 });
      // Another message at a place replaces the one there, whatever their MODSEQs (never within
      // one UIDVALIDITY, but the index follows the server).
      const other = message();
      await index.apply(inbox, [put(m, loc(lbl, 2, m.guid, 9))]);
      await index.apply(inbox, [put(other, loc(lbl, 2, other.guid, 3))]);
      expect((await index.locations(inbox, lbl, [2]))[0]).to.deep.include({ msgGuid: other.guid, modseq: 3 });
    });

    it("keeps a fill's progress: fillLow only goes down, a complete label stays complete, left out it is kept", async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const at = async (fillLow: number | null | undefined) => {
        const l = label(lbl, { uidNext: 100 });
        if (fillLow === undefined) delete l.fillLow;
        else l.fillLow = fillLow;
        await index.apply(inbox, [], l);
        return (await index.label(inbox, lbl))!.fillLow;
      };
      expect(await at(50)).to.equal(50);
      expect(await at(60)).to.equal(50);
      expect(await at(40)).to.equal(40);
      expect(await at(undefined)).to.equal(40);
      expect(await at(null)).to.equal(null);
      expect(await at(30)).to.equal(null);
    });

    it('applies the ops of one batch in their order, and keeps a message while some label holds it', async () => {
      const inbox = newId('ibx');
      const [a, b] = [guid(), guid()];
      const [m1, m2, m3] = [message(), message(), message()];
      // Put then remove one place, remove then put another, in one batch.
      const ops: IndexOp[] = [
        put(m1, loc(a, 1, m1.guid)),
        { op: 'remove', labelGuid: a, uid: 1 },
        put(m2, loc(a, 2, m2.guid)),
        put(m2, loc(b, 1, m2.guid)),
        { op: 'remove', labelGuid: a, uid: 2 },
        put(m3, loc(a, 3, m3.guid, 1)),
        { op: 'flags', labelGuid: a, uid: 3, modseq: 2, flags: ['\\Seen'] },
        { op: 'flags', labelGuid: a, uid: 3, modseq: 3, flags: ['\\Flagged'] },
      ];
      expect(await index.apply(inbox, ops)).to.deep.equal([]);
      expect(await index.message(inbox, m1.guid)).to.equal(null);
      expect((await index.message(inbox, m2.guid))!.locations).to.deep.equal([loc(b, 1, m2.guid)]);
      expect((await index.locations(inbox, a, [1, 2, 3])).map((l) => [l.uid, l.flags])).to.deep.equal([[3, ['\\Flagged']]]);
      // Another message at a place replaces the one there, which goes with its last place.
      const m4 = message();
      await index.apply(inbox, [put(m4, loc(b, 1, m4.guid))]);
      expect(await index.message(inbox, m2.guid)).to.equal(null);
      expect(await index.status(inbox)).to.deep.include({ messages: 2, locations: 2 });
    });

    it("learns a message's sealing once: a later put does not unlearn it", async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const m = message();
      await index.apply(inbox, [put(m, loc(lbl, 1, m.guid))]);
      await index.apply(inbox, [put({ ...m, sealed: true }, loc(lbl, 2, m.guid))]);
      await index.apply(inbox, [put({ ...m, sealed: false }, loc(lbl, 3, m.guid))]);
      expect((await index.message(inbox, m.guid))!.message).to.deep.equal({ ...m, threadGuid: m.guid });
      expect(await index.countIn(inbox, lbl)).to.equal(3);
    });

    it('stages a refill out of sight, swaps it in at once, or forgets it', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const [old, kept, fresh, dropped] = [message(), message(), message(), message()];
      await index.apply(inbox, [put(old, loc(lbl, 1, old.guid)), put(kept, loc(lbl, 2, kept.guid))], label(lbl, { uidNext: 3 }));
      const stage = (m: MessageRecord, uid: number): IndexOp => ({
        op: 'stage',
        message: m,
        location: loc(lbl, uid, m.guid, 1, ['\\Seen']),
      });
      await index.apply(inbox, [stage(kept, 1), stage(fresh, 2)]);
      expect((await index.page(inbox, lbl, null, 10)).map((r) => r.message.guid)).to.deep.equal([kept.guid, old.guid]);
      expect(await index.countIn(inbox, lbl)).to.equal(2);
      expect(await index.status(inbox)).to.deep.include({ locations: 2, staged: 2 });
      await index.commitStaged(inbox, label(lbl, { uidValidity: 2, uidNext: 3 }));
      expect(await index.status(inbox)).to.deep.include({ locations: 2, staged: 0 });
      expect((await index.page(inbox, lbl, null, 10)).map((r) => r.message.guid)).to.deep.equal([fresh.guid, kept.guid]);
      expect(await index.message(inbox, old.guid)).to.equal(null);
      expect(await index.label(inbox, lbl)).to.deep.include({ uidValidity: 2 });
      expect(Object.fromEntries(await index.counts(inbox))).to.deep.equal({ [lbl]: { total: 2, unread: 0 } });
      // A refill that did not complete: its rows and the messages only it held go.
      await index.apply(inbox, [stage(dropped, 5), stage(kept, 6)]);
      await index.clearStaged(inbox, lbl);
      expect(await index.message(inbox, dropped.guid)).to.equal(null);
      expect(await index.message(inbox, kept.guid)).to.not.equal(null);
      await index.commitStaged(inbox, label(lbl, { uidValidity: 3 }));
      expect(await index.countIn(inbox, lbl)).to.equal(0);
      expect(await index.status(inbox)).to.deep.include({ messages: 0, locations: 0, labels: 1 });
    });

    it('drops a label with its places, staged rows and the messages only it held', async () => {
      const inbox = newId('ibx');
      const [a, b] = [guid(), guid()];
      const [m1, m2, m3] = [message(), message(), message()];
      await index.apply(inbox, [put(m1, loc(a, 1, m1.guid, 4)), put(m2, loc(a, 2, m2.guid)), put(m2, loc(b, 1, m2.guid))], label(a));
      await index.apply(inbox, [{ op: 'stage', message: m3, location: loc(a, 7, m3.guid) }]);
      expect(await index.dropLabel(inbox, a)).to.deep.equal([loc(a, 1, m1.guid, 4), loc(a, 2, m2.guid)]);
      expect(await index.label(inbox, a)).to.equal(null);
      expect(await index.message(inbox, m1.guid)).to.equal(null);
      expect(await index.message(inbox, m3.guid)).to.equal(null);
      expect((await index.message(inbox, m2.guid))!.locations).to.deep.equal([loc(b, 1, m2.guid)]);
    });

    it('forgets a removed inbox for good: every later write is refused, reads find nothing', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const m = message();
      await index.apply(inbox, [put(m, loc(lbl, 1, m.guid))], label(lbl));
      await index.apply(inbox, [{ op: 'stage', message: m, location: loc(lbl, 2, m.guid) }]);
      await index.markSeeded(inbox, true);
      await index.claim([inbox], 'holder-a', 60_000);
      expect(await index.status(inbox)).to.deep.include({ seeded: true, staged: 1 });
      const before = await index.version(inbox);
      const other = engine.newIndex();
      await other.dropInbox(inbox);
      expect(await index.version(inbox)).to.not.equal(before);
      expect(await index.status(inbox)).to.deep.include({
        seeded: false,
        messages: 0,
        locations: 0,
        labels: 0,
        staged: 0,
        syncedAt: null,
        watcher: null,
      });
      const refused = async (write: () => Promise<unknown>) => {
        const err = await write().then(
          () => null,
          (e: unknown) => e,
        );
        expect(err, 'refused').to.be.instanceOf(Error);
        expect((err as Error).message).to.match(/removed/);
      };
      await refused(() => index.apply(inbox, [put(m, loc(lbl, 1, m.guid))]));
      await refused(() => index.markSeeded(inbox, true));
      await refused(() => index.commitStaged(inbox, label(lbl)));
      await refused(() => index.dropLabel(inbox, lbl));
      await refused(() => index.clearStaged(inbox, lbl));
      await index.markSynced(inbox, 1);
      await index.markHinted(inbox, 1);
      expect(await index.status(inbox)).to.deep.include({ messages: 0, syncedAt: null, hintedAt: null });
    });

    it('writes of one inbox by several processes at once all land, whatever their order', async () => {
      const inbox = newId('ibx');
      const labels = [guid(), guid(), guid()];
      const writers = Array.from({ length: 6 }, () => engine.newIndex());
      const shared = message();
      // Each writer puts 20 messages in every label, in its own order of labels, and the shared one everywhere.
      await Promise.all(
        writers.map((w, i) => {
          const ops: IndexOp[] = [];
          const order = i % 2 === 0 ? labels : [...labels].reverse();
          for (const lbl of order) {
            for (let n = 0; n < 20; n++) {
              const m = message();
              ops.push(put(m, loc(lbl, 1000 * (i + 1) + n, m.guid)));
            }
            ops.push(put(shared, loc(lbl, 1 + labels.indexOf(lbl), shared.guid)));
          }
          return w.apply(inbox, ops, label(order[0]!, { uidNext: 1000 * (i + 2) }));
        }),
      );
      for (const lbl of labels) expect(await index.countIn(inbox, lbl)).to.equal(6 * 20 + 1);
      expect(await index.status(inbox)).to.deep.include({ messages: 6 * 20 * 3 + 1 });
      // Each label's highest uidNext won, whoever wrote last.
      expect(await index.label(inbox, labels[0]!)).to.deep.include({ uidNext: 6000 });
      expect(await index.label(inbox, labels[2]!)).to.deep.include({ uidNext: 7000 });
    });

    it('a removal racing writes of several processes wins: afterwards nothing of the inbox is left, and writes are refused', async () => {
      for (let round = 0; round < 3; round++) {
        const inbox = newId('ibx');
        const lbl = guid();
        const writers = Array.from({ length: 5 }, () => engine.newIndex());
        const write = (w: MailIndex, i: number) => {
          const ms = Array.from({ length: 10 }, () => message());
          return w
            .apply(
              inbox,
              ms.map((m, n) => put(m, loc(lbl, 100 * i + n + 1, m.guid))),
              label(lbl),
            )
            .then(
              () => 'applied',
              (e: unknown) => (e as Error).message,
            );
        };
        await index.apply(inbox, [], label(lbl));
        const results = await Promise.all([
          ...writers.map(write),
          engine
            .newIndex()
            .dropInbox(inbox)
            .then(() => 'dropped'),
        ]);
        for (const r of results) expect(r).to.match(/^(applied|dropped)$|removed/);
        expect(await index.status(inbox)).to.deep.include({ messages: 0, locations: 0, labels: 0 });
        expect(await write(index, 9)).to.match(/removed/);
      }
    });

    describe('watch leases', () => {
      it('gives each inbox one holder at a time; renewing keeps it, a lapsed lease is taken over', async () => {
        const [x, y] = [newId('ibx'), newId('ibx')];
        const a = engine.newIndex();
        const b = engine.newIndex();
        expect(await a.claim([x], 'a', 60_000)).to.deep.equal(new Set([x]));
        expect(await b.claim([x, y], 'b', 60_000)).to.deep.equal(new Set([y]));
        // A renewal in one write, duplicates harmless.
        expect(await a.claim([x, y, x], 'a', 200)).to.deep.equal(new Set([x]));
        const st = await index.status(x);
        expect(st.watcher?.holder).to.equal('a');
        expect(st.watcher!.expiresAt).to.be.within(Date.now(), Date.now() + 200);
        // Lapsed: b takes over, a no longer holds it.
        while (Date.now() <= st.watcher!.expiresAt) await new Promise((r) => setTimeout(r, 20));
        expect(await index.status(x)).to.deep.include({ watcher: null });
        expect(await b.claim([x], 'b', 60_000)).to.deep.equal(new Set([x]));
        expect(await a.claim([x], 'a', 60_000)).to.deep.equal(new Set());
        expect(await a.claim([], 'a', 60_000)).to.deep.equal(new Set());
      });

      it('a release lets another take the lease at once; only the holder releases', async () => {
        const x = newId('ibx');
        await index.claim([x], 'a', 60_000);
        await index.release([x], 'b');
        expect(await index.claim([x], 'b', 60_000)).to.deep.equal(new Set());
        await index.release([x], 'a');
        expect(await index.claim([x], 'b', 60_000)).to.deep.equal(new Set([x]));
        await index.release([], 'b');
      });

      it('many processes claiming the same inboxes at once: each inbox gets exactly one holder', async () => {
        const inboxes = Array.from({ length: 10 }, () => newId('ibx'));
        const holders = Array.from({ length: 8 }, (_, i) => ({ name: `h${i}`, index: engine.newIndex() }));
        // Each in its own order of inboxes.
        const held = await Promise.all(holders.map((h, i) => h.index.claim(i % 2 ? inboxes : [...inboxes].reverse(), h.name, 60_000)));
        for (const x of inboxes)
          expect(
            held.filter((s) => s.has(x)),
            x,
          ).to.have.length(1);
        for (const [i, h] of holders.entries()) for (const x of held[i]!) expect((await index.status(x)).watcher?.holder).to.equal(h.name);
      });
    });

    it("keeps each process's watch report, newest first, and hints per inbox", async () => {
      const report = (mode: WatchReport['mode'], hints: number): WatchReport => ({
        mode,
        reason: 'contract',
        inboxes: 3,
        hints,
        lastHintAt: null,
        missedHintAt: null,
        pushHealthy: mode === 'push',
        verdict: 'fine',
      });
      const base = Date.now() + 10 * 86_400_000;
      const [o1, o2] = [newId('sys'), newId('sys')];
      await index.putWatchReport(o1, report('push', 1), base);
      await engine.newIndex().putWatchReport(o2, report('notify', 0), base + 10);
      await index.putWatchReport(o1, report('push', 2), base + 20);
      expect(await index.watchReports(base)).to.deep.equal([
        { origin: o1, report: report('push', 2), updatedAt: base + 20 },
        { origin: o2, report: report('notify', 0), updatedAt: base + 10 },
      ]);
      expect(await index.watchReports(base + 15)).to.have.length(1);
      // A report from a day later prunes those a day old.
      await index.putWatchReport(o2, report('off', 0), base + 20 + 86_400_001);
      expect((await index.watchReports(base)).map((r) => r.origin)).to.deep.equal([o2]);

      const inbox = newId('ibx');
      await index.markSeeded(inbox, false);
      await index.markHinted(inbox, 777);
      expect(await index.status(inbox)).to.deep.include({ hintedAt: 777 });
    });
  });
}
