// JSON compose (POST /inboxes/{inbox}/messages/compose), identities, and POST /messages with an
// Idempotency-Key, through the real Postfix submission service to the sink and Dovecot: the MIME
// a strict parser (postal-mime) reads back, replies and forwards of corpus originals, a retried
// send going once.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { simpleParser } from 'mailparser';
import PostalMime, { type Email } from 'postal-mime';
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
import { mailApp } from '../helpers/mail-fixtures.ts';
import { corpusFiles, itWithCorpus } from '../helpers/corpus-files.ts';
import { atSink, eventsOf, labelIds, listLabel, postRaw, rcpt, withoutTrace } from '../helpers/send-fixtures.ts';
import { fromAddress, splitHeader } from '../../lib/send/rfc5322.ts';

/** The smallest PNG and PDF a parser and a sniffer take for what they are. */
const PNG = Buffer.from(
  '89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c63f8cfc0f01f0005000201a5f0a1d10000000049454e44ae426082',
  'hex',
);
const PDF = Buffer.from('%PDF-1.4\n1 0 obj << >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n');

const parse = (raw: Buffer): Promise<Email> => PostalMime.parse(raw);
const bytesOf = (c: ArrayBuffer | Uint8Array | string) => (typeof c === 'string' ? Buffer.from(c) : Buffer.from(c as ArrayBuffer));

