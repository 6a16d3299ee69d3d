// Decrypted content (docs/api.md, "Content"): /content, /source, /attachments/{n} for tokens with content:read
// on compatible inboxes, each read audited as access.content.read before any byte goes out,
// never cached; every 403/404 case; a 20 MB attachment streamed whole.
import { randomBytes } from 'node:crypto';
import { PassThrough } from 'node:stream';
import { finished } from 'node:stream/promises';
import { expect } from 'chai';
import type { ImapFlow } from 'imapflow';
import * as openpgp from 'openpgp';
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import {
  call,
  expectError,
  json,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { getPage } from '../helpers/events-helpers.ts';
import { openAttachment } from '../../lib/mail/content.ts';
import { mailApp } from '../helpers/mail-fixtures.ts';
import { inboxMessages } from '../helpers/crypto-fixtures.ts';

async function compose(options: ConstructorParameters<typeof MailComposer>[0]): Promise<Buffer> {
  return new MailComposer(options).compile().build();
}

async function appendRaw(client: ImapFlow, raw: Buffer): Promise<number> {
  const res = await client.append('INBOX', raw, []);
  if (!res || !res.uid) throw new Error('APPEND gave no UID');
  return res.uid;
}

interface Content {
  id: string;
  receivedAt: string;
  flags: string[];
  headers: Record<string, string>;
  text: string;
  html: string;
  attachments: Array<{ index: number; contentType: string; size: number; inline: boolean; filename?: string; contentId?: string }>;
}

describe('decrypted content', function () {
  this.timeout(180_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;
  let client: ImapFlow;
  const pdf = randomBytes(50_000);
  const png = randomBytes(3_000);
  let msgId = '';
  let uid = 0;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'content:read']);
    client = await mailApp(inbox);
    const raw = await compose({
      from: 'Zoë Sender <zoe@example.org>',
      to: inbox.address,
      cc: 'copy@example.org',
      replyTo: 'answers@example.org',
      subject: 'Grüße mit Anhang',
      messageId: '<content-1@example.org>',
      inReplyTo: '<earlier@example.org>',
      references: ['<first@example.org>', '<earlier@example.org>'],
      text: 'Hallo, siehe Anhang.',
      html: '<p>Hallo, <img src="cid:logo@example.org"> siehe Anhang.</p>',
      attachments: [
        { filename: 'Bericht "Q3" – Entwurf.pdf', content: pdf, contentType: 'application/pdf' },
        { filename: 'logo.png', content: png, contentType: 'image/png', cid: 'logo@example.org' },
      ],
    });
    uid = await appendRaw(client, raw);
    msgId = (await inboxMessages(s, token, inbox.id)).find((m) => m.uid === uid)!.id;
  });
  after(async () => {
    await client?.logout();
    await s?.close();
  });

  const url = (path: string, base = s.base) => `${base}/inboxes/${inbox.id}/messages/${msgId}${path}`;

  async function appendAndFind(raw: Buffer): Promise<string> {
    const at = await appendRaw(client, raw);
    return (await inboxMessages(s, token, inbox.id)).find((m) => m.uid === at)!.id;
  }

  async function auditEvents(): Promise<Array<{ subject?: string; data: { msgId: string; part: string; attachment?: number } }>> {
    const reader = await p.token(['events:read', 'audit:read']);
    const page = await getPage(`${s.base}/events?inboxes=${inbox.id}&audit=true&types=access.content.read`, { token: reader });
    return page.events as unknown as Array<{ subject?: string; data: { msgId: string; part: string; attachment?: number } }>;
  }

  it('GET /content: decoded headers, text, html and the attachments with their index, type, decoded size, inline, filename, contentId', async () => {
    const res = await call(url('/content'), { token });
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const body = await json<Content>(res);
    s.postern.validator.body('https://postern.dev/schemas/crypto.json#/$defs/DecryptedMessage', body);
    expect(body.id).to.equal(msgId);
    expect(body.headers).to.include({
      subject: 'Grüße mit Anhang',
      cc: 'copy@example.org',
      replyTo: 'answers@example.org',
      messageId: '<content-1@example.org>',
      inReplyTo: '<earlier@example.org>',
    });
    expect(body.headers.from).to.equal('"Zoë Sender" <zoe@example.org>');
    expect(body.headers.references).to.equal('<first@example.org> <earlier@example.org>');
    expect(body.text.trim()).to.equal('Hallo, siehe Anhang.');
    expect(body.html).to.contain('cid:logo@example.org');
    // In MIME tree order: the inline logo sits in multipart/related, before the PDF.
    expect(body.attachments).to.deep.equal([
      { index: 0, contentType: 'image/png', size: png.length, inline: true, filename: 'logo.png', contentId: 'logo@example.org' },
      { index: 1, contentType: 'application/pdf', size: pdf.length, inline: false, filename: 'Bericht "Q3" – Entwurf.pdf' },
    ]);
  });

  it('GET /attachments/{n}: the decoded bytes, their type, a safely encoded file name, nosniff, never cached; 404 past the last', async () => {
    const res = await call(url('/attachments/1'), { token });
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.equal('application/pdf');
    expect(res.headers.get('x-content-type-options')).to.equal('nosniff');
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const disposition = res.headers.get('content-disposition')!;
    expect(disposition).to.match(
      /^attachment; filename="Bericht \\"Q3\\" \? Entwurf\.pdf"; filename\*=UTF-8''Bericht%20%22Q3%22%20%E2%80%93%20Entwurf\.pdf$/,
    );
    expect(Buffer.from(await res.arrayBuffer()).equals(pdf)).to.equal(true);
    const logo = await call(url('/attachments/0'), { token });
    expect(logo.headers.get('content-type')).to.equal('image/png');
    expect(Buffer.from(await logo.arrayBuffer()).equals(png)).to.equal(true);
    await expectError(await call(url('/attachments/2'), { token }), 404);
    await expectError(await call(url('/attachments/-1'), { token }), 404);
    await expectError(await call(url('/attachments/x'), { token }), 404);
  });

  it('GET /source: the stored RFC 5322 bytes as message/rfc822, never cached', async () => {
    const res = await call(url('/source'), { token });
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.equal('message/rfc822');
    expect(res.headers.get('cache-control')).to.equal('no-store');
    await client.mailboxOpen('INBOX');
    const stored = await client.fetchOne(String(uid), { source: true }, { uid: true });
    expect(Buffer.from(await res.arrayBuffer()).equals(stored && stored.source ? stored.source : Buffer.alloc(0))).to.equal(true);
  });

  it('records access.content.read for each read, with actor, inbox and message, in the audit log only', async () => {
    const before = (await auditEvents()).length;
    expect((await call(url('/content'), { token })).status).to.equal(200);
    expect((await call(url('/source'), { token })).status).to.equal(200);
    expect((await call(url('/attachments/1'), { token })).status).to.equal(200);
    const events = (await auditEvents()).slice(before) as unknown as Array<Record<string, unknown> & { data: Record<string, unknown> }>;
    expect(events.map((e) => e.data)).to.deep.equal([
      { msgId, part: 'content' },
      { msgId, part: 'source' },
      { msgId, part: 'attachment', attachment: 1 },
    ]);
    const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1];
    for (const e of events) {
      expect(e.actor).to.equal(tokenId);
      expect(e.containerid).to.equal(inbox.id);
      expect(e.visibility).to.equal('audit');
      expect(e.subject).to.equal(msgId);
    }
    // Not in the inbox's ordinary event log.
    const reader = await p.token(['events:read']);
    const plain = await getPage(`${s.base}/events?inboxes=${inbox.id}&types=access.content.read`, { token: reader });
    expect(plain.events).to.deep.equal([]);
  });

  it('403 for sessions, tokens without content:read and zero-access inboxes; 404 for messages and inboxes not there', async () => {
    const session = await p.session();
    for (const path of ['/content', '/source', '/attachments/0']) {
      await expectError(await call(url(path, s.app), { session }), 403, /tokens only/);
      await expectError(await call(url(path), { token: await p.token(['messages:read']) }), 403, /content:read/);
      await expectError(await call(`${s.base}/inboxes/${inbox.id}/messages/msg_00000000000000000000000000${path}`, { token }), 404);
      const other = await (await newProject(s)).inbox();
      await expectError(await call(`${s.base}/inboxes/${other.id}/messages/${msgId}${path}`, { token }), 404);
    }
    const vault = await p.inbox({ mode: 'zero-access' });
    const vaultToken = await p.token(['messages:read', 'content:read']);
    for (const path of ['/content', '/source', '/attachments/0']) {
      await expectError(await call(`${s.base}/inboxes/${vault.id}/messages/${msgId}${path}`, { token: vaultToken }), 403, /zero-access/);
    }
  });

  /** A message whose multipart boundary never closes, with `parts` attachments (the last has no end). */
  function manyParts(parts: number, close = false): Buffer {
    const body = Array.from(
      { length: parts },
      (_, i) =>
        `--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="p${i}.bin"\r\n\r\npart ${i}\r\n`,
    ).join('');
    return Buffer.from(
      `From: a@example.org\r\nSubject: ${parts} parts\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n${body}${close ? '--b--\r\n' : ''}`,
    );
  }

  /** The whole answer (status and body) within `ms`, or the test fails: a content read never hangs. */
  async function answered(path: string, ms = 30_000): Promise<{ status: number; body: Buffer }> {
    const res = await call(path, { token, signal: AbortSignal.timeout(ms) });
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
  }

  it('answers every read of a hostile message in bounded time: 1,000 parts with a boundary that never closes', async () => {
    const raw = manyParts(1000);
    const id = await appendAndFind(raw);
    const base = `${s.base}/inboxes/${inbox.id}/messages/${id}`;
    const content = await answered(`${base}/content`);
    expect(content.status, content.body.toString().slice(0, 200)).to.equal(200);
    const { attachments } = JSON.parse(content.body.toString()) as Content;
    expect(attachments).to.have.length(1000);
    expect(attachments[999]).to.deep.include({ index: 999, filename: 'p999.bin' });
    for (const n of [0, 500, 999]) {
      const got = await answered(`${base}/attachments/${n}`);
      expect(got.status, `attachment ${n}`).to.equal(200);
      // The last part runs to the end of the message (its boundary never closes).
      expect(got.body.toString().replace(/\r\n$/, ''), `attachment ${n}`).to.equal(`part ${n}`);
    }
    expect((await answered(`${base}/attachments/1000`)).status).to.equal(404);
  });

  it("422 from /content past 10,000 MIME parts (Dovecot's own limit), which /source still serves; attachments answer in bounded time", async () => {
    const raw = manyParts(10_050, true);
    const id = await appendAndFind(raw);
    const base = `${s.base}/inboxes/${inbox.id}/messages/${id}`;
    await expectError(await call(`${base}/content`, { token, signal: AbortSignal.timeout(30_000) }), 422, /\/source/);
    // Past where the parser gives up: 422. Before it: the part, or a 422, but always an answer.
    await expectError(await call(`${base}/attachments/10020`, { token, signal: AbortSignal.timeout(30_000) }), 422, /\/source/);
    const early = await answered(`${base}/attachments/0`);
    if (early.status === 200) expect(early.body.toString().replace(/\r\n$/, '')).to.equal('part 0');
    else expect(early.status).to.equal(422);
    const source = await answered(`${base}/source`);
    expect(source.body.equals(raw)).to.equal(true);
  });

  it('an attachment already handed out fails its stream when the message cannot be read on, never stalls it', async () => {
    const source = new PassThrough();
    source.write('From: a@example.org\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n');
    // Over the 64 KB mailparser gathers before it parses, so the attachment starts now.
    source.write(
      `--b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="first.bin"\r\n\r\n${'first bytes\r\n'.repeat(10_000)}`,
    );
    const found = await openAttachment(source, 0);
    expect(found?.info.filename).to.equal('first.bin');
    // The mail server connection is lost mid-message (the IMAP adapter fails the stream so).
    source.destroy(new Error('the mail server connection was lost mid-message'));
    // Read it, as a response would.
    found!.content.resume();
    const outcome = await Promise.race([
      finished(found!.content).then(
        () => 'ended',
        (err: Error) => `failed: ${err.message}`,
      ),
      new Promise<string>((r) => setTimeout(() => r('stalled'), 10_000).unref()),
    ]);
    expect(outcome).to.equal('failed: the mail server connection was lost mid-message');
  });

  it('streams a 20 MB attachment whole, and /raw of that message opens to the same bytes', async () => {
    const big = randomBytes(20 * 1024 * 1024);
    const raw = await compose({
      from: 'big@example.org',
      to: inbox.address,
      subject: 'twenty megabytes',
      text: 'see attached',
      attachments: [{ filename: 'big.bin', content: big }],
    });
    const bigUid = await appendRaw(client, raw);
    const id = (await inboxMessages(s, token, inbox.id)).find((m) => m.uid === bigUid)!.id;
    const content = await json<Content>(await call(`${s.base}/inboxes/${inbox.id}/messages/${id}/content`, { token }));
    expect(content.attachments).to.deep.equal([
      { index: 0, contentType: 'application/octet-stream', size: big.length, inline: false, filename: 'big.bin' },
    ]);
    const res = await call(`${s.base}/inboxes/${inbox.id}/messages/${id}/attachments/0`, { token });
    expect(res.status).to.equal(200);
    expect(Buffer.from(await res.arrayBuffer()).equals(big)).to.equal(true);
    const source = Buffer.from(await (await call(`${s.base}/inboxes/${inbox.id}/messages/${id}/source`, { token })).arrayBuffer());
    expect(source.equals(raw)).to.equal(true);
    const detail = await json<{ keyEpoch: number; wrappedDek: string }>(
      await call(`${s.base}/inboxes/${inbox.id}/messages/${id}`, { token }),
    );
    const sealed = Buffer.from(await (await call(`${s.base}/inboxes/${inbox.id}/messages/${id}/raw`, { token })).arrayBuffer());
    const message = await openpgp.readMessage({ binaryMessage: Buffer.concat([Buffer.from(detail.wrappedDek, 'base64'), sealed]) });
    const { data } = await openpgp.decrypt({
      message,
      decryptionKeys: await s.postern.keys.privateKey(inbox.id, detail.keyEpoch),
      format: 'binary',
    });
    expect(Buffer.from(data as Uint8Array).equals(raw)).to.equal(true);
  });
});
