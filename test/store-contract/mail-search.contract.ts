// The mail index's search (MailIndexStore.search, docs/search.md) on every engine: the text index
// (words, case and accents, address parts, prefixes, phrases, one field at a time), the metadata
// conditions, places (label and keywords at one place), the order and its cursor, and the text
// index kept in step with every write that adds or drops a message.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { indexSearch, type SearchQuery } from '../../lib/mail/search.ts';
import type { IndexOp, IndexSearch, LabelState, Location, MessageRecord, SearchAfter } from '../../lib/mail/types.ts';
import { idFromGuid, newId } from '../../lib/ids.ts';
import type { MailIndex, MailIndexEngine } from './mail-index.contract.ts';

const guid = () => randomBytes(16).toString('hex');
const T0 = 1_700_000_000_000;

function message(more: Partial<MessageRecord> = {}): MessageRecord {
  const g = more.guid ?? guid();
  return {
    guid: g,
    size: 1000,
    receivedAt: T0,
    date: null,
    from: 'Nobody <nobody@x.test>',
    to: 'someone@x.test',
    cc: null,
    replyTo: null,
    subject: 'nothing',
    messageId: null,
    inReplyTo: null,
    fromAddress: 'nobody@x.test',
    ...more,
  };
}

const loc = (labelGuid: string, uid: number, msgGuid: string, flags: string[] = []): Location => ({
  labelGuid,
  uid,
  msgGuid,
  modseq: 1,
  flags,
});
const put = (m: MessageRecord, l: Location): IndexOp => ({ op: 'put', message: m, location: l });
const label = (g: string, more: Partial<LabelState> = {}): LabelState => ({
  guid: g,
  path: 'INBOX',
  specialUse: null,
  uidValidity: 1,
  uidNext: 100,
  highestModseq: 1,
  fillLow: null,
  ...more,
});

