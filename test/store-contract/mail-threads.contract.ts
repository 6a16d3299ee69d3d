// Threads in the mail index (lib/mail/types.ts: MailIndexStore's thread methods; docs/threads.md):
// what every engine guarantees, run the same way against each (mail-index.test.ts).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { IndexOp, Location, MessageRecord } from '../../lib/mail/types.ts';
import { newId } from '../../lib/ids.ts';
import type { MailIndex } from './mail-index.contract.ts';

export interface MailThreadsEngine {
  newIndex(): MailIndex;
  /** Makes the inbox's rows look indexed before threads (no thread, no kept links): a state no port reaches. */
  unthread(inboxId: string): Promise<void>;
  close(): Promise<void>;
}

const guid = () => randomBytes(16).toString('hex');
let clock = 1_700_000_000_000;

function message(more: Partial<MessageRecord> = {}): MessageRecord {
  const g = guid();
  return {
    guid: g,
    size: 100,
    receivedAt: (clock += 1000),
    date: null,
    from: 'A <a@x.test>',
    to: 'b@x.test',
    cc: null,
    replyTo: null,
    subject: 'the subject',
    messageId: `<${g}@x.test>`,
    inReplyTo: null,
    fromAddress: 'a@x.test',
    ...more,
  };
}

/** A reply to `parent`: its References are the parent's and the parent itself. */
const reply = (parent: MessageRecord, more: Partial<MessageRecord> = {}) =>
  message({
    subject: `Re: ${parent.subject}`,
    inReplyTo: parent.messageId,
    references: [...(parent.references ?? []), parent.messageId!],
    ...more,
  });

const loc = (labelGuid: string, uid: number, msgGuid: string, flags: string[] = []): Location => ({
  labelGuid,
  uid,
  msgGuid,
  modseq: 1,
  flags,
});
const put = (m: MessageRecord, l: Location): IndexOp => ({ op: 'put', message: m, location: l });

