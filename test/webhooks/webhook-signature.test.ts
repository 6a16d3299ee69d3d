// Standard Webhooks v1 signatures (lib/webhooks/signature.ts), checked by the reference verifier
// (the standardwebhooks package), not by Postern's own code: a mistake shared by signer and
// checker would otherwise pass.
import { expect } from 'chai';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import {
  newWebhookSecret,
  secretKey,
  signedHeaders,
  signatureOf,
  webhookBody,
  webhookBodyOf,
  webhookSecret,
} from '../../lib/webhooks/signature.ts';

const verifies = (secret: string, body: string, headers: Record<string, string>): boolean => {
  try {
    new Webhook(secret).verify(body, headers);
    return true;
  } catch (err) {
    if (err instanceof WebhookVerificationError) return false;
    throw err;
  }
};

describe('webhooks: Standard Webhooks signatures', () => {
  const body = webhookBody('message.received', '2026-11-25T10:00:00.000Z', { id: 'evt_1', cursor: 'c_1', data: { subject: 'Héllo ✉' } });

  it('makes whsec_ secrets of 32 random bytes', () => {
    const a = newWebhookSecret();
    expect(a).to.match(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(secretKey(a)).to.have.length(32);
    expect(newWebhookSecret()).to.not.equal(a);
    expect(webhookSecret(secretKey(a))).to.equal(a);
    // The reference library reads the same key out of it: its signature is ours.
    const key = Buffer.alloc(32, 7);
    expect(new Webhook(key, { format: 'raw' }).sign('m', new Date(0), 'b')).to.equal(signatureOf(webhookSecret(key), 'm', 0, 'b'));
    expect(() => secretKey('nope')).to.throw(/whsec_/);
    expect(() => secretKey('whsec_short')).to.throw(/24 to 64/);
    expect(() => secretKey('whsec_' + '!'.repeat(44))).to.throw(/24 to 64/);
  });

  it('shapes the body as {type, timestamp, data}', () => {
    expect(JSON.parse(body)).to.deep.equal({
      type: 'message.received',
      timestamp: '2026-11-25T10:00:00.000Z',
      data: { id: 'evt_1', cursor: 'c_1', data: { subject: 'Héllo ✉' } },
    });
    expect(JSON.parse(webhookBody('x.y', new Date(0), null)).timestamp).to.equal('1970-01-01T00:00:00.000Z');
    // From data already serialised (the log's JSON): byte for byte what serialising the whole writes.
    const data = { id: 'evt_1', cursor: 'c_1', data: { subject: 'Héllo "✉"\n', n: 1.5e-7, list: [null, true] } };
    expect(webhookBodyOf('message.received', '2026-11-25T10:00:00.000Z', JSON.stringify(data))).to.equal(
      webhookBody('message.received', '2026-11-25T10:00:00.000Z', data),
    );
    expect(webhookBodyOf('a"b', new Date(0), '{}')).to.equal(
      JSON.stringify({ type: 'a"b', timestamp: '1970-01-01T00:00:00.000Z', data: {} }),
    );
  });

  it('signs so the reference verifier accepts it, and only the exact id, timestamp and body', () => {
    const secret = newWebhookSecret();
    const headers = { ...signedHeaders([secret], 'evt_01J', body) };
    expect(headers['webhook-signature']).to.match(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(headers['webhook-timestamp']).to.match(/^\d+$/);
    expect(verifies(secret, body, headers)).to.equal(true);
    expect(new Webhook(secret).verify(body, headers)).to.deep.equal(JSON.parse(body));

    expect(verifies(newWebhookSecret(), body, headers), 'another secret').to.equal(false);
    expect(verifies(secret, body.replace('Héllo', 'Hello'), headers), 'tampered body').to.equal(false);
    expect(verifies(secret, body + ' ', headers), 'a stray space').to.equal(false);
    expect(verifies(secret, body, { ...headers, 'webhook-id': 'evt_01K' }), 'tampered id').to.equal(false);
    const ts = Number(headers['webhook-timestamp']);
    expect(verifies(secret, body, { ...headers, 'webhook-timestamp': String(ts - 1) }), 'tampered timestamp').to.equal(false);
  });

  it('signs with both secrets during a rotation: either alone verifies', () => {
    const oldSecret = newWebhookSecret();
    const newSecret = newWebhookSecret();
    const headers = { ...signedHeaders([newSecret, oldSecret], 'evt_2', body) };
    const parts = headers['webhook-signature'].split(' ');
    expect(parts).to.have.length(2);
    expect(parts.every((p) => p.startsWith('v1,'))).to.equal(true);
    expect(verifies(oldSecret, body, headers), 'old secret').to.equal(true);
    expect(verifies(newSecret, body, headers), 'new secret').to.equal(true);
    expect(verifies(newWebhookSecret(), body, headers), 'a third secret').to.equal(false);
    expect(verifies(oldSecret, body, { ...headers, 'webhook-id': 'evt_3' })).to.equal(false);
    expect(verifies(newSecret, `${body}x`, headers)).to.equal(false);
  });

  it('matches the reference signer byte for byte', () => {
    const secret = newWebhookSecret();
    const at = new Date(1_764_000_000_000);
    expect(signatureOf(secret, 'msg_1', 1_764_000_000, body)).to.equal(new Webhook(secret).sign('msg_1', at, body));
    expect(signedHeaders([secret], 'msg_1', body, at)['webhook-timestamp']).to.equal('1764000000');
  });

  it('refuses an id with a dot and a timestamp that is not whole seconds', () => {
    const secret = newWebhookSecret();
    expect(() => signatureOf(secret, 'a.b', 1, body)).to.throw(/"\."/);
    expect(() => signatureOf(secret, 'a', 1.5, body)).to.throw(/whole seconds/);
    expect(() => signedHeaders([], 'a', body)).to.throw(/at least one/);
  });
});