export function mailSearchContract(engineName: string, open: () => Promise<MailIndexEngine>): void {
  describe(`MailIndexStore.search contract: ${engineName}`, function () {
    let engine: MailIndexEngine;
    let index: MailIndex;

    before(async () => {
      engine = await open();
      index = engine.newIndex();
    });
    after(async () => {
      await engine?.close();
    });

    /** An inbox holding `ms` in one label (UIDs in order), and a search of it by API query. */
    async function inboxOf(ms: MessageRecord[], flags: (m: MessageRecord, i: number) => string[] = () => []) {
      const inbox = newId('ibx');
      const inb = guid();
      await index.apply(
        inbox,
        ms.map((m, i) => put(m, loc(inb, i + 1, m.guid, flags(m, i)))),
        label(inb),
      );
      const find = async (q: Partial<SearchQuery>, extra: Partial<IndexSearch> = {}, after: SearchAfter | null = null, limit = 100) =>
        (await index.search(inbox, { ...indexSearch({ limit, ...q }), ...extra }, after, limit)).map((r) => r.message.guid);
      return { inbox, inb, find };
    }

    it('matches words of one field at a time, case- and accent-insensitive, address parts and prefixes', async () => {
      const a = message({ from: 'Élodie Müller <elodie.mueller@Example.COM>', subject: 'Facture de mars' });
      const b = message({ from: 'Bob <bob@other.test>', to: 'elodie@example.com', subject: 'Invoices for March', cc: 'Zoë <zoe@cc.test>' });
      const c = message({ from: 'Carol <carol@example.com>', subject: '日本語 のメール', receivedAt: T0 - 1 });
      const { find } = await inboxOf([a, b, c]);
      expect(await find({ from: 'elodie' })).to.deep.equal([a.guid]);
      expect(await find({ from: 'ELODIE muller' })).to.deep.equal([a.guid]);
      expect(await find({ from: 'élo' }), 'a prefix').to.deep.equal([a.guid]);
      expect(await find({ from: 'example.com' })).to.have.members([a.guid, c.guid]);
      expect(await find({ from: 'elodie.mueller@example.com' })).to.deep.equal([a.guid]);
      expect(await find({ from: 'mueller@example' }), 'a phrase: its words in order').to.deep.equal([a.guid]);
      expect(await find({ from: 'example.mueller' }), 'not in that order').to.deep.equal([]);
      expect(await find({ to: 'elodie' }), 'To only').to.deep.equal([b.guid]);
      expect(await find({ cc: 'zoe' })).to.deep.equal([b.guid]);
      expect(await find({ subject: 'invoice march' }), 'every word, anywhere').to.deep.equal([b.guid]);
      expect(await find({ subject: 'invoice april' })).to.deep.equal([]);
      expect(await find({ subject: 'mars' })).to.deep.equal([a.guid]);
      expect(await find({ subject: '日本語' })).to.deep.equal([c.guid]);
      expect(await find({ from: 'bob', subject: 'invoices' }), 'conditions together').to.deep.equal([b.guid]);
      expect(await find({ from: 'bob', subject: 'facture' })).to.deep.equal([]);
      expect(await find({ subject: 'elodie' }), 'a word of another field').to.deep.equal([]);
    });

    it('matches a last word shorter than the minimum prefix as a whole word, and refuses more words or prefixes than the bounds', async () => {
      const two = message({ subject: 'Part 2 of the plan' });
      const many = message({ subject: 'Part 22 of the plan', receivedAt: T0 - 1 });
      const { find } = await inboxOf([two, many]);
      expect(await find({ subject: 'part 2' }), 'one character: that word only').to.deep.equal([two.guid]);
      expect(await find({ subject: 'part 22' })).to.deep.equal([many.guid]);
      expect(await find({ subject: 'pl' }), 'two characters: a prefix').to.have.members([two.guid, many.guid]);
      const bounds = { maxWords: 3, maxPrefixes: 2, minPrefix: 3, budgetMs: 1000 };
      expect(() => indexSearch({ limit: 10, subject: 'a b c d' }, bounds)).to.throw(/4 words .*at most 3/);
      expect(() => indexSearch({ limit: 10, from: 'abc', subject: 'def ghi' }, bounds)).to.throw(/3 space-separated pieces .*at most 2/);
      expect(
        indexSearch({ limit: 10, from: 'abc', subject: 'de gh' }, bounds).text.flatMap((t) => t.phrases),
        'short last words are no prefixes',
      ).to.deep.equal([
        { words: ['abc'], prefix: true },
        { words: ['de'], prefix: false },
        { words: ['gh'], prefix: false },
      ]);
    });

    it('answers dates, sizes and attachments as JMAP says: after and minSize inclusive, before and maxSize not', async () => {
      const old = message({ receivedAt: T0 - 86_400_000, size: 500, hasAttachment: true });
      const mid = message({ receivedAt: T0, size: 1000, hasAttachment: false });
      const sealed = message({ receivedAt: T0 + 86_400_000, size: 2000, hasAttachment: null });
      const { find } = await inboxOf([old, mid, sealed]);
      const iso = (t: number) => new Date(t).toISOString();
      expect(await find({ after: iso(T0) })).to.deep.equal([sealed.guid, mid.guid]);
      expect(await find({ before: iso(T0) })).to.deep.equal([old.guid]);
      expect(await find({ after: iso(T0 - 1), before: iso(T0 + 1) })).to.deep.equal([mid.guid]);
      expect(await find({ minSize: 1000 })).to.deep.equal([sealed.guid, mid.guid]);
      expect(await find({ maxSize: 1000 })).to.deep.equal([old.guid]);
      expect(await find({ hasAttachment: true })).to.deep.equal([old.guid]);
      expect(await find({ hasAttachment: false }), 'one that cannot be told matches neither').to.deep.equal([mid.guid]);
    });

    it('holds label and keywords at one same place: flags are per label', async () => {
      const inbox = newId('ibx');
      const [inb, arch] = [guid(), guid()];
      const both = message({ receivedAt: T0 + 2 });
      const flagged = message({ receivedAt: T0 + 1 });
      const plain = message({ receivedAt: T0 });
      await index.apply(
        inbox,
        [
          put(both, loc(inb, 1, both.guid, ['\\Seen'])),
          put(flagged, loc(inb, 2, flagged.guid, ['\\Flagged', '$Invoice'])),
          put(plain, loc(inb, 3, plain.guid, ['Junk'])),
        ],
        label(inb),
      );
      await index.apply(inbox, [put(both, loc(arch, 7, both.guid, ['\\Flagged']))], label(arch, { path: 'Archive' }));
      const find = async (q: Partial<SearchQuery>) =>
        (await index.search(inbox, indexSearch({ limit: 10, ...q }), null, 10)).map((r) => r.message.guid);
      const lbl = (g: string) => idFromGuid('lbl', g);
      expect(await find({ hasKeyword: 'flagged' })).to.deep.equal([both.guid, flagged.guid]);
      expect(await find({ hasKeyword: 'flagged', inLabel: lbl(inb) }), 'flagged in Archive only').to.deep.equal([flagged.guid]);
      expect(await find({ inLabel: lbl(arch) })).to.deep.equal([both.guid]);
      expect(await find({ hasKeyword: 'seen', notKeyword: 'flagged' }), 'seen and not flagged at one place').to.deep.equal([both.guid]);
      expect(await find({ notKeyword: 'seen' })).to.deep.equal([both.guid, flagged.guid, plain.guid]);
      expect(await find({ notKeyword: 'seen', inLabel: lbl(inb) })).to.deep.equal([flagged.guid, plain.guid]);
      expect(await find({ hasKeyword: 'junk' }), 'any IMAP spelling of the flag').to.deep.equal([plain.guid]);
      expect(await find({ hasKeyword: '$invoice' }), 'a custom keyword, case-insensitive').to.deep.equal([flagged.guid]);
      const [row] = await index.search(inbox, indexSearch({ limit: 10, hasKeyword: '$Invoice' }), null, 10);
      expect(row!.locations).to.deep.equal([loc(inb, 2, flagged.guid, ['\\Flagged', '$Invoice'])]);
      expect(
        (await index.search(inbox, indexSearch({ limit: 10, inLabel: lbl(arch) }), null, 10))[0]!.locations,
        'every place of a result',
      ).to.have.length(2);
    });

    it('orders newest first, ties by GUID, and pages from a cursor without skipping or repeating', async () => {
      const ms = Array.from({ length: 9 }, (_, i) => message({ receivedAt: T0 + Math.floor(i / 3), subject: 'paged report' }));
      const { find } = await inboxOf(ms);
      const expected = [...ms].sort((a, b) => b.receivedAt - a.receivedAt || (a.guid < b.guid ? 1 : -1)).map((m) => m.guid);
      expect(await find({ subject: 'report' })).to.deep.equal(expected);
      const seen: string[] = [];
      let after: SearchAfter | null = null;
      for (let page = 0; page < 5; page++) {
        const got = await find({ subject: 'report' }, {}, after, 4);
        seen.push(...got);
        if (got.length < 4) break;
        const last = ms.find((m) => m.guid === got.at(-1))!;
        after = { receivedAt: last.receivedAt, guid: last.guid };
      }
      expect(seen).to.deep.equal(expected);
      expect(await find({}, { guids: [ms[0]!.guid, ms[5]!.guid, guid()] }), 'only the GUIDs given, newest first').to.deep.equal([
        ms[5]!.guid,
        ms[0]!.guid,
      ]);
      // Many GUIDs (a body search matching much of the inbox) take another plan on SQLite.
      const many = [ms[5]!.guid, ...Array.from({ length: 6_000 }, () => guid()), ms[0]!.guid];
      expect(await find({}, { guids: many }), 'only the GUIDs given, among many').to.deep.equal([ms[5]!.guid, ms[0]!.guid]);
      expect(await find({}, { guids: [] })).to.deep.equal([]);
    });

    it('keeps the text index in step: a message gone from every label, a label dropped, a refill, a removed inbox', async () => {
      const [a, b] = [message({ subject: 'ephemeral one' }), message({ subject: 'ephemeral two' })];
      const { inbox, inb, find } = await inboxOf([a, b]);
      expect(await find({ subject: 'ephemeral' })).to.have.members([a.guid, b.guid]);
      await index.apply(inbox, [{ op: 'remove', labelGuid: inb, uid: 1 }]);
      expect(await find({ subject: 'ephemeral' })).to.deep.equal([b.guid]);
      // The same message put back (another label): found again.
      const other = guid();
      await index.apply(inbox, [put(a, loc(other, 1, a.guid))], label(other, { path: 'Other' }));
      expect(await find({ subject: 'ephemeral' })).to.have.members([a.guid, b.guid]);
      await index.dropLabel(inbox, other);
      expect(await find({ subject: 'one' })).to.deep.equal([]);
      // A refill swapped in: the old rows' messages go, the staged ones are searchable.
      const c = message({ subject: 'refilled' });
      await index.apply(inbox, [{ op: 'stage', message: c, location: loc(inb, 1, c.guid) }]);
      expect(await find({ subject: 'refilled' }), 'staged: out of sight').to.deep.equal([]);
      await index.commitStaged(inbox, label(inb, { uidValidity: 2 }));
      expect(await find({ subject: 'refilled' })).to.deep.equal([c.guid]);
      expect(await find({ subject: 'ephemeral' })).to.deep.equal([]);
      await index.dropInbox(inbox);
      expect(await find({ subject: 'refilled' })).to.deep.equal([]);
    });

    it('another process sharing the store finds what this one wrote; one inbox never answers for another', async () => {
      const m = message({ subject: 'shared word' });
      const { find } = await inboxOf([m]);
      const { find: elsewhere } = await inboxOf([message({ subject: 'shared word' })]);
      expect(await find({ subject: 'shared' })).to.deep.equal([m.guid]);
      expect(await elsewhere({ subject: 'shared' }))
        .to.have.length(1)
        .and.not.include(m.guid);
      const other = engine.newIndex();
      const inbox2 = newId('ibx');
      const lbl = guid();
      const n = message({ subject: 'crossprocess' });
      await other.apply(inbox2, [put(n, loc(lbl, 1, n.guid))], label(lbl));
      expect(
        (await index.search(inbox2, indexSearch({ limit: 5, subject: 'crossprocess' }), null, 5)).map((r) => r.message.guid),
      ).to.deep.equal([n.guid]);
    });
  });
}