export function mailThreadsContract(engineName: string, open: () => Promise<MailThreadsEngine>): void {
  describe(`MailIndexStore threads contract: ${engineName}`, () => {
    let engine: MailThreadsEngine;
    let index: MailIndex;
    before(async () => {
      engine = await open();
      index = engine.newIndex();
    });
    after(() => engine.close());

    const threadOf = async (inbox: string, m: MessageRecord) => (await index.message(inbox, m.guid))?.message.threadGuid;

    it('puts replies in their parent thread, the References chain and In-Reply-To alike, and a stranger in its own', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const a = message();
      const b = reply(a);
      // In-Reply-To alone (no References), and References alone (no In-Reply-To).
      const c = message({ subject: 'Re: the subject', inReplyTo: b.messageId });
      const d = message({ subject: 'RE: [list] the subject', references: [a.messageId!] });
      const other = message({ subject: 'the subject' });
      await index.apply(
        inbox,
        [a, b, c, d, other].map((m, i) => put(m, loc(lbl, i + 1, m.guid))),
      );
      for (const m of [a, b, c, d]) expect(await threadOf(inbox, m)).to.equal(a.guid);
      // The same subject alone links nothing.
      expect(await threadOf(inbox, other)).to.equal(other.guid);
      const thread = await index.thread(inbox, a.guid, 10);
      expect(thread.map((r) => r.message.guid)).to.deep.equal([a, b, c, d].map((m) => m.guid));
      expect(thread[0]!.locations).to.deep.equal([loc(lbl, 1, a.guid)]);
      expect((await index.thread(inbox, a.guid, 2)).map((r) => r.message.guid)).to.deep.equal([a.guid, b.guid]);
      expect(await index.thread(inbox, guid(), 10)).to.deep.equal([]);
    });

    it('a parent indexed after its reply joins the reply thread; across labels and writes, ids never change', async () => {
      const inbox = newId('ibx');
      const [inb, sent] = [guid(), guid()];
      const a = message();
      const b = reply(a);
      const c = reply(b);
      await index.apply(inbox, [put(c, loc(inb, 1, c.guid))]);
      await index.apply(inbox, [put(a, loc(sent, 1, a.guid))]);
      await index.apply(inbox, [put(b, loc(inb, 2, b.guid))]);
      for (const m of [a, b, c]) expect(await threadOf(inbox, m)).to.equal(c.guid);
      // Put again (another label, a later sync): the thread stays.
      await index.apply(inbox, [put(a, loc(inb, 3, a.guid))]);
      expect(await threadOf(inbox, a)).to.equal(c.guid);
    });

    it('one write places a conversation together whatever the order of its messages, and whatever it names', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      // Each reply names only its parent (References cut short, as some mail apps send): the
      // first and the last are linked through the middle one alone. The order they are placed
      // in is their INTERNALDATE's (a reply's may be older than its parent's: clocks differ), or,
      // appended in the same second, their GUID's: each of the six orders, both ways.
      const orders = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
      ];
      const conversations: Array<{ messages: MessageRecord[]; first: MessageRecord }> = [];
      for (const order of orders) {
        for (const sameSecond of [false, true]) {
          const at = (clock += 60_000);
          const a = message({ subject: `talk ${conversations.length}` });
          const b = message({ subject: `Re: ${a.subject}`, inReplyTo: a.messageId, references: [a.messageId!] });
          const c = message({ subject: `Re: ${a.subject}`, inReplyTo: b.messageId, references: [b.messageId!] });
          const messages = [a, b, c];
          for (const [rank, i] of order.entries()) {
            messages[i] = { ...messages[i]!, guid: `${rank}${guid().slice(1)}`, receivedAt: sameSecond ? at : at + rank * 1000 };
          }
          conversations.push({ messages, first: messages[order[0]!]! });
        }
      }
      // All of them in one write, each conversation's messages in their UIDs' order (a, b, c).
      let uid = 0;
      await index.apply(
        inbox,
        conversations.flatMap((t) => t.messages.map((m) => put(m, loc(lbl, ++uid, m.guid)))),
      );
      const threads = new Set<string | undefined>();
      for (const [n, t] of conversations.entries()) {
        const ids = await Promise.all(t.messages.map((m) => threadOf(inbox, m)));
        // The thread's id: its founder's GUID, the first of them placed (the oldest).
        expect(ids, `conversation ${n}`).to.deep.equal([t.first.guid, t.first.guid, t.first.guid]);
        threads.add(ids[0]);
      }
      expect(threads.size).to.equal(conversations.length);

      // A write whose messages link to a thread already indexed and to one another: the reply
      // placed before its parent (older) joins the parent's thread through it.
      const [root] = conversations[0]!.messages;
      const middle = message({ subject: `Re: ${root!.subject}`, inReplyTo: root!.messageId, references: [root!.messageId!] });
      const last = message({ subject: `Re: ${root!.subject}`, inReplyTo: middle.messageId, references: [middle.messageId!] });
      await index.apply(inbox, [
        put(middle, loc(lbl, ++uid, middle.guid)),
        put({ ...last, receivedAt: middle.receivedAt - 5000 }, loc(lbl, ++uid, last.guid)),
      ]);
      expect(await threadOf(inbox, middle)).to.equal(conversations[0]!.first.guid);
      expect(await threadOf(inbox, last)).to.equal(conversations[0]!.first.guid);
    });

    it('broken References: junk between ids, ids of mail not here, a chain with a hole all still link', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const a = message();
      const missing = `<${guid()}@gone.test>`;
      // The References a mail app cut short: only the missing middle message and junk.
      const b = message({ subject: 'Re: the subject', references: [missing, a.messageId!] });
      const c = message({ subject: 'Re: the subject', references: [missing] });
      const d = message({ subject: 'Re: the subject', inReplyTo: `not an id ${a.messageId} (comment)` });
      await index.apply(
        inbox,
        [a, b, c, d].map((m, i) => put(m, loc(lbl, i + 1, m.guid))),
      );
      expect(await threadOf(inbox, b)).to.equal(a.guid);
      // c names only the missing message, as b does: siblings under an ancestor that never came.
      expect(await threadOf(inbox, c)).to.equal(a.guid);
      expect(await threadOf(inbox, d)).to.equal(a.guid);
      const stranger = message({ subject: 'Re: the subject', references: [`<${guid()}@gone.test>`] });
      await index.apply(inbox, [put(stranger, loc(lbl, 9, stranger.guid))]);
      expect(await threadOf(inbox, stranger)).to.equal(stranger.guid);
    });

    it('a late message linking two threads joins one by subject; neither thread changes its id', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const a = message({ subject: 'alpha' });
      const b = message({ subject: 'beta' });
      const a2 = reply(a);
      await index.apply(
        inbox,
        [a, b, a2].map((m, i) => put(m, loc(lbl, i + 1, m.guid))),
      );
      // Replies to b but names a too (a merged quote): b's subject decides.
      const late = message({ subject: 'Re: beta', inReplyTo: a.messageId, references: [a.messageId!, b.messageId!] });
      await index.apply(inbox, [put(late, loc(lbl, 4, late.guid))]);
      expect(await threadOf(inbox, late)).to.equal(b.guid);
      expect(await threadOf(inbox, a2)).to.equal(a.guid);
      // No subject matches: the In-Reply-To parent's thread.
      const late2 = message({ subject: 'something else', inReplyTo: a.messageId, references: [b.messageId!, a.messageId!] });
      await index.apply(inbox, [put(late2, loc(lbl, 5, late2.guid))]);
      expect(await threadOf(inbox, late2)).to.equal(a.guid);
      expect((await index.thread(inbox, a.guid, 10)).map((r) => r.message.guid)).to.deep.equal([a.guid, a2.guid, late2.guid]);
      expect((await index.thread(inbox, b.guid, 10)).map((r) => r.message.guid)).to.deep.equal([b.guid, late.guid]);
    });

    it('collapses a label to the newest place of each thread, in pages, with each thread counted', async () => {
      const inbox = newId('ibx');
      const [inb, arch] = [guid(), guid()];
      const a = message({ from: 'Ann <ann@x.test>', fromAddress: 'ann@x.test' });
      const b = reply(a, { from: 'Bob <bob@x.test>', fromAddress: 'bob@x.test' });
      const c = reply(b, { from: 'Ann Again <ann@x.test>', fromAddress: 'ann@x.test' });
      const s1 = message({ subject: 'single one' });
      const s2 = message({ subject: 'single two' });
      await index.apply(inbox, [
        put(a, loc(inb, 1, a.guid, ['\\Seen'])),
        put(s1, loc(inb, 2, s1.guid)),
        put(b, loc(inb, 3, b.guid)),
        put(s2, loc(inb, 4, s2.guid, ['\\Seen'])),
        // The newest of the thread is elsewhere: in INBOX the thread shows as b.
        put(c, loc(arch, 1, c.guid, ['\\Seen'])),
      ]);
      const rows = await index.threadPage(inbox, inb, null, 10);
      expect(rows.map((r) => r.location.uid)).to.deep.equal([4, 3, 2]);
      expect((await index.threadPage(inbox, inb, 3, 1)).map((r) => r.location.uid)).to.deep.equal([2]);
      expect((await index.threadPage(inbox, inb, 2, 10)).map((r) => r.location.uid)).to.deep.equal([]);
      const stats = await index.threadStats(inbox, [a.guid, s1.guid, guid()]);
      expect(stats.get(a.guid)).to.deep.equal({ messages: 3, unread: 1, participants: ['Ann <ann@x.test>', 'Bob <bob@x.test>'] });
      expect(stats.get(s1.guid)).to.deep.equal({ messages: 1, unread: 1, participants: ['A <a@x.test>'] });
      expect(stats.size).to.equal(2);
      // A search narrowed to a thread.
      const found = await index.search(inbox, { text: [], threadGuid: a.guid }, null, 10);
      expect(found.map((r) => r.message.guid)).to.deep.equal([c.guid, b.guid, a.guid]);
    });

    it('keeps a preview learnt once, and forgets a thread with its last message', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const m = message();
      await index.apply(inbox, [put(m, loc(lbl, 1, m.guid))]);
      expect((await index.message(inbox, m.guid))!.message.preview).to.equal(undefined);
      await index.apply(inbox, [put({ ...m, preview: 'Hello there' }, loc(lbl, 1, m.guid))]);
      await index.apply(inbox, [put({ ...m, preview: 'Changed' }, loc(lbl, 1, m.guid))]);
      expect((await index.message(inbox, m.guid))!.message.preview).to.equal('Hello there');
      await index.apply(inbox, [{ op: 'remove', labelGuid: lbl, uid: 1 }]);
      expect(await index.thread(inbox, m.guid, 10)).to.deep.equal([]);
      expect((await index.threadStats(inbox, [m.guid])).size).to.equal(0);
      // Its links went with it: a reply that comes now founds its own thread.
      const r = reply(m);
      await index.apply(inbox, [put(r, loc(lbl, 2, r.guid))]);
      expect(await threadOf(inbox, r)).to.equal(r.guid);
    });

    it('backfills mail indexed before threads, oldest first, a batch per call, by References fetched and In-Reply-To', async () => {
      const inbox = newId('ibx');
      const lbl = guid();
      const a = message();
      const b = reply(a);
      const c = reply(b);
      const lone = message();
      // Its parent named only in References (no In-Reply-To), as some mail apps send.
      const e = message({ subject: 'Re: the subject', references: [a.messageId!] });
      await index.apply(
        inbox,
        [c, lone, b, a, e].map((m, i) => put(m, loc(lbl, i + 1, m.guid))),
      );
      await engine.unthread(inbox);
      expect(await threadOf(inbox, a)).to.equal(undefined);
      // Reads go on meanwhile: a collapsed page shows unplaced messages one by one.
      expect(await index.threadPage(inbox, lbl, null, 10)).to.have.length(5);
      // What the backfill asks the mail server for: each message's place, oldest first.
      const first = await index.unthreaded(inbox, 2);
      expect(first).to.deep.equal([
        { guid: a.guid, place: { labelGuid: lbl, uid: 4 } },
        { guid: b.guid, place: { labelGuid: lbl, uid: 3 } },
      ]);
      // The References the server answers for each (here: what each was indexed with).
      const fetched = (ms: Array<{ guid: string }>) =>
        new Map(ms.map(({ guid: g }) => [g, [a, b, c, lone, e].find((m) => m.guid === g)!.references ?? []]));
      expect(await index.backfillThreads(inbox, fetched(first))).to.equal(2);
      expect(await threadOf(inbox, a)).to.equal(a.guid);
      expect(await threadOf(inbox, c)).to.equal(undefined);
      // Placed already: nothing to do.
      expect(await index.backfillThreads(inbox, fetched(first))).to.equal(0);
      const second = await index.unthreaded(inbox, 2);
      expect(second.map((m) => m.guid)).to.deep.equal([c.guid, lone.guid]);
      expect(await index.backfillThreads(inbox, fetched(second))).to.equal(2);
      const third = await index.unthreaded(inbox, 2);
      expect(third.map((m) => m.guid)).to.deep.equal([e.guid]);
      expect(await index.backfillThreads(inbox, fetched(third))).to.equal(1);
      expect(await index.unthreaded(inbox, 2)).to.deep.equal([]);
      for (const m of [a, b, c, e]) expect(await threadOf(inbox, m), m.subject!).to.equal(a.guid);
      expect(await threadOf(inbox, lone)).to.equal(lone.guid);
      // A reply to an old message, indexed now, finds it by the link the backfill kept.
      const d = message({ subject: 'Re: the subject', references: [c.messageId!] });
      await index.apply(inbox, [put(d, loc(lbl, 9, d.guid))]);
      expect(await threadOf(inbox, d)).to.equal(a.guid);
    });
  });
}
