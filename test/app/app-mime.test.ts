// The web app's MIME writer (web/compose/mime.ts), run in Node and read back with mailparser, an
// independent parser: what the browser builds must mean what the member typed, whatever the
// characters, and stay within RFC 5322's line limits.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { simpleParser, type AddressObject } from 'mailparser';
import { buildMessage, encodeWords, parseAddressList, quotedPrintable, type Outgoing } from '../../web/compose/mime.ts';

const base = (over: Partial<Outgoing> = {}): Outgoing => ({
  from: { address: 'me@example.org' },
  to: [{ address: 'you@example.org' }],
  cc: [],
  bcc: [],
  subject: 'hello',
  text: 'hi\n',
  attachments: [],
  messageId: '<id-1@example.org>',
  date: new Date('2026-11-22T10:00:00Z'),
  ...over,
});
const text = (bytes: Uint8Array) => Buffer.from(bytes).toString('latin1');
const headOf = (bytes: Uint8Array) => text(bytes).split('\r\n\r\n')[0]!;
const addresses = (a: AddressObject | AddressObject[] | undefined) =>
  (Array.isArray(a) ? a : a ? [a] : []).flatMap((x) => x.value.map((v) => ({ name: v.name, address: v.address })));

describe('web app MIME writer (web/compose/mime.ts)', () => {
  it('writes plain ASCII as 7bit with the header fields a message needs', async () => {
    const raw = buildMessage(base());
    const head = headOf(raw);
    expect(head).to.match(
      /^From: me@example.org\r\nTo: you@example.org\r\nSubject: hello\r\nDate: .+\r\nMessage-ID: <id-1@example.org>\r\nMIME-Version: 1.0\r\nContent-Type: text\/plain; charset=us-ascii\r\nContent-Transfer-Encoding: 7bit$/,
    );
    const parsed = await simpleParser(Buffer.from(raw));
    expect(parsed.text).to.equal('hi\n');
    expect(parsed.date?.toISOString()).to.equal('2026-11-22T10:00:00.000Z');
  });

  it('encodes non-ASCII subjects and names as encoded words that never split a character, and folds long fields', async () => {
    const subject = `${'Grüße aus Zürich — 測試 ✓ 😀 '.repeat(6)}end`;
    const raw = buildMessage(
      base({
        subject,
        to: [
          { name: 'Björn Ångström', address: 'b@example.org' },
          { name: 'Doe, Jane "JD"', address: 'jd@example.org' },
          ...Array.from({ length: 8 }, (_, i) => ({ address: `person${i}@example.org` })),
        ],
      }),
    );
    const head = headOf(raw);
    expect(/[^\x00-\x7f]/.test(head), 'the header is ASCII').to.equal(false);
    for (const line of head.split('\r\n')) expect(line.length, line).to.be.at.most(78);
    for (const word of head.match(/=\?UTF-8\?B\?[^?]*\?=/g)!) {
      expect(word.length).to.be.at.most(75);
      // Each word decodes to whole characters on its own (RFC 2047 5).
      expect(Buffer.from(word.slice(10, -2), 'base64').toString('utf8')).to.not.include('\uFFFD');
    }
    const parsed = await simpleParser(Buffer.from(raw));
    expect(parsed.subject).to.equal(subject);
    expect(addresses(parsed.to).slice(0, 2)).to.deep.equal([
      { name: 'Björn Ångström', address: 'b@example.org' },
      { name: 'Doe, Jane "JD"', address: 'jd@example.org' },
    ]);
    expect(addresses(parsed.to)).to.have.length(10);
  });

  it('keeps an ASCII subject exactly, runs of spaces too, when it is folded', async () => {
    const subject = `a  b ${'word '.repeat(30)}end`;
    const parsed = await simpleParser(Buffer.from(buildMessage(base({ subject }))));
    expect(parsed.subject).to.equal(subject);
  });

  it('writes UTF-8 text as quoted-printable that round-trips: long lines, trailing spaces, "=", CRLF', async () => {
    const body = `Grüße ½ € 😀 = equals\ntrailing space \t\n${'x'.repeat(300)}\n${'ü'.repeat(100)}\n.\nFrom the start\n`;
    const raw = buildMessage(base({ text: body }));
    for (const line of text(raw).split('\r\n')) expect(line.length).to.be.at.most(76);
    expect(/[^\x00-\x7f]/.test(text(raw))).to.equal(false);
    expect((await simpleParser(Buffer.from(raw))).text).to.equal(body);
    expect(quotedPrintable('a=b ')).to.equal('a=3Db=20');
  });

  it('attaches files as base64 with RFC 2231 names, and a forwarded message whole', async () => {
    const data = randomBytes(5000);
    const forwarded = Buffer.from('From: x@example.org\r\nSubject: Ursprünglich\r\n\r\nOriginal body\r\n');
    const raw = buildMessage(
      base({
        text: 'see attached',
        attachments: [
          { filename: 'Bericht für Q3.pdf', contentType: 'application/pdf', data },
          { filename: 'a.bin', contentType: 'not a type', data: Buffer.from('x') },
        ],
        forwarded: { bytes: forwarded, filename: 'Ursprünglich.eml' },
      }),
    );
    const parsed = await simpleParser(Buffer.from(raw), { keepCidLinks: true });
    expect(parsed.text?.trim()).to.equal('see attached');
    const [fwd, pdf, bin] = parsed.attachments;
    expect(fwd!.contentType).to.equal('message/rfc822');
    expect(Buffer.from(fwd!.content).equals(forwarded)).to.equal(true);
    expect(pdf!.filename).to.equal('Bericht für Q3.pdf');
    expect(pdf!.contentType).to.equal('application/pdf');
    expect(Buffer.from(pdf!.content).equals(data)).to.equal(true);
    expect(bin!.contentType).to.equal('application/octet-stream');
  });

  it('threads: In-Reply-To and References', async () => {
    const parsed = await simpleParser(
      Buffer.from(buildMessage(base({ inReplyTo: '<p@example.org>', references: ['<root@example.org>', '<p@example.org>'] }))),
    );
    expect(parsed.inReplyTo).to.equal('<p@example.org>');
    expect(parsed.references).to.deep.equal(['<root@example.org>', '<p@example.org>']);
  });

  it('reads address boxes; refuses what is not an address', () => {
    expect(parseAddressList('a@example.org, Ann <ann@example.org>; "Doe, J" <j@x.org>,')).to.deep.equal([
      { address: 'a@example.org' },
      { name: 'Ann', address: 'ann@example.org' },
      { name: 'Doe, J', address: 'j@x.org' },
    ]);
    expect(parseAddressList('  ')).to.deep.equal([]);
    expect(() => parseAddressList('Ann <not-an-address>')).to.throw(/not an e-mail address: Ann <not-an-address>/);
    expect(() => parseAddressList('a@b@c.org')).to.throw(/not an e-mail address/);
    expect(encodeWords('ü'.repeat(40)).every((w) => w.length <= 75)).to.equal(true);
  });
});