describe('compose from JSON, identities, and an Idempotency-Key on POST /messages', function () {
  this.timeout(90_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'content:read', 'send']);
  });
  after(async () => {
    await s?.close();
  });

  const compose = (body: unknown, options: { token?: string; inboxId?: string; key?: string } = {}) =>
    call(`${s.base}/inboxes/${options.inboxId ?? inbox.id}/messages/compose`, {
      method: 'POST',
      token: options.token ?? token,
      headers: { 'content-type': 'application/json', ...(options.key ? { 'idempotency-key': options.key } : {}) },
      body: JSON.stringify(body),
    });

  /** The message at the sink for `to`, without Postfix's trace, parsed strictly. */
  async function received(to: string): Promise<{ raw: Buffer; mail: Email }> {
    const [got] = await atSink(to);
    const raw = withoutTrace(got!.raw);
    return { raw, mail: await parse(raw) };
  }

  it('composes text, HTML, attachments, non-ASCII names and subject into MIME a strict parser reads back; Bcc is not relayed; answers the Message-ID and Date', async () => {
    const [to, cc, bcc] = [rcpt('to'), rcpt('cc'), rcpt('bcc')];
    const subject = `Grüße aus Köln — 東京 ✓ ${randomBytes(3).toString('hex')}`;
    const res = await compose({
      from: inbox.address,
      fromName: 'Zoë Ångström',
      to: [{ address: to, name: 'Jürgen Groß' }],
      cc: [cc],
      bcc: [bcc],
      subject,
      text: 'Hallo Jürgen,\nanbei die Unterlagen.\n',
      html: '<p>Hallo <b>Jürgen</b>,</p><p>anbei die Unterlagen. <img src="cid:logo@x"></p>',
      attachments: [
        { filename: 'Résumé – 履歴書.pdf', contentType: 'application/pdf', content: PDF.toString('base64') },
        { filename: 'logo.png', content: PNG.toString('base64'), contentId: 'logo@x' },
        { filename: 'notes.txt', content: Buffer.from('plain notes, ünïcödé\n').toString('base64') },
      ],
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    const answer = await json<{ sent: boolean; messageId: string; date: string }>(res);
    expect(answer.sent).to.equal(true);
    expect(answer.messageId).to.match(new RegExp(`^<[0-9a-f]{32}@${inbox.address.split('@')[1]!.replace(/\./g, '\\.')}>$`));

    const [got] = await atSink(to);
    expect([...got!.rcptTo].sort()).to.deep.equal([to, cc, bcc].sort());
    const raw = withoutTrace(got!.raw);
    expect(raw.toString('latin1')).to.not.match(/^bcc:/im);
    const mail = await parse(raw);
    expect(mail.subject).to.equal(subject);
    expect(mail.from).to.deep.include({ name: 'Zoë Ångström', address: inbox.address });
    expect(mail.to).to.deep.equal([{ name: 'Jürgen Groß', address: to }]);
    expect(mail.cc).to.deep.equal([{ name: '', address: cc }]);
    expect(mail.messageId).to.equal(answer.messageId);
    expect(new Date(mail.date!).getTime()).to.equal(Math.floor(new Date(answer.date).getTime() / 1000) * 1000);
    expect(mail.text!.trimEnd()).to.equal('Hallo Jürgen,\nanbei die Unterlagen.');
    expect(mail.html).to.contain('<b>Jürgen</b>');
    const byName = new Map(mail.attachments.map((a) => [a.filename, a]));
    expect(byName.get('Résumé – 履歴書.pdf')!.mimeType).to.equal('application/pdf');
    expect(bytesOf(byName.get('Résumé – 履歴書.pdf')!.content).equals(PDF)).to.equal(true);
    const logo = byName.get('logo.png')!;
    expect(logo.mimeType).to.equal('image/png');
    expect(logo.contentId).to.equal('<logo@x>');
    expect(bytesOf(logo.content).equals(PNG)).to.equal(true);
    expect(byName.get('notes.txt')!.mimeType).to.equal('text/plain');

    const [accepted] = await eventsOf(s, p.projectId, inbox.id, ['mail.delivery.accepted']).then((e) =>
      e.filter((x) => (x.data as { messageId?: string }).messageId === answer.messageId),
    );
    expect(accepted, 'mail.delivery.accepted for the composed message').to.not.equal(undefined);
  });

  it('refuses an attachment whose bytes contradict its type or name (422), and makes names safe', async () => {
    const to = rcpt();
    const exe = Buffer.concat([Buffer.from('MZ'), randomBytes(64)]);
    await expectError(
      await compose({
        from: inbox.address,
        to: [to],
        text: 'x',
        attachments: [{ filename: 'invoice.pdf', contentType: 'application/pdf', content: exe.toString('base64') }],
      }),
      422,
      /attachment 0 \(invoice\.pdf\): its contentType says application\/pdf but its bytes are a Windows program file/,
    );
    await expectError(
      await compose({
        from: inbox.address,
        to: [to],
        text: 'x',
        attachments: [{ filename: 'photo.jpg', content: PNG.toString('base64') }],
      }),
      422,
      /its name's extension says image\/jpeg but its bytes are a PNG file/,
    );
    await expectError(
      await compose({
        from: inbox.address,
        to: [to],
        text: 'x',
        attachments: [{ filename: 'a.txt', contentType: 'not a type', content: 'AAAA' }],
      }),
      400,
      /not a MIME type/,
    );
    const res = await compose({
      from: inbox.address,
      to: [to],
      text: 'names',
      attachments: [
        { filename: '../../etc/pass\u0000wd', contentType: 'text/plain', content: Buffer.from('x').toString('base64') },
        { filename: 'report\u202Efdp.exe', contentType: 'application/octet-stream', content: Buffer.from('y').toString('base64') },
        { content: PNG.toString('base64') },
      ],
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    const { mail } = await received(to);
    expect(mail.attachments.map((a) => a.filename)).to.deep.equal(['passwd', 'reportfdp.exe', 'attachment-3.png']);
    expect(mail.attachments[2]!.mimeType).to.equal('image/png');
  });

  it('identities: owners set a display name and signature per address; compose uses them unless told not to; others may not set them', async () => {
    const inbox = await p.inbox();
    const before = await call(`${s.base}/inboxes/${inbox.id}/identities`, { token });
    expect(await json(before)).to.deep.equal({
      identities: [{ address: inbox.address, displayName: null, signatureText: null, signatureHtml: null, updatedAt: null }],
    });
    const put = await call(`${s.base}/inboxes/${inbox.id}/identities/${encodeURIComponent(inbox.address.toUpperCase())}`, {
      method: 'PUT',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        displayName: 'Support Désk',
        signatureText: 'Support team\nhttps://example.org',
        signatureHtml: '<p><i>Support team</i></p>',
      }),
    });
    expect(put.status, await put.clone().text()).to.equal(200);
    const listed = await json<{ identities: Array<Record<string, unknown>> }>(
      await call(`${s.base}/inboxes/${inbox.id}/identities`, { token }),
    );
    expect(listed.identities[0]).to.deep.include({
      address: inbox.address,
      displayName: 'Support Désk',
      signatureText: 'Support team\nhttps://example.org',
    });

    const [signed, unsigned] = [rcpt('signed'), rcpt('unsigned')];
    expect(
      (
        await compose(
          { from: inbox.address, to: [signed], subject: 'signed', text: 'Hello.', html: '<p>Hello.</p>' },
          { inboxId: inbox.id },
        )
      ).status,
    ).to.equal(200);
    expect(
      (await compose({ from: inbox.address, to: [unsigned], subject: 'unsigned', text: 'Hello.', signature: false }, { inboxId: inbox.id }))
        .status,
    ).to.equal(200);
    const a = (await received(signed)).mail;
    expect(a.from).to.deep.include({ name: 'Support Désk', address: inbox.address });
    expect(a.text!.trimEnd()).to.equal('Hello.\n\n-- \nSupport team\nhttps://example.org');
    expect(a.html).to.contain('<i>Support team</i>');
    const b = (await received(unsigned)).mail;
    expect(b.from).to.deep.include({ name: 'Support Désk' });
    expect(b.text!.trimEnd()).to.equal('Hello.');

    // A member (not an owner) reads them but may not set them; an address not the inbox's is 404.
    const member = await p.member();
    await s.postern.admin.grant(member, inbox.id, 'member');
    const memberToken = await p.token(['messages:read', 'send'], { memberId: member });
    expect((await call(`${s.base}/inboxes/${inbox.id}/identities`, { token: memberToken })).status).to.equal(200);
    const body = { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ displayName: 'x' }) };
    await expectError(
      await call(`${s.base}/inboxes/${inbox.id}/identities/${inbox.address}`, { ...body, token: memberToken }),
      403,
      /owners/,
    );
    await expectError(await call(`${s.base}/inboxes/${inbox.id}/identities/other@example.org`, { ...body, token }), 404);
    await expectError(
      await call(`${s.base}/inboxes/${inbox.id}/identities/${inbox.address}`, {
        ...body,
        token,
        body: JSON.stringify({ displayName: 'a\nb' }),
      }),
      400,
    );
  });

  /** APPENDs the messages to INBOX as a mail app would, and gives their msg_ ids in the same order. */
  async function stored(target: TestInbox, raws: Buffer[]): Promise<string[]> {
    const client = await mailApp(target);
    const uids: number[] = [];
    try {
      for (const raw of raws) {
        const r = await client.append('INBOX', raw, []);
        if (!r || !r.uid) throw new Error('APPEND gave no UID');
        uids.push(r.uid);
      }
    } finally {
      await client.logout();
    }
    const ids = await labelIds(s, token, target.id);
    const listed = await listLabel(s, token, target.id, ids.INBOX!);
    return uids.map((uid) => listed.find((m) => m.uid === uid)!.id);
  }

  it('reply-all: recipients computed from the original minus the inbox’s own addresses, Re: once, In-Reply-To and References, the original quoted', async () => {
    const [author, other, copied] = [rcpt('author'), rcpt('other'), rcpt('copied')];
    const original = Buffer.from(
      [
        `From: Author Person <${author}>`,
        `To: ${inbox.address}, Other <${other}>`,
        `Cc: ${copied}, ${inbox.address.toUpperCase()}`,
        'Subject: Re: the plan',
        'Date: Tue, 01 Sep 2026 10:00:00 +0000',
        'Message-ID: <orig-1@example.org>',
        'References: <root@example.org> <mid@example.org>',
        'In-Reply-To: <mid@example.org>',
        '',
        'First line.',
        '> earlier quote',
        '',
      ].join('\r\n'),
    );
    const [id] = await stored(inbox, [original]);
    const res = await compose({ from: inbox.address, text: 'Agreed.', reference: { message: id, action: 'reply-all' } });
    expect(res.status, await res.clone().text()).to.equal(200);
    const [got] = await atSink(author);
    expect([...got!.rcptTo].sort()).to.deep.equal([author, other, copied].sort());
    const mail = await parse(withoutTrace(got!.raw));
    expect(mail.subject).to.equal('Re: the plan');
    expect(mail.inReplyTo).to.equal('<orig-1@example.org>');
    expect(mail.references).to.equal('<root@example.org> <mid@example.org> <orig-1@example.org>');
    expect(mail.to!.map((a) => a.address)).to.deep.equal([author, other]);
    expect(mail.cc!.map((a) => a.address)).to.deep.equal([copied]);
    expect(mail.text).to.match(
      /^Agreed\.\n\nOn Tue, 01 Sep 2026 10:00:00 GMT, Author Person <[^>]+> wrote:\n> First line\.\n>> earlier quote/,
    );
    // The server read the original for the token: audited as a content read.
    const { events: audits } = await s.postern.events.backfill(
      {
        projectId: p.projectId,
        inboxes: [inbox.id],
        allowedInboxes: [inbox.id],
        visibilities: ['audit'],
        types: ['access.content.read'],
        redactActor: false,
      },
      0,
      500,
    );
    expect(audits.some((e) => (JSON.parse(e.json) as { data: { msgId?: string } }).data.msgId === id)).to.equal(true);
  });

  itWithCorpus(
    'replies to and forwards corpus originals: threading headers, Re:/Fwd: not doubled, inline and attached forwards',
    async function () {
      this.timeout(180_000);
      const own = await p.inbox();
      // A spread of the corpus: every 25th message that has a Message-ID and a From.
      const originals = corpusFiles()
        .filter((_, i) => i % 25 === 0)
        .filter((f) => /^message-id:/im.test(splitHeader(f.raw).head.toString('latin1')) && fromAddress(splitHeader(f.raw).head) !== null)
        .slice(0, 10);
      expect(originals.length).to.be.greaterThan(5);
      const ids = await stored(
        own,
        originals.map((f) => f.raw),
      );
      for (const [n, f] of originals.entries()) {
        const orig = await parse(f.raw);
        const [r, fi, fa] = [rcpt('reply'), rcpt('fwd-inline'), rcpt('fwd-attach')];
        for (const [to, reference] of [
          [r, { message: ids[n], action: 'reply' }],
          [fi, { message: ids[n], action: 'forward' }],
          [fa, { message: ids[n], action: 'forward', forward: 'attachment' }],
        ] as const) {
          const res = await compose({ from: own.address, to: [to], text: 'See below.', reference }, { inboxId: own.id });
          expect(res.status, `${f.name} ${reference.action}: ${await res.clone().text()}`).to.equal(200);
        }
        const subject = (orig.subject ?? '').trim();
        const reply = (await received(r)).mail;
        expect(reply.inReplyTo, f.name).to.equal(orig.messageId);
        expect(reply.references!.split(/\s+/).at(-1), f.name).to.equal(orig.messageId);
        expect(reply.subject, f.name).to.equal(/^re\s*:/i.test(subject) ? subject : `Re: ${subject}`.trim());
        expect(reply.subject!, f.name).to.not.match(/^re:\s*re:/i);
        expect(reply.text, f.name).to.match(/^See below\.\n\nOn .* wrote:\n/);

        const inline = (await received(fi)).mail;
        expect(inline.subject, f.name).to.equal(/^(fwd?|fw)\s*:/i.test(subject) ? subject : `Fwd: ${subject}`.trim());
        expect(inline.inReplyTo, f.name).to.equal(orig.messageId);
        expect(inline.text, f.name).to.contain('---------- Forwarded message ---------');
        expect(inline.attachments.length, f.name).to.equal((await simpleParser(f.raw)).attachments.length);

        const attached = (await received(fa)).mail;
        const rfc822 = attached.attachments.find((a) => a.mimeType === 'message/rfc822');
        expect(rfc822, f.name).to.not.equal(undefined);
        expect((await parse(bytesOf(rfc822!.content))).messageId, f.name).to.equal(orig.messageId);
      }
    },
  );

  it('MCP send_message composes the same way: identity, html, a reply-all by reference with recipients computed', async () => {
    const own = await p.inbox();
    const ownToken = await p.token(['messages:read', 'content:read', 'send'], { inboxes: [own.id] });
    await call(`${s.base}/inboxes/${own.id}/identities/${own.address}`, {
      method: 'PUT',
      token: ownToken,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ displayName: 'Agent Desk', signatureText: 'sent by the agent' }),
    });
    const [author, copied] = [rcpt('mcp-author'), rcpt('mcp-cc')];
    const original = Buffer.from(
      `From: ${author}\r\nTo: ${own.address}\r\nCc: ${copied}\r\nSubject: question\r\nMessage-ID: <mcp-orig@example.org>\r\n\r\nWhat time?\r\n`,
    );
    const [id] = await stored(own, [original]);
    const res = await call(`${s.base}/mcp`, {
      method: 'POST',
      token: ownToken,
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: {
          name: 'send_message',
          arguments: {
            inboxId: own.id,
            from: own.address,
            to: [],
            text: 'At noon.',
            html: '<p>At noon.</p>',
            reference: { message: id, action: 'reply-all' },
          },
        },
      }),
    });
    const answer = (await res.json()) as { result?: { isError?: boolean; structuredContent?: { messageId?: string }; content: unknown } };
    expect(answer.result?.isError, JSON.stringify(answer)).to.not.equal(true);
    const [got] = await atSink(author);
    expect([...got!.rcptTo].sort()).to.deep.equal([author, copied].sort());
    const mail = await parse(withoutTrace(got!.raw));
    expect(mail.from).to.deep.include({ name: 'Agent Desk', address: own.address });
    expect(mail.subject).to.equal('Re: question');
    expect(mail.inReplyTo).to.equal('<mcp-orig@example.org>');
    expect(mail.text).to.match(/^At noon\.\n\n-- \nsent by the agent\n\nOn .* wrote:\n> What time\?/);
    expect(mail.html).to.contain('<p>At noon.</p>');
  });

  it('a reference in a zero-access inbox is a 403: the web app composes there', async () => {
    const sealed = await p.inbox({ mode: 'zero-access' });
    await expectError(
      await compose(
        { from: sealed.address, to: [rcpt()], text: 'x', reference: { message: 'msg_AAAAAAAAAAAAAAAAAAAAAA', action: 'reply' } },
        { inboxId: sealed.id },
      ),
      403,
      /zero-access/,
    );
    // Without content:read, a reference is a 403 too.
    const sendOnly = await p.token(['send']);
    await expectError(
      await compose(
        { from: inbox.address, to: [rcpt()], reference: { message: 'msg_AAAAAAAAAAAAAAAAAAAAAA', action: 'forward' } },
        { token: sendOnly },
      ),
      403,
      /content:read/,
    );
  });

  it('POST /messages with an Idempotency-Key sends once: a retry answers the first outcome, another request with the key is a 422', async () => {
    const to = rcpt('once');
    const key = `retry-${randomBytes(6).toString('hex')}`;
    const raw = `From: ${inbox.address}\r\nTo: ${to}\r\nSubject: once\r\n\r\nOnly once.\r\n`;
    const send = () =>
      call(`${s.base}/inboxes/${inbox.id}/messages`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ from: inbox.address, to: [to], raw: Buffer.from(raw).toString('base64') }),
      });
    // Two at once and one after: one message, one answer.
    const answers = await Promise.all([send(), send()]);
    answers.push(await send());
    const bodies = await Promise.all(answers.map(async (r) => ({ status: r.status, body: (await r.json()) as { messageId?: string } })));
    expect(bodies.map((b) => b.status)).to.deep.equal([200, 200, 200]);
    expect(new Set(bodies.map((b) => b.body.messageId)).size).to.equal(1);
    await expectError(
      await call(`${s.base}/inboxes/${inbox.id}/messages`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ from: inbox.address, to: [to], raw: Buffer.from(`${raw}changed\r\n`).toString('base64') }),
      }),
      422,
      /Idempotency-Key .* was already used for another request/,
    );
    // JSON compose with a key: once as well.
    const composeKey = `compose-${randomBytes(6).toString('hex')}`;
    const body = { from: inbox.address, to: [to], subject: 'composed once', text: 'Once.' };
    const first = await json<{ messageId: string }>(await compose(body, { key: composeKey }));
    const again = await json<{ messageId: string }>(await compose(body, { key: composeKey }));
    expect(again.messageId).to.equal(first.messageId);
    // A marker sent after every retry: once it is at the sink, anything a retry sent would be too.
    const marker = `From: ${inbox.address}\r\nTo: ${to}\r\nSubject: marker\r\n\r\nafter the retries\r\n`;
    expect((await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw: marker })).status).to.equal(200);
    const all = await atSink(to, 3);
    const subjects = await Promise.all(all.map(async (m) => (await parse(withoutTrace(m.raw))).subject));
    expect(subjects.sort()).to.deep.equal(['composed once', 'marker', 'once']);
    expect(all.length).to.equal(3);
    await expectError(
      await call(`${s.base}/inboxes/${inbox.id}/messages`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json', 'idempotency-key': 'ä'.repeat(3) },
        body: JSON.stringify({ from: inbox.address, to: [to], raw: Buffer.from(raw).toString('base64') }),
      }),
      400,
      /Idempotency-Key must be/,
    );
  });
});
