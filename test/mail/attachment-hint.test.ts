// hasAttachment (docs/search.md) from the top-level Content-Type the index sync fetches.
import { expect } from 'chai';
import { hasAttachmentHint } from '../../lib/mail/attachment-hint.ts';

const header = (text: string) => Buffer.from(`${text}\r\n\r\n`, 'latin1');

describe('attachment hint', () => {
  it('true for multipart/mixed and a single part that is neither text nor multipart', () => {
    expect(hasAttachmentHint(header('Content-Type: multipart/mixed; boundary="b"'))).to.equal(true);
    expect(hasAttachmentHint(header('Content-Type:\r\n\tMULTIPART/Mixed;\r\n boundary=b'))).to.equal(true);
    expect(hasAttachmentHint(header('Content-Type: application/pdf; name="a.pdf"'))).to.equal(true);
    expect(hasAttachmentHint(header('Content-Type: image/png'))).to.equal(true);
  });

  it('false for text, alternative, related, a report, a message, or no Content-Type at all', () => {
    for (const type of [
      'text/plain; charset=utf-8',
      'text/html',
      'multipart/alternative; boundary=b',
      'multipart/related; boundary=b',
      'multipart/report; report-type=delivery-status',
      'message/rfc822',
    ]) {
      expect(hasAttachmentHint(header(`Content-Type: ${type}`)), type).to.equal(false);
    }
    expect(hasAttachmentHint(header(''))).to.equal(false);
  });

  it('null for PGP/MIME: the parts cannot be seen', () => {
    expect(hasAttachmentHint(header('Content-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary=b'))).to.equal(null);
  });
});
