// The pure parts of sending: the header-block helpers (From, Bcc removal), delivery status
// reports, and decoding long base64 fields of a send body straight from its bytes.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { parseSendBody } from '../../lib/http/send-body.ts';
import { parseDsn } from '../../lib/send/dsn.ts';
import { draftFingerprint } from '../../lib/send/service.ts';
import { fromAddress, splitHeader, withoutField } from '../../lib/send/rfc5322.ts';

const head = (text: string) => splitHeader(Buffer.from(text)).head;

describe('sending: parsing', () => {
  it('finds the one From address, or none when the header block is not one', () => {
    expect(fromAddress(head('From: "Ann, B." <Ann@Example.org>\r\nTo: x@y.z\r\n\r\nbody'))).to.equal('ann@example.org');
    expect(fromAddress(head('Subject: s\r\nFrom:\r\n ann@example.org\r\n\r\n'))).to.equal('ann@example.org');
    expect(fromAddress(head('From: a@example.org, b@example.org\r\n\r\n'))).to.equal(null);
    expect(fromAddress(head('From: a@example.org\r\nFrom: a@example.org\r\n\r\n'))).to.equal(null);
    expect(fromAddress(head('To: x@y.z\r\n\r\nFrom: a@example.org\r\n'))).to.equal(null);
    expect(fromAddress(head('From a@example.org  Fri Feb 22 17:06:23 2008\r\nFrom: a@example.org\r\n\r\n'))).to.equal(null);
    expect(fromAddress(head('  folded\r\nFrom: a@example.org\r\n\r\n'))).to.equal(null);
    expect(fromAddress(head('From: a@example.org\n\nLF only'))).to.equal('a@example.org');
  });

  it('takes only a well-formed mailbox: what a mail app shows as the author is what was checked', () => {
    const from = (value: string) => fromAddress(head(`From: ${value}\r\nTo: x@y.z\r\n\r\n`));
    // Each of these reads as demo@example.org to a lenient parser, while a reader sees the CEO.
    for (const spoof of [
      'ceo@corp.example\r<demo@example.org>',
      '<ceo@corp.example <demo@example.org>',
      'ceo@corp.example <demo@example.org',
      'ceo@corp.example <demo@example.org>',
      'demo@example.org>',
      '<demo@example.org>>',
      '<demo@example.org> ceo@corp.example',
      '"ceo@corp.example <demo@example.org>',
      'CEO (ceo@corp.example <demo@example.org>',
      'demo@example.org\u0000ceo@corp.example',
      '<demo@example.org>\u0000',
      'demo@example.org,',
      ',demo@example.org',
      'Board: demo@example.org;',
      '<@relay.example:demo@example.org>',
      'demo . x@example.org',
      'demo@example.org\r',
      '',
    ])
      expect(from(spoof), JSON.stringify(spoof)).to.equal(null);
    // Well-formed ones, folding, comments and quoting included.
    const good: Record<string, string> = {
      'demo@example.org': 'demo@example.org',
      '<Demo@Example.org>': 'demo@example.org',
      'Demo User <demo@example.org>': 'demo@example.org',
      '"Demo, User" <demo@example.org>': 'demo@example.org',
      '"He said \\"hi\\"" <demo@example.org>': 'demo@example.org',
      'John Q. Public <demo@example.org>': 'demo@example.org',
      '=?utf-8?q?D=C3=A9mo?= <demo@example.org>': 'demo@example.org',
      'Démo Ünïcode <démo@example.org>': 'démo@example.org',
      'demo@example.org (Demo (the one) User)': 'demo@example.org',
      '(c) Demo <demo@example.org> (c)': 'demo@example.org',
      '"demo"@example.org': 'demo@example.org',
      '"de mo"@example.org': '"de mo"@example.org',
      'Demo\r\n <demo@example.org>': 'demo@example.org',
      'demo@[192.0.2.1]': 'demo@[192.0.2.1]',
    };
    for (const [value, address] of Object.entries(good)) expect(from(value), JSON.stringify(value)).to.equal(address);
    // A bare CR at the end of the field, before its CRLF, is not folding either.
    expect(fromAddress(head('From: demo@example.org\r\r\n\r\n'))).to.equal(null);
    // Bytes that are not UTF-8 (old mail's Latin-1) pass in a display name, never in the address.
    const latin1 = (before: string, after: string) =>
      fromAddress(Buffer.concat([Buffer.from(`From: ${before}`), Buffer.from([0xe9]), Buffer.from(`${after}\r\n\r\n`)]));
    expect(latin1('"Ren', '" <demo@example.org>')).to.equal('demo@example.org');
    expect(latin1('Ren', ' <demo@example.org>')).to.equal('demo@example.org');
    expect(latin1('<demo', '@example.org>')).to.equal(null);
  });

  it('removes every Bcc field with its continuation lines, and nothing else', () => {
    const h = head('From: a@example.org\r\nBcc: x@example.org,\r\n  y@example.org\r\nTo: b@example.org\r\nbcc: z@example.org\r\n\r\n');
    expect(withoutField(h, 'bcc').toString()).to.equal('From: a@example.org\r\nTo: b@example.org\r\n\r\n');
    const none = head('From: a@example.org\r\n\r\n');
    expect(withoutField(none, 'bcc')).to.equal(none);
  });

  it("reads a delivery status report: the envelope id and each recipient's action and status", () => {
    const report = [
      'From: MAILER-DAEMON@mx.postern.test (Mail Delivery System)',
      'Content-Type: multipart/report; report-type=delivery-status; boundary="B"',
      '',
      '--B',
      'Content-Type: text/plain',
      '',
      "I'm sorry to have to inform you...",
      '',
      '--B',
      'Content-Description: Delivery report',
      'Content-Type: message/delivery-status',
      '',
      'Reporting-MTA: dns; mx.postern.test',
      'Original-Envelope-Id: 0123abcd+2Bx',
      '',
      'Final-Recipient: rfc822; bad@example.org',
      'Original-Recipient: rfc822;bad@example.org',
      'Action: failed',
      'Status: 5.1.1',
      'Diagnostic-Code: smtp; 550 5.1.1 <bad@example.org> no such user',
      '',
      'Final-Recipient: rfc822; slow@example.org',
      'Action: delayed',
      'Status: 4.4.1',
      '',
      '--B--',
      '',
    ].join('\r\n');
    expect(parseDsn(Buffer.from(report))).to.deep.equal({
      envid: '0123abcd+x',
      recipients: [
        { recipient: 'bad@example.org', action: 'failed', status: '5.1.1', diagnostic: '550 5.1.1 <bad@example.org> no such user' },
        { recipient: 'slow@example.org', action: 'delayed', status: '4.4.1', diagnostic: null },
      ],
    });
    expect(parseDsn(Buffer.from('From: a@example.org\r\n\r\nhello'))).to.equal(null);
  });

  it('decodes long base64 fields from the body bytes, and leaves everything else to JSON.parse', () => {
    const bytes = randomBytes(300_000);
    const body = Buffer.from(
      JSON.stringify({ from: 'a@example.org', to: ['b@example.org'], raw: bytes.toString('base64'), note: 'x\\"y' }),
    );
    const { json, fields } = parseSendBody(body);
    const parsed = json as { raw: string; from: string; note: string };
    expect(parsed.from).to.equal('a@example.org');
    expect(parsed.note).to.equal('x\\"y');
    expect(fields.get(parsed.raw)!.bytes.equals(bytes)).to.equal(true);
    // Not padded to a multiple of 4: not decoded here (the route answers 400).
    const odd = Buffer.from(JSON.stringify({ raw: `${bytes.toString('base64')}A` }));
    expect((parseSendBody(odd).json as { raw: string }).raw).to.have.length(bytes.toString('base64').length + 1);
    expect(() => parseSendBody(Buffer.from('{"raw": '))).to.throw(/not valid JSON/);
  });

  it('decodes only canonical base64 from the bytes; anything else reaches JSON.parse whole', () => {
    const b64 = randomBytes(3000).toString('base64');
    const cases = {
      // Padding in the middle, a character outside the alphabet, whitespace, stray bits (Q is
      // 010000: "QR==" has bits left over), an escaped slash: none is taken as the bytes.
      middlePad: `${b64.slice(0, 400)}QQ==${b64.slice(404)}`,
      outside: `${b64.slice(0, 400)}*${b64.slice(401)}`,
      space: `${b64.slice(0, 400)} ${b64.slice(401)}`,
      strayBits: `${b64}QR==`,
      escaped: `${b64.slice(0, 400)}\\/${b64.slice(402)}`,
    };
    for (const [name, value] of Object.entries(cases)) {
      const body = Buffer.from(`{"from":"a@example.org","raw":"${value}","after":"${b64}"}`);
      const { json, fields } = parseSendBody(body);
      const parsed = json as { raw: string; after: string };
      expect(parsed.raw, name).to.equal(JSON.parse(`"${value}"`));
      // The string after it is still found and decoded: the scan kept its place.
      expect(fields.get(parsed.after)?.bytes.toString('base64'), name).to.equal(b64);
    }
    // Short strings are JSON.parse's; a long one with escapes too, wherever its quotes are.
    const tricky = Buffer.from(JSON.stringify({ note: `"${'x'.repeat(2000)}\\"`, raw: b64 }));
    const { json, fields } = parseSendBody(tricky);
    expect((json as { note: string }).note).to.equal(`"${'x'.repeat(2000)}\\"`);
    expect(fields.get((json as { raw: string }).raw)?.bytes.toString('base64')).to.equal(b64);
  });

  it('fingerprints a decoded field as its base64 text: the same hash whichever way the body was parsed', () => {
    // Around the 48 KB slices the bytes are re-encoded in.
    for (const n of [0, 1, 2, 3, 49_151, 49_152, 49_153, 200_000]) {
      const bytes = randomBytes(n);
      expect(draftFingerprint(['7', { base64: bytes }, 'a@example.org']), `${n} bytes`).to.equal(
        draftFingerprint(['7', bytes.toString('base64'), 'a@example.org']),
      );
    }
    expect(draftFingerprint(['7', 'QQ==', 'a'])).not.to.equal(draftFingerprint(['7', 'QQ==a']));
  });

  it('decodes in place, and gives JSON.parse the text intact when a long string turns out not to be canonical', () => {
    // Several decoding steps (64 KB of text each) go by before the flaw; their bytes were
    // already written over their text and must be put back.
    const b64 = randomBytes(300_000).toString('base64');
    for (const at of [0, 65_536, 65_537, 200_003, b64.length - 5]) {
      const value = `${b64.slice(0, at)}*${b64.slice(at + 1)}`;
      const { json, fields } = parseSendBody(Buffer.from(`{"raw":"${value}","after":"${b64}"}`));
      const parsed = json as { raw: string; after: string };
      expect(parsed.raw === value, `flaw at ${at}`).to.equal(true);
      expect(fields.get(parsed.after)?.bytes.toString('base64') === b64, `after, flaw at ${at}`).to.equal(true);
    }
  });
});
