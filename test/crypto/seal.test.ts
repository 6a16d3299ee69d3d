// The sealing function on its own: what a zero-access inbox stores opens, with openpgp.js and
// with GnuPG as a mail app would, to exactly the bytes that arrived, and shows only the routing
// headers in clear.
import { expect } from 'chai';
import { simpleParser } from 'mailparser';
import { clearHeaders, isPgpMime, seal, sealedEpoch } from '../../lib/mail/sealing.ts';
import { corpusFiles, itWithCorpus } from '../helpers/corpus-files.ts';
import { gpgDecrypt, openSealed, testEpochKey, type TestEpochKey } from '../helpers/seal-helpers.ts';

describe('sealing a message for a zero-access inbox', function () {
  this.timeout(60_000);
  let key: TestEpochKey;
  before(async () => {
    key = await testEpochKey();
  });

  /** The headers a sealed message keeps in clear (folded To included), in their order. */
  const routing = [
    'From: Alice <alice@example.org>',
    'To: bob@example.org,',
    '  carol@example.org',
    'Cc: dave@example.org',
    'Subject: the secret plan',
    'Date: Mon, 1 Jan 2024 00:00:00 +0000',
    'Message-ID: <m1@example.org>',
    'In-Reply-To: <m0@example.org>',
    'References: <m-1@example.org> <m0@example.org>',
  ];
  const plain = Buffer.from(
    [
      'Received: from somewhere by mx; Mon, 1 Jan 2024 00:00:00 +0000',
      ...routing,
      'X-Private: keep me inside',
      'Content-Type: text/plain; charset=utf-8',
      '',
      'the body nobody may read: rosebud',
      '',
    ].join('\r\n'),
  );

  it('is RFC 3156 multipart/encrypted with exactly the routing headers in clear', async () => {
    const sealed = await seal(plain, key.sealKey);
    const text = sealed.toString('latin1');
    expect(text).to.not.include('rosebud');
    expect(text).to.not.include('X-Private');
    expect(text).to.not.include('Received:');
    const parsed = await simpleParser(sealed);
    expect(parsed.subject).to.equal('the secret plan');
    expect(parsed.messageId).to.equal('<m1@example.org>');
    expect(parsed.inReplyTo).to.equal('<m0@example.org>');
    expect(parsed.headers.get('content-type')).to.deep.include({ value: 'multipart/encrypted' });
    expect(text).to.match(/protocol="application\/pgp-encrypted"/);
    expect(text).to.include('Version: 1');
    expect(text).to.include('-----BEGIN PGP MESSAGE-----');
    expect(sealedEpoch(sealed)).to.equal(key.sealKey.epoch);
    expect(sealedEpoch(plain)).to.equal(null);
    expect(isPgpMime(sealed)).to.equal(true);
    expect(isPgpMime(plain)).to.equal(false);
    // A sender's own PGP/MIME, its Content-Type folded: no plaintext there either.
    expect(
      isPgpMime(
        Buffer.from(
          'Subject: x\r\nContent-Type: multipart/encrypted;\r\n protocol="application/pgp-encrypted"; boundary=b\r\n\r\n--b--\r\n',
        ),
      ),
    ).to.equal(true);
    // The words in a body are not a header.
    expect(
      isPgpMime(Buffer.from('Subject: x\r\n\r\nContent-Type: multipart/encrypted; protocol="application/pgp-encrypted"\r\n')),
    ).to.equal(false);
    // Bare LF nowhere: the outer message is CRLF throughout.
    expect(/[^\r]\n/.test(text)).to.equal(false);
  });

  it('opens to the original bytes with openpgp.js and with GnuPG (gpg --decrypt)', async () => {
    const sealed = await seal(plain, key.sealKey);
    expect(Buffer.compare(await openSealed(sealed, key), plain)).to.equal(0);
    expect(Buffer.compare(await gpgDecrypt(sealed, key), plain)).to.equal(0);
  });

  it('keeps folded clear headers whole and takes nothing from the body', () => {
    const got = clearHeaders(plain);
    expect(got).to.equal([...routing, ''].join('\r\n'));
    expect(clearHeaders(Buffer.from('Subject: x\n\nFrom: not a header\n'))).to.equal('Subject: x\r\n');
  });

  it('seals what cannot be parsed whole: empty, headerless, binary junk, bare CR', async () => {
    for (const raw of [
      Buffer.alloc(0),
      Buffer.from('just text, no headers at all'),
      Buffer.from([0, 1, 2, 255, 13, 10, 13, 10, 0]),
      Buffer.from('Subject: a\rb\r\n\r\nbody\r'),
    ]) {
      const sealed = await seal(raw, key.sealKey);
      expect(Buffer.compare(await openSealed(sealed, key), raw)).to.equal(0);
    }
  });

  itWithCorpus('seals every corpus message and opens it byte for byte', async () => {
    let n = 0;
    for (const { name, raw } of corpusFiles()) {
      const sealed = await seal(raw, key.sealKey);
      expect(Buffer.compare(await openSealed(sealed, key), raw), name).to.equal(0);
      n++;
    }
    expect(n).to.be.greaterThan(370);
  });
});
