// The ResealJobs contract (lib/mail/resealing.ts): what every engine guarantees, run the same way
// against each (reseal-jobs.test.ts). What is left to seal is read from the index, so the engine
// gives its mail index too, to put messages where the jobs find them.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { ResealJobs, ResealLocation } from '../../lib/mail/resealing.ts';
import type { MessageRecord } from '../../lib/mail/types.ts';
import type { MailIndexStore } from '../../lib/mail/ports.ts';
import { newId } from '../../lib/ids.ts';

export interface ResealEngine {
  /** Another process's jobs on the engine's database. */
  newJobs(): ResealJobs;
  index: MailIndexStore;
  close(): Promise<void>;
}

const guid = () => randomBytes(16).toString('hex');
const LEASE = 30_000;

function message(sealed?: boolean): MessageRecord {
  const g = guid();
  const m: MessageRecord = {
    guid: g,
    size: 1,
    receivedAt: 1,
    date: null,
    from: null,
    to: null,
    cc: null,
    replyTo: null,
    subject: null,
    messageId: null,
    inReplyTo: null,
    fromAddress: null,
  };
  if (sealed !== undefined) m.sealed = sealed;
  return m;
}

export function resealJobsContract(engineName: string, open: () => Promise<ResealEngine>): void {
  describe(`ResealJobs contract: ${engineName}`, function () {
    let engine: ResealEngine;

    before(async () => {
      engine = await open();
    });
    after(async () => {
      await engine?.close();
    });

    /** An inbox with messages plaintext, not known and sealed, in one label at UIDs 1, 2, 3 (the first also at 9 in another). */
    async function inbox() {
      const id = newId('ibx');
      const [lbl, other] = [guid(), guid()];
      const [plain, unknown, sealed] = [message(false), message(), message(true)];
      await engine.index.apply(
        id,
        [plain, unknown, sealed].map((m, i) => ({
          op: 'put' as const,
          message: m,
          location: { labelGuid: lbl, uid: i + 1, msgGuid: m.guid, modseq: 1, flags: [] },
        })),
        {
          guid: lbl,
          path: 'INBOX',
          specialUse: null,
          uidValidity: 42,
          uidNext: 4,
          highestModseq: 1,
        },
      );
      await engine.index.apply(
        id,
        [{ op: 'put', message: plain, location: { labelGuid: other, uid: 9, msgGuid: plain.guid, modseq: 1, flags: [] } }],
        {
          guid: other,
          path: 'Archive',
          specialUse: null,
          uidValidity: 7,
          uidNext: 10,
          highestModseq: 1,
        },
      );
      const at = (labelGuid: string, uidValidity: number, uid: number, msgGuid: string): ResealLocation => ({
        labelGuid,
        uidValidity,
        uid,
        msgGuid,
      });
      return {
        id,
        places: [at(lbl, 42, 1, plain.guid), at(lbl, 42, 2, unknown.guid), at(other, 7, 9, plain.guid)],
        plain,
        unknown,
        sealed,
      };
    }
    const sorted = (ps: ResealLocation[]) => [...ps].sort((a, b) => a.labelGuid.localeCompare(b.labelGuid) || a.uid - b.uid);

    it("finds every place of the inbox's messages not known to be sealed, up to the limit", async () => {
      const { id, places } = await inbox();
      const jobs = engine.newJobs();
      expect(sorted(await jobs.due(id, 'a', 1000, 100))).to.deep.equal(sorted(places));
      expect(await jobs.due(id, 'a', 1000, 2)).to.have.length(2);
      expect(await jobs.due(newId('ibx'), 'a', 1000, 100)).to.deep.equal([]);
      expect(await jobs.status(id)).to.deep.equal({ unsealed: 2, retrying: 0, lastError: null });
    });

    it("leases a place to one holder: others neither see it due nor claim it until the lease lapses; renewals are the holder's", async () => {
      const { id, places } = await inbox();
      const [a, b] = [engine.newJobs(), engine.newJobs()];
      const p = places[0]!;
      const now = 1_000_000;
      expect(await a.claim(id, p, 'a', now, LEASE)).to.equal(1);
      expect(await b.claim(id, p, 'b', now + 1, LEASE)).to.equal(null);
      expect((await b.due(id, 'b', now + 1, 100)).map((x) => x.uid)).to.not.include(p.uid);
      // The holder still sees it, and claims it again: one attempt more.
      expect((await a.due(id, 'a', now + 1, 100)).map((x) => x.uid)).to.include(p.uid);
      expect(await a.claim(id, p, 'a', now + 2, LEASE)).to.equal(2);
      expect(await a.renew(id, p, 'a', now + 2 * LEASE)).to.equal(true);
      expect(await b.renew(id, p, 'b', now + 3 * LEASE)).to.equal(false);
      expect(await b.claim(id, p, 'b', now + LEASE + 10, LEASE)).to.equal(null);
      // Lapsed: b takes it over, and a's renewal fails from then on.
      expect(await b.claim(id, p, 'b', now + 2 * LEASE, LEASE)).to.equal(3);
      expect(await a.renew(id, p, 'a', now + 5 * LEASE)).to.equal(false);
      // a's done or failed for a place it lost change nothing.
      await a.done(id, p, 'a', now + 2 * LEASE + 1);
      await a.failed(id, p, 'a', now + 10 * LEASE, 'lost');
      expect(await b.renew(id, p, 'b', now + 3 * LEASE)).to.equal(true);
    });

    it('concurrent claims of one place by several processes: exactly one holder', async () => {
      const { id, places } = await inbox();
      const holders = Array.from({ length: 8 }, (_, i) => ({ name: `h${i}`, jobs: engine.newJobs() }));
      for (const p of places) {
        const got = await Promise.all(holders.map((h) => h.jobs.claim(id, p, h.name, 5_000, LEASE)));
        expect(
          got.filter((n) => n !== null),
          `${p.labelGuid}/${p.uid}`,
        ).to.deep.equal([1]);
      }
    });

    it('backs off after a failure: the lease is given back, the place waits for its retry, then is due again', async () => {
      const { id, places } = await inbox();
      const [a, b] = [engine.newJobs(), engine.newJobs()];
      const p = places[1]!;
      expect(await a.claim(id, p, 'a', 100, LEASE)).to.equal(1);
      await a.failed(id, p, 'a', 5_000, 'IMAP said no');
      expect(await b.status(id)).to.deep.equal({ unsealed: 2, retrying: 1, lastError: 'IMAP said no' });
      expect((await b.due(id, 'b', 4_999, 100)).map((x) => x.uid)).to.not.include(p.uid);
      expect(await b.claim(id, p, 'b', 4_999, LEASE)).to.equal(null);
      expect(await a.claim(id, p, 'a', 4_999, LEASE)).to.equal(null);
      expect((await b.due(id, 'b', 5_000, 100)).map((x) => x.uid)).to.include(p.uid);
      expect(await b.claim(id, p, 'b', 5_000, LEASE)).to.equal(2);
      // A long error is kept short.
      await b.failed(id, p, 'b', 6_000, 'x'.repeat(2000));
      expect((await b.status(id)).lastError).to.have.length(500);
    });

    it('a place done is never due again; a message found sealed leaves every place of it; done jobs are pruned', async () => {
      const { id, places, plain } = await inbox();
      const a = engine.newJobs();
      const p1 = places[1]!;
      expect(await a.claim(id, p1, 'a', 100, LEASE)).to.equal(1);
      await a.failed(id, p1, 'a', 100, 'once');
      expect(await a.claim(id, p1, 'a', 100, LEASE)).to.equal(2);
      await a.done(id, p1, 'a', 200);
      expect((await a.due(id, 'a', 10_000, 100)).map((x) => x.uid)).to.not.include(p1.uid);
      expect(await a.claim(id, p1, 'a', 10_000, LEASE)).to.equal(null);
      // Done clears the error: nothing retrying.
      expect(await a.status(id)).to.deep.include({ retrying: 0, lastError: null });
      await a.markSealed(id, plain.guid);
      expect(sorted(await a.due(id, 'a', 10_000, 100))).to.deep.equal([]);
      expect(await a.status(id)).to.deep.include({ unsealed: 1 });
      // Pruned (done before the cutoff): the job is forgotten, so the still unsealed message's place is found again.
      await a.prune(200);
      expect(await a.due(id, 'a', 10_000, 100)).to.deep.equal([]);
      await a.prune(201);
      expect(await a.due(id, 'a', 10_000, 100)).to.deep.equal([p1]);
    });

    it("forgets the inbox's jobs with its index", async () => {
      const { id, places } = await inbox();
      const a = engine.newJobs();
      await a.claim(id, places[0]!, 'a', 100, LEASE);
      await a.failed(id, places[0]!, 'a', 100_000, 'no');
      await engine.index.dropInbox(id);
      expect(await a.due(id, 'a', 200_000, 100)).to.deep.equal([]);
      expect(await a.status(id)).to.deep.equal({ unsealed: 0, retrying: 0, lastError: null });
    });

    it('counts the messages left to seal over the inboxes named, and only those', async () => {
      const a = engine.newJobs();
      // Each inbox: one plaintext message (in two labels, counted once) and one not known; the sealed one is not counted.
      const [x, y, z] = [await inbox(), await inbox(), await inbox()];
      expect(await a.unsealedCount([x.id, y.id])).to.equal(4);
      expect(await a.unsealedCount([z.id])).to.equal(2);
      expect(await a.unsealedCount([])).to.equal(0);
      await a.markSealed(x.id, x.plain.guid);
      expect(await a.unsealedCount([x.id, y.id])).to.equal(3);
    });
  });
}
