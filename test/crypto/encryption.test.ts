// Encryption at rest, end to end over the API: user keys, /keys, /compose, the detail's
// keyEpoch + wrappedDek, /raw (byte-identical, across restarts), rotation, and zero-access
// messages sealed by someone else and APPENDed, all opened as the web app would
// (docs/examples/open-message.ts).
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { ImapFlow } from 'imapflow';
import * as openpgp from 'openpgp';
import { epochKeys, openMessage, type Session } from '../../docs/examples/open-message.ts';
import {
  call,
  envVars,
  expectError,
  json,
  mailEnv,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { spawnPostern, stopProcess } from '../helpers/processes.ts';
import { append, deliver, mailApp } from '../helpers/mail-fixtures.ts';
import { inboxMessages, putKey, memberKeyPair } from '../helpers/crypto-fixtures.ts';
import { untilDelivered } from '../helpers/ingress-helpers.ts';
import { onStore } from '../helpers/store-backdoor.ts';

async function imapBytes(client: ImapFlow, uid: number): Promise<Buffer> {
  await client.mailboxOpen('INBOX');
  const msg = await client.fetchOne(String(uid), { source: true }, { uid: true });
  if (!msg || !msg.source) throw new Error(`no message ${uid}`);
  return msg.source;
}

/**
 * RFC 3156 PGP/MIME: `headers`, then the version part and the encrypted part (`partHeaders`,
 * `payload` as it is to stand between them and the closing boundary).
 */
function pgpMime(headers: string[], partHeaders: string[], payload: string): string {
  const boundary = 'sealed-boundary-1';
  return [
    ...headers,
    'MIME-Version: 1.0',
    `Content-Type: multipart/encrypted; protocol="application/pgp-encrypted"; boundary="${boundary}"`,
    '',
    `--${boundary}`,
    'Content-Type: application/pgp-encrypted',
    '',
    'Version: 1',
    '',
    `--${boundary}`,
    ...partHeaders,
    '',
    payload,
    `--${boundary}--`,
    '',
  ].join('\r\n');
}

/** APPENDs `message` to the inbox's INBOX as a mail app would. */
async function appendAs(inbox: TestInbox, message: string): Promise<void> {
  const client = await mailApp(inbox);
  try {
    await client.append('INBOX', message, []);
  } finally {
    await client.logout();
  }
}

async function raw(s: TestServer, token: string, inboxId: string, msgId: string): Promise<Buffer> {
  const res = await call(`${s.base}/inboxes/${inboxId}/messages/${msgId}/raw`, { token });
  expect(res.status, await res.clone().text()).to.equal(200);
  expect(res.headers.get('content-type')).to.equal('application/octet-stream');
  expect(res.headers.get('cache-control')).to.equal('private, max-age=31536000, immutable');
  return Buffer.from(await res.arrayBuffer());
}

describe('encryption at rest', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let user: Awaited<ReturnType<typeof memberKeyPair>>;
  let session: string;
  let token: string;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    user = await memberKeyPair();
    session = await p.session();
    token = await p.token(['messages:read', 'send']);
  });
  after(() => s?.close());

  const app = (): Session => ({ baseUrl: s.app, headers: { 'x-svc-token': session }, memberKey: user.privateKey });

  describe('user keys', () => {
    it('GET /keys is 409 until the member sets a key, then seals every epoch to it', async () => {
      const q = await newProject(s);
      const inbox = await q.inbox();
      const ses = await q.session();
      await expectError(await call(`${s.app}/inboxes/${inbox.id}/keys`, { session: ses }), 409, /encryption key/);
      const mine = await memberKeyPair();
      const set = await putKey(s, ses, mine.armoredPublic);
      expect(set.status, await set.clone().text()).to.equal(200);
      const { fingerprint } = await json<{ fingerprint: string }>(set);
      expect(fingerprint).to.equal(mine.privateKey.getFingerprint().toUpperCase());
      const keys = await epochKeys({ baseUrl: s.app, headers: { 'x-svc-token': ses }, memberKey: mine.privateKey }, inbox.id);
      expect([...keys.keys()]).to.deep.equal([1]);
      expect(keys.get(1)!.getFingerprint().toUpperCase()).to.equal((await s.postern.keys.current(inbox.id)).fingerprint);
    });

    it('PUT /me/key takes armored or base64 binary keys, and refuses tokens, junk, private keys and keys that cannot encrypt', async () => {
      const mine = await memberKeyPair();
      const binary = Buffer.from(mine.privateKey.toPublic().write()).toString('base64');
      // A member of its own: replacing a key needs a passkey's confirmation (test/auth/passkeys.test.ts).
      const session = await p.session({ memberId: await p.member() });
      expect((await putKey(s, session, binary)).status).to.equal(200);
      const viaToken = await call(`${s.base}/me/key`, {
        method: 'PUT',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ publicKey: mine.armoredPublic }),
      });
      await expectError(viaToken, 403, /web app/);
      await expectError(await putKey(s, session, 'hello'), 400, /OpenPGP/);
      await expectError(await putKey(s, session, mine.privateKey.armor()), 400, /private key/);
      // A signing-only key: Ed25519 primary, no encryption subkey.
      const { privateKey: signOnly } = await openpgp.generateKey({
        type: 'ecc',
        curve: 'ed25519Legacy',
        userIDs: [{ email: 'x@example.org' }],
        subkeys: [],
        format: 'object',
      });
      await expectError(await putKey(s, session, signOnly.toPublic().armor()), 400, /cannot encrypt/);
      const empty = await call(`${s.app}/me/key`, {
        method: 'PUT',
        session,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({}),
      });
      await expectError(empty, 400);
    });
  });

  describe('compatible inbox', () => {
    let inbox: TestInbox;
    before(async () => {
      inbox = await p.inbox();
      expect((await putKey(s, session, user.armoredPublic)).status).to.equal(200);
    });

    it('GET /compose gives the addresses and the current epoch public key with its fingerprint', async () => {
      const res = await call(`${s.base}/inboxes/${inbox.id}/compose`, { token });
      const body = await json<{ addresses: string[]; epoch: number; epochPublic: string; epochFingerprint: string }>(res);
      expect(body.addresses).to.deep.equal([inbox.address]);
      expect(body.epoch).to.equal(1);
      const key = await openpgp.readKey({ binaryKey: Buffer.from(body.epochPublic, 'base64') });
      expect(key.getFingerprint().toUpperCase()).to.equal(body.epochFingerprint);
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/compose`, { token: await p.token(['messages:read']) }), 403, /send/);
    });

    it('opens mail delivered through Postfix from /keys + detail + /raw, byte for byte what Dovecot holds', async () => {
      await deliver(inbox.address, { subject: 'sealed delivery' });
      const [m] = await untilDelivered('the delivered message', async () =>
        (await inboxMessages(s, token, inbox.id)).filter((x) => x.subject === 'sealed delivery'),
      );
      const detailRes = await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token });
      const detail = await json<{ keyEpoch: number; wrappedDek: string }>(detailRes);
      expect(detail.keyEpoch).to.equal(1);
      s.postern.validator.body('https://postern.dev/schemas/mail.json#/$defs/MessageDetail', detail);
      const opened = await openMessage(app(), inbox.id, m!.id);
      const client = await mailApp(inbox);
      try {
        expect(Buffer.from(opened).equals(await imapBytes(client, m!.uid))).to.equal(true);
      } finally {
        await client.logout();
      }
      // The same through the session surface and the token surface.
      expect(
        Buffer.from(
          await openMessage({ ...app(), baseUrl: s.base, headers: { authorization: `Bearer ${token}` } }, inbox.id, m!.id),
        ).equals(Buffer.from(opened)),
      ).to.equal(true);
    });

    it('serves /raw byte-identical on every read and after a restart (a new process), and the ETag covers wrappedDek', async () => {
      const client = await mailApp(inbox);
      try {
        await append(client, 'INBOX', { subject: 'identity', body: 'x'.repeat(200_000) });
      } finally {
        await client.logout();
      }
      const [m] = (await inboxMessages(s, token, inbox.id)).filter((x) => x.subject === 'identity');
      const first = await raw(s, token, inbox.id, m!.id);
      expect((await raw(s, token, inbox.id, m!.id)).equals(first)).to.equal(true);
      const detailBefore = await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token });
      const etag = detailBefore.headers.get('etag')!;
      const { wrappedDek } = await json<{ wrappedDek: string }>(detailBefore);
      const notModified = await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token, headers: { 'if-none-match': etag } });
      expect(notModified.status).to.equal(304);

      // Restarted: `postern serve` as a process of its own on the same store and master key.
      const again = await spawnPostern(envVars(mailEnv(), s.storeEnv));
      try {
        const res = await call(`${again.url}/v1/inboxes/${inbox.id}/messages/${m!.id}/raw`, { token });
        expect(res.status).to.equal(200);
        expect(Buffer.from(await res.arrayBuffer()).equals(first)).to.equal(true);
        const d = await json<{ wrappedDek: string }>(await call(`${again.url}/v1/inboxes/${inbox.id}/messages/${m!.id}`, { token }));
        expect(d.wrappedDek).to.equal(wrappedDek);
      } finally {
        await stopProcess(again.child);
      }

      // A message whose key is made now (as for a message stored before keys existed): the
      // ETag of the detail without it no longer matches.
      await onStore(s.storeEnv, 'DELETE FROM message_keys WHERE inbox_id = ?', inbox.id);
      const fresh = await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token, headers: { 'if-none-match': etag } });
      expect(fresh.status).to.equal(200);
      expect(fresh.headers.get('etag')).to.not.equal(etag);
      expect((await json<{ wrappedDek: string }>(fresh)).wrappedDek).to.not.equal(wrappedDek);
    });

    it('after a rotation, new messages use the new epoch and old ones still open', async () => {
      const q = await newProject(s);
      const box = await q.inbox();
      const ses = await q.session();
      const tok = await q.token(['messages:read']);
      const mine = await memberKeyPair();
      expect((await putKey(s, ses, mine.armoredPublic)).status).to.equal(200);
      const client = await mailApp(box);
      try {
        await append(client, 'INBOX', { subject: 'before rotation' });
        const [old] = (await inboxMessages(s, tok, box.id)).filter((x) => x.subject === 'before rotation');
        const oldDetail = await json<{ keyEpoch: number }>(await call(`${s.base}/inboxes/${box.id}/messages/${old!.id}`, { token: tok }));
        expect(oldDetail.keyEpoch).to.equal(1);
        await s.postern.admin.rotateKey(box.id);
        await append(client, 'INBOX', { subject: 'after rotation' });
        const [fresh] = (await inboxMessages(s, tok, box.id)).filter((x) => x.subject === 'after rotation');
        const freshDetail = await json<{ keyEpoch: number }>(
          await call(`${s.base}/inboxes/${box.id}/messages/${fresh!.id}`, { token: tok }),
        );
        expect(freshDetail.keyEpoch).to.equal(2);
        const sess: Session = { baseUrl: s.app, headers: { 'x-svc-token': ses }, memberKey: mine.privateKey };
        const keys = await epochKeys(sess, box.id);
        expect([...keys.keys()]).to.deep.equal([1, 2]);
        expect(Buffer.from(await openMessage(sess, box.id, old!.id, keys)).equals(await imapBytes(client, old!.uid))).to.equal(true);
        expect(Buffer.from(await openMessage(sess, box.id, fresh!.id, keys)).equals(await imapBytes(client, fresh!.uid))).to.equal(true);
      } finally {
        await client.logout();
      }
    });

    it('404s for a message or inbox that is not there', async () => {
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/msg_00000000000000000000000000/raw`, { token }), 404);
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/nonsense/raw`, { token }), 404);
      const other = await (await newProject(s)).inbox();
      await expectError(await call(`${s.base}/inboxes/${other.id}/keys`, { token }), 404);
      await expectError(await call(`${s.base}/inboxes/${other.id}/compose`, { token }), 404);
    });
  });

  describe('zero-access inbox', () => {
    before(async () => expect((await putKey(s, session, user.armoredPublic)).status).to.equal(200));

    it('serves the PKESK packets as wrappedDek and the encrypted-data packet as /raw of a sealed PGP/MIME message', async () => {
      const inbox = await p.inbox({ mode: 'zero-access' });
      const epoch = await s.postern.keys.current(inbox.id);
      const inner = Buffer.from(
        'From: a@example.org\r\nTo: b@example.org\r\nSubject: inner secret\r\n\r\nonly the key holder reads this\r\n',
      );
      const sealed = await openpgp.encrypt({
        message: await openpgp.createMessage({ binary: inner }),
        encryptionKeys: epoch.publicKey,
        format: 'armored',
      });
      await appendAs(
        inbox,
        pgpMime(
          ['From: a@example.org', `To: ${inbox.address}`, 'Subject: sealed outside', 'Message-ID: <sealed-1@example.org>'],
          ['Content-Type: application/octet-stream; name="encrypted.asc"'],
          `${sealed.trim().replace(/\r?\n/g, '\r\n')}\r\n`,
        ),
      );
      const [m] = (await inboxMessages(s, token, inbox.id)).filter((x) => x.subject === 'sealed outside');
      const detail = await json<{ keyEpoch: number; wrappedDek: string }>(
        await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token }),
      );
      expect(detail.keyEpoch).to.equal(1);
      const binary = (await openpgp.unarmor(sealed)).data as Uint8Array;
      const dek = Buffer.from(detail.wrappedDek, 'base64');
      const body = await raw(s, token, inbox.id, m!.id);
      expect(Buffer.concat([dek, body]).equals(Buffer.from(binary))).to.equal(true);
      expect(body[0]! & 0x3f).to.equal(18);
      expect((await raw(s, token, inbox.id, m!.id)).equals(body)).to.equal(true);
      const opened = await openMessage(app(), inbox.id, m!.id);
      expect(Buffer.from(opened).equals(inner)).to.equal(true);

      // The same sealed message as a binary part (base64 transfer encoding), 1 MB of it.
      const bigInner = Buffer.concat([Buffer.from('Subject: binary\r\n\r\n'), Buffer.from(randomBytes(1024 * 1024).toString('base64'))]);
      const binarySealed = await openpgp.encrypt({
        message: await openpgp.createMessage({ binary: bigInner }),
        encryptionKeys: epoch.publicKey,
        format: 'binary',
      });
      await appendAs(
        inbox,
        pgpMime(
          ['From: a@example.org', 'Subject: sealed binary'],
          ['Content-Type: application/octet-stream', 'Content-Transfer-Encoding: base64'],
          Buffer.from(binarySealed).toString('base64').replace(/.{76}/g, '$&\r\n'),
        ),
      );
      const [b] = (await inboxMessages(s, token, inbox.id)).filter((x) => x.subject === 'sealed binary');
      const bDetail = await json<{ wrappedDek: string }>(await call(`${s.base}/inboxes/${inbox.id}/messages/${b!.id}`, { token }));
      const bRaw = await raw(s, token, inbox.id, b!.id);
      expect(Buffer.concat([Buffer.from(bDetail.wrappedDek, 'base64'), bRaw]).equals(Buffer.from(binarySealed))).to.equal(true);
      expect(Buffer.from(await openMessage(app(), inbox.id, b!.id)).equals(bigInner)).to.equal(true);
    });

    it('answers 422, never a 5xx, for a plaintext message not sealed (yet) in a zero-access inbox', async () => {
      // The resealer would seal it within seconds (docs/encryption.md): held off for this test.
      const resealer = s.postern.resealer as unknown as { replacer: { replace: (...args: unknown[]) => Promise<boolean> } };
      const replace = resealer.replacer.replace;
      resealer.replacer.replace = async () => false;
      try {
        const inbox = await p.inbox({ mode: 'zero-access' });
        const client = await mailApp(inbox);
        try {
          await append(client, 'INBOX', { subject: 'not sealed' });
        } finally {
          await client.logout();
        }
        const [m] = (await inboxMessages(s, token, inbox.id)).filter((x) => x.subject === 'not sealed');
        await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}`, { token }), 422, /not sealed/);
        await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/${m!.id}/raw`, { token }), 422, /not sealed/);
      } finally {
        resealer.replacer.replace = replace;
      }
    });
  });
});
