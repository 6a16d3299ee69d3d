// POST /inboxes/{inbox}/messages through the real Postfix submission service (SASL through
// Dovecot as the inbox's user) to the SMTP sink standing in for the internet: what is relayed,
// the Sent copy and its events, and every refusal with its status.
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { expect } from 'chai';
import { addSenderLogin, addUser } from '../../scripts/mailenv.ts';
import {
  call,
  expectError,
  mailEnv,
  newProject,
  startPostern,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { SseReader, until } from '../helpers/mail-fixtures.ts';
import { ingressInbox, storedMessages, untilDelivered } from '../helpers/ingress-helpers.ts';
import {
  atSink,
  eventsOf,
  labelIds,
  listLabel,
  postconf,
  postconfService,
  postRaw,
  rcpt,
  startDovecot,
  startPostfix,
  stopDovecot,
  stopPostfix,
  withoutTrace,
} from '../helpers/send-fixtures.ts';

function message(from: string, headers: Record<string, string> = {}, body = 'Hello from the send test.\r\n'): string {
  const fields = {
    From: `Sender <${from}>`,
    To: 'Someone <someone@example.org>',
    Subject: `send test ${randomBytes(3).toString('hex')}`,
    Date: new Date().toUTCString(),
    'Message-ID': `<${randomBytes(8).toString('hex')}@postern.test>`,
    ...headers,
  };
  return `${Object.entries(fields)
    .filter(([, v]) => v !== '')
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n${body}`;
}

describe('sending: POST /inboxes/{inbox}/messages', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'send']);
  });
  after(async () => {
    await s?.close();
  });

  it('relays the bytes as given, minus Bcc, with the inbox as envelope sender, exactly the given recipients and a DSN ENVID; files the copy in Sent with \\Seen and Bcc; records mail.delivery.accepted', async () => {
    const [to, cc, bcc] = [rcpt('to'), rcpt('cc'), rcpt('bcc')];
    const ids = await labelIds(s, token, inbox.id);
    const abort = new AbortController();
    const streamRes = await call(`${s.base}/inboxes/${inbox.id}/events`, {
      token,
      headers: { accept: 'text/event-stream' },
      signal: abort.signal,
    });
    const sse = new SseReader(streamRes, abort);
    try {
      const raw = message(inbox.address, { To: to, Cc: cc, Bcc: bcc, 'X-Custom': 'kept  as\r\n  folded' });
      const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to, cc, bcc], raw });
      expect(res.status, await res.clone().text()).to.equal(200);
      // The Message-ID it went with: an extension of the spec's { sent: true }.
      expect(await res.json()).to.deep.equal({ sent: true, messageId: /^Message-ID: (<[^>]+>)/m.exec(raw)![1] });

      const [got] = await atSink(to);
      expect(got!.mailFrom).to.equal(inbox.address);
      expect([...got!.rcptTo].sort()).to.deep.equal([to, cc, bcc].sort());
      expect(got!.envid).to.match(/^[0-9a-f]{32}$/);
      const relayed = withoutTrace(got!.raw).toString('utf8');
      expect(relayed).to.equal(raw.replace(`Bcc: ${bcc}\r\n`, ''));
      expect(relayed).not.to.include(bcc);

      // The Sent copy: \Seen, Bcc kept, listed as outgoing, announced on the stream.
      const added = await sse.next(
        (e) => e.event === 'message.added' && (JSON.parse(e.data) as { labelId: string }).labelId === ids.Sent,
        20_000,
      );
      const sent = await listLabel(s, token, inbox.id, ids.Sent!);
      expect(sent).to.have.length(1);
      expect(sent[0]!.id).to.equal((JSON.parse(added.data) as { msgId: string }).msgId);
      expect(sent[0]!.flags).to.deep.equal(['seen']);
      expect(sent[0]!.direction).to.equal('out');
      const source = await s.postern.mailSource.pool.use(inbox.imapUser, async (client) => {
        await client.mailboxOpen('Sent');
        const m = await client.fetchOne('*', { source: true });
        await client.mailboxClose();
        return m ? m.source!.toString('utf8') : '';
      });
      expect(source).to.equal(raw);

      const [accepted] = await eventsOf(s, p.projectId, inbox.id, ['mail.delivery.accepted']);
      expect(accepted!.data).to.deep.include({ from: inbox.address, recipients: 3, messageId: /Message-ID: (\S+)/.exec(raw)![1] });
      expect(accepted!.actor).to.match(/^tok_/);
    } finally {
      await sse.close();
    }
  });

  it('adds a Message-ID and a Date when the message has none', async () => {
    const to = rcpt();
    const raw = message(inbox.address, { To: to, Date: '', 'Message-ID': '' });
    const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw });
    expect(res.status, await res.clone().text()).to.equal(200);
    const relayed = withoutTrace((await atSink(to))[0]!.raw).toString('utf8');
    expect(relayed).to.match(/^Message-ID: <[0-9a-f]{32}@postern\.test>\r\nDate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d \+0000\r\n/);
    expect(relayed.endsWith(raw)).to.equal(true);
  });

  it('relays and files a large message from pieces of its body: Bcc removed, Message-ID and Date added, lines starting with a dot', async () => {
    // Over the relay's slice size, so it goes to nodemailer as a stream of slices of the pieces,
    // and over the outbox's part size, so the stored copy's parts span the pieces.
    const [to, bcc] = [rcpt('to'), rcpt('bcc')];
    const line = (i: number) => (i % 7 === 0 ? `.${i} a line that starts with a dot\r\n` : `${randomBytes(30).toString('base64')}\r\n`);
    const body = Array.from({ length: 60_000 }, (_, i) => line(i)).join('');
    const raw = message(inbox.address, { To: to, Bcc: bcc, Date: '', 'Message-ID': '' }, body);
    expect(raw.length).to.be.above(2 * 1024 * 1024);
    const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to, bcc], raw });
    expect(res.status, await res.clone().text()).to.equal(200);
    const relayed = withoutTrace((await atSink(to))[0]!.raw).toString('utf8');
    const added = /^Message-ID: <[0-9a-f]{32}@postern\.test>\r\nDate: [^\r]+\r\n/.exec(relayed)?.[0];
    expect(added, relayed.slice(0, 200)).to.be.a('string');
    expect(relayed === added + raw.replace(`Bcc: ${bcc}\r\n`, ''), 'relayed bytes').to.equal(true);
    const messageId = /^Message-ID: (\S+)/.exec(added!)![1]!;
    const source = await until('the Sent copy', () =>
      s.postern.mailSource.pool.use(inbox.imapUser, async (client) => {
        await client.mailboxOpen('Sent');
        const found = await client.search({ header: { 'message-id': messageId } }, { uid: true });
        const m = found && found.length > 0 ? await client.fetchOne(String(found[0]), { source: true }, { uid: true }) : false;
        await client.mailboxClose();
        return m ? m.source!.toString('utf8') : null;
      }),
    );
    expect(source === added + raw, 'Sent copy bytes').to.equal(true);
  });

  it('refuses malformed requests with 400', async () => {
    const to = rcpt();
    const url = `${s.base}/inboxes/${inbox.id}/messages`;
    const post = (body: unknown) =>
      call(url, { method: 'POST', token, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const raw = Buffer.from(message(inbox.address)).toString('base64');
    await expectError(await post({ from: inbox.address, to: [to] }), 400, /raw/);
    await expectError(await post({ from: inbox.address, to: [to], raw: 'not base64!' }), 400, /raw/);
    await expectError(await post({ from: 'not an address', to: [to], raw }), 400, /from/);
    await expectError(await post({ from: inbox.address, to: [], raw }), 400, /to/);
    await expectError(await post({ from: inbox.address, to: ['nobody'], raw }), 400, /to/);
    await expectError(await post({ from: inbox.address, to: [to], raw, extra: 1 }), 400);
    await expectError(
      await call(url, { method: 'POST', token, headers: { 'content-type': 'application/json' }, body: '{"from":' }),
      400,
      /JSON/,
    );
    // The From header must hold exactly the address given as from.
    await expectError(
      await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw: message('someone-else@postern.test') }),
      400,
      /From header/,
    );
    await expectError(
      await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw: message(inbox.address, { From: '' }) }),
      400,
      /From header/,
    );
    await expectError(
      await postRaw(s, token, inbox.id, {
        from: inbox.address,
        to: [to],
        raw: message(inbox.address, { From: `a <${inbox.address}>, b <b@example.org>` }),
      }),
      400,
      /From header/,
    );
  });

  it("403 for an address the inbox cannot send as, a session, a token without send, a reader; 404 for an inbox not the caller's", async () => {
    const to = rcpt();
    await expectError(
      await postRaw(s, token, inbox.id, { from: 'help@example.org', to: [to], raw: message('help@example.org') }),
      403,
      /cannot send as/,
    );
    const session = await p.session();
    const res = await call(`${s.app}/inboxes/${inbox.id}/messages`, {
      method: 'POST',
      session,
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    await expectError(res, 403, /tokens only/);
    const readOnly = await p.token(['messages:read']);
    await expectError(await postRaw(s, readOnly, inbox.id, { from: inbox.address, to: [to], raw: message(inbox.address) }), 403, /send/);
    const readerId = await p.member();
    const shared = await p.inbox({ memberId: readerId, role: 'reader' });
    const readerToken = await p.token(['send'], { memberId: readerId });
    await expectError(
      await postRaw(s, readerToken, shared.id, { from: shared.address, to: [to], raw: message(shared.address) }),
      403,
      /reader/,
    );
    const other = await newProject(s);
    const otherInbox = await other.inbox();
    await expectError(
      await postRaw(s, token, otherInbox.id, { from: otherInbox.address, to: [to], raw: message(otherInbox.address) }),
      404,
    );
  });

  it('accepts 100 recipients; refuses 101 with 422 before the relay sees it', async () => {
    const many = Array.from({ length: 101 }, () => rcpt('many'));
    const raw = message(inbox.address);
    await expectError(await postRaw(s, token, inbox.id, { from: inbox.address, to: many, raw }), 422, /100 recipients/);
    const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: many.slice(0, 100), raw: message(inbox.address) });
    expect(res.status, await res.clone().text()).to.equal(200);
    // Postfix hands the sink 50 recipients per delivery (smtp_destination_recipient_limit).
    const [first] = await atSink(many[0]!);
    await atSink(many[99]!);
    const same = await atSink((m) => m.envid === first!.envid, 2);
    expect(same.flatMap((m) => m.rcptTo).sort()).to.deep.equal(many.slice(0, 100).sort());
  });

  it("refuses with 422, in Postfix's own words, what Postfix refuses: a sender the login does not own, a size over its message_size_limit", async () => {
    // An address of the inbox that Postfix's sender login map gives to someone else.
    const extra = `${randomBytes(4).toString('hex')}-alias@${mailEnv().domain}`;
    const user = `${randomBytes(4).toString('hex')}-u@${mailEnv().domain}`;
    await addUser(mailEnv(), user, randomBytes(8).toString('hex'));
    const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser: user, addresses: [user, extra], mode: 'compatible' });
    await s.postern.admin.grant(p.memberId, id, 'owner');
    const to = rcpt();
    await expectError(
      await postRaw(s, token, id, { from: extra, to: [to], raw: message(extra) }),
      422,
      /Sender address rejected: not owned by user/,
    );

    // An inbox of its own: its relay connections all open after the change, and nobody reuses them.
    const small = await p.inbox();
    const before = await postconf({ message_size_limit: '100000' });
    try {
      const big = message(small.address, {}, `${'x'.repeat(76)}\r\n`.repeat(2000));
      const refused = await postRaw(s, token, small.id, { from: small.address, to: [to], raw: big });
      // The relay declares the size (MAIL FROM … SIZE=), so Postfix refuses before taking the bytes.
      await expectError(refused, 422, /552 5\.3\.4 Message size exceeds fixed limit/);
    } finally {
      await postconf(before);
    }
    const ids = await labelIds(s, token, small.id);
    expect(await listLabel(s, token, small.id, ids.Sent!)).to.deep.equal([]);
  });

  it('enforces the per-inbox sending rate with 422', async () => {
    const limited = await startPostern({ POSTERN_SEND_RATE_PER_HOUR: '2' });
    try {
      const lp = await newProject(limited);
      const box = await lp.inbox();
      const t = await lp.token(['send']);
      const to = rcpt();
      for (let i = 0; i < 2; i++)
        expect((await postRaw(limited, t, box.id, { from: box.address, to: [to], raw: message(box.address) })).status).to.equal(200);
      await expectError(
        await postRaw(limited, t, box.id, { from: box.address, to: [to], raw: message(box.address) }),
        422,
        /2 messages per hour/,
      );
      await atSink(to, 2);
    } finally {
      await limited.close();
    }
  });

  it('answers 503, relays nothing and files nothing while Postfix is down', async function () {
    this.timeout(90_000);
    const box = await p.inbox();
    const to = rcpt();
    await stopPostfix();
    try {
      await expectError(await postRaw(s, token, box.id, { from: box.address, to: [to], raw: message(box.address) }), 503, /try again/);
    } finally {
      await startPostfix();
    }
    // Proof the system had its chance: a message sent now arrives, and is the only one.
    const res = await postRaw(s, token, box.id, { from: box.address, to: [to], raw: message(box.address, { Subject: 'after' }) });
    expect(res.status, await res.clone().text()).to.equal(200);
    const got = await atSink(to);
    expect(got).to.have.length(1);
    const ids = await labelIds(s, token, box.id);
    const sent = await until('the copy in Sent', async () => {
      const list = await listLabel(s, token, box.id, ids.Sent!);
      return list.length > 0 ? list : null;
    });
    expect(sent.map((m) => m.subject)).to.deep.equal(['after']);
    expect(await eventsOf(s, p.projectId, box.id, ['mail.delivery.accepted'])).to.have.length(1);
  });

  it("files the Sent copy exactly once when Dovecot is down between Postfix's acceptance and filing", async function () {
    this.timeout(120_000);
    const box = await p.inbox();
    const to = rcpt();
    // A first send leaves an authenticated connection in the relay's pool: the next send needs
    // no Dovecot login, so Postfix can accept it while Dovecot is down.
    expect(
      (await postRaw(s, token, box.id, { from: box.address, to: [to], raw: message(box.address, { Subject: 'first' }) })).status,
    ).to.equal(200);
    await atSink(to);
    const ids = await labelIds(s, token, box.id);
    await until('the first copy', async () => (await listLabel(s, token, box.id, ids.Sent!)).length === 1);
    await stopDovecot();
    try {
      // Dovecot lets connected clients finish for a few seconds after its master stopped.
      await until('the IMAP connections to close', async () => s.postern.mailSource.pool.connectionsOf(box.imapUser) === 0, 30_000);
      const res = await postRaw(s, token, box.id, { from: box.address, to: [to], raw: message(box.address, { Subject: 'second' }) });
      expect(res.status, await res.clone().text()).to.equal(200);
      await atSink(to, 2);
      // The outbox tried, and failed: the copy waits in the store.
      await until(
        'a failed filing attempt',
        async () => {
          const waiting = (await s.postern.store.outbox.backlog(box.id, 10)).find((e) => e.state === 'filing');
          return waiting && waiting.attempts > 0;
        },
        30_000,
      );
    } finally {
      await startDovecot();
    }
    const sent = await until(
      'the second copy',
      async () => {
        const list = await listLabel(s, token, box.id, ids.Sent!).catch(() => []);
        return list.length >= 2 ? list : null;
      },
      60_000,
    );
    // Once filed, the outbox has nothing left to do: a further pass changes nothing.
    await until('the outbox to settle', async () => (await s.postern.store.outbox.backlog(box.id, 10)).length === 0);
    await s.postern.sentCopies.runOnce();
    const again = await listLabel(s, token, box.id, ids.Sent!);
    expect(again.map((m) => m.subject).sort()).to.deep.equal(['first', 'second']);
    expect(sent).to.have.length(2);
  });

  it('accepts a 25 MB message; refuses a larger body with 422 while it is still arriving', async function () {
    this.timeout(120_000);
    const to = rcpt('big');
    const head = message(inbox.address, { To: to }, '');
    const line = `${'y'.repeat(998)}\r\n`;
    const size = 25 * 1024 * 1024;
    const body = line.repeat(Math.floor((size - head.length) / line.length));
    const raw = Buffer.from(head + body + 'z'.repeat(size - head.length - body.length - 2) + '\r\n');
    expect(raw.length).to.equal(size);
    const res = await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw });
    expect(res.status, await res.clone().text()).to.equal(200);
    const [got] = await atSink(to, 1, 60_000);
    expect(withoutTrace(got!.raw).length).to.equal(size);

    // One byte more is refused; a client that streams a larger body gets its answer before it
    // has sent it all, and Postern never holds the whole body.
    const over = Buffer.concat([raw, Buffer.from('!')]);
    await expectError(await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw: over }), 422, /byte limit/);
    const answer = await new Promise<{ status: number; written: number; body: string }>((resolve, reject) => {
      const req = request(`${s.base}/inboxes/${inbox.id}/messages`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      });
      let written = 0;
      const chunk = Buffer.alloc(1024 * 1024, 0x41);
      let answered = false;
      req.on('response', (r) => {
        answered = true;
        let text = '';
        r.on('data', (d: Buffer) => (text += d.toString()));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, written, body: text }));
      });
      req.on('error', (e) => (answered ? undefined : reject(e)));
      req.write(`{"from":"${inbox.address}","to":["${to}"],"raw":"`);
      // Up to 100 MB, one chunk after another, stopping as soon as the answer came.
      const pump = () => {
        if (answered || written >= 100 * 1024 * 1024) return;
        written += chunk.length;
        if (req.write(chunk)) setImmediate(pump);
        else req.once('drain', pump);
      };
      pump();
    });
    expect(answer.status).to.equal(422);
    expect(answer.written).to.be.below(60 * 1024 * 1024);
    expect(JSON.parse(answer.body))
      .to.have.property('error')
      .that.matches(/byte limit/);
  });

  it("sends every sender login-mapped address: an inbox's extra address Postfix knows belongs to its user", async () => {
    const user = `${randomBytes(4).toString('hex')}-x@${mailEnv().domain}`;
    const extra = `${randomBytes(4).toString('hex')}-y@example.net`;
    await addUser(mailEnv(), user, randomBytes(8).toString('hex'));
    await addSenderLogin(mailEnv(), extra, user);
    const { id } = await s.postern.admin.addInbox({ projectId: p.projectId, imapUser: user, addresses: [user, extra], mode: 'compatible' });
    await s.postern.admin.grant(p.memberId, id, 'owner');
    const to = rcpt();
    const res = await postRaw(s, token, id, { from: extra, to: [to], raw: message(extra) });
    expect(res.status, await res.clone().text()).to.equal(200);
    expect((await atSink(to))[0]!.mailFrom).to.equal(extra);
  });

  it('a bounce comes back to the inbox and is matched by its envelope id: mail.delivery.failed with the recipients and status codes', async function () {
    this.timeout(90_000);
    const box = await p.inbox();
    // The index is filled once (an inbox in use long since): the report is then a new message.
    const ids = await labelIds(s, token, box.id);
    await listLabel(s, token, box.id, ids.INBOX!);
    // The sink refuses reject-… with 550 after Postfix accepted the message: Postfix bounces it.
    const [bad, good] = [rcpt('reject-me'), rcpt('fine')];
    const res = await postRaw(s, token, box.id, {
      from: box.address,
      to: [bad, good],
      raw: message(box.address, { Subject: 'will bounce' }),
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    await atSink(good);
    // Reading INBOX brings the report into the index, and so to the matcher.
    const [failed] = await until(
      'mail.delivery.failed',
      async () => {
        await listLabel(s, token, box.id, ids.INBOX!);
        const found = await eventsOf(s, p.projectId, box.id, ['mail.delivery.failed']);
        return found.length > 0 ? found : null;
      },
      60_000,
    );
    const [accepted] = await eventsOf(s, p.projectId, box.id, ['mail.delivery.accepted']);
    expect(failed!.subject).to.equal((accepted!.data as { messageId: string }).messageId);
    expect(failed!.data).to.deep.include({ from: box.address, permanent: true, recipients: [bad], statuses: ['5.1.1'], status: '5.1.1' });
    expect((failed!.data as { reason: string }).reason).to.include('reject- test hook');
    // Recorded once, however often the inbox is read again.
    await listLabel(s, token, box.id, ids.INBOX!);
    expect(await eventsOf(s, p.projectId, box.id, ['mail.delivery.failed'])).to.have.length(1);
  });

  it("with recipient verification on, the remote server's 5xx is a 422 and its 4xx a 503, in Postfix's words", async function () {
    this.timeout(120_000);
    // Each check on an instance of its own: a pooled connection keeps talking to an smtpd
    // started before Postfix reloaded its settings.
    const sendFresh = async (to: string) => {
      const fresh = await startPostern();
      try {
        const fp = await newProject(fresh);
        const box = await fp.inbox();
        const t = await fp.token(['send']);
        // Postfix answers 450 "verification in progress" until its probe is back (seconds on a
        // busy machine); a client retries that 503 like any other, and so does this test.
        for (let i = 0; ; i++) {
          const res = await postRaw(fresh, t, box.id, { from: box.address, to: [to], raw: message(box.address) });
          const text = await res.text();
          if (i >= 30 || res.status !== 503 || !/verification in progress/.test(text)) return { status: res.status, text };
          await new Promise((r) => setTimeout(r, 1000));
        }
      } finally {
        await fresh.close();
      }
    };
    const service = `${mailEnv().submission.port}/inet`;
    await postconfService({
      [`${service}/smtpd_recipient_restrictions`]: 'reject_unverified_recipient',
      [`${service}/unverified_recipient_reject_code`]: '550',
    });
    try {
      const refused = await sendFresh(rcpt('reject-v'));
      expect(refused.status, refused.text).to.equal(422);
      expect(refused.text).to.match(/Recipient address rejected: undeliverable address/);
      const deferred = await sendFresh(rcpt('defer-v'));
      expect(deferred.status, deferred.text).to.equal(503);
      expect(deferred.text).to.match(/Recipient address rejected: unverified address/);
    } finally {
      await postconfService({ [`${service}/smtpd_recipient_restrictions`]: '', [`${service}/unverified_recipient_reject_code`]: null });
    }
    // Restored: an address the sink would refuse is accepted again (and bounces later).
    const after = await sendFresh(rcpt('reject-after'));
    expect(after.status, after.text).to.equal(200);
  });

  it("a zero-access inbox's Sent copy is sealed like its incoming mail, in the outbox already; the recipients get the message as given", async () => {
    const box = await p.inbox({ mode: 'zero-access' });
    const to = rcpt();
    const raw = message(box.address, { To: to, Subject: 'sealed copy' }, 'The secret body.\r\n');
    // Filing waits, so the copy is seen where it rests first: the outbox.
    await s.postern.sentCopies.stop();
    try {
      const res = await postRaw(s, token, box.id, { from: box.address, to: [to], raw });
      expect(res.status, await res.clone().text()).to.equal(200);
      expect(withoutTrace((await atSink(to))[0]!.raw).toString()).to.equal(raw);
      const [waiting, ...more] = await s.postern.store.outbox.backlog(box.id, 10);
      expect(more).to.deep.equal([]);
      const held = (await s.postern.store.outbox.copy(waiting!.id))!.toString('utf8');
      expect(held).to.match(/^X-Postern-Sealed: /m);
      expect(held).not.to.include('The secret body.');
    } finally {
      s.postern.sentCopies.start();
    }
    // The filer may create Sent as it files (a new inbox has none yet): look for it each time.
    const [copy] = await until('the copy in Sent', async () => {
      const sent = (await labelIds(s, token, box.id)).Sent;
      const list = sent ? await listLabel(s, token, box.id, sent) : [];
      return list.length > 0 ? list : null;
    });
    expect(copy!.subject).to.equal('sealed copy');
    const stored = await s.postern.mailSource.pool.use(box.imapUser, async (client) => {
      await client.mailboxOpen('Sent');
      const m = await client.fetchOne('*', { source: true });
      await client.mailboxClose();
      return m ? m.source!.toString('utf8') : '';
    });
    expect(stored).to.match(/^X-Postern-Sealed: /m);
    expect(stored).to.include('multipart/encrypted');
    expect(stored).not.to.include('The secret body.');
  });
});

describe('sending: bounces for a zero-access inbox (its mail arrives through the ingress, sealed)', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    s = await startPostern({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port) });
    p = await newProject(s);
  });
  after(async () => {
    await s?.close();
  });

  it('a bounce comes back through the ingress: matched before it is sealed, recorded once as mail.delivery.failed, stored sealed', async () => {
    const box = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    // The inbox sends as its ingress-domain address: Postfix must know it belongs to the user.
    await addSenderLogin(mailEnv(), box.address, box.imapUser);
    const token = await p.token(['messages:read', 'send']);
    const [bad, good] = [rcpt('reject-zero'), rcpt('fine-zero')];
    const res = await postRaw(s, token, box.id, {
      from: box.address,
      to: [bad, good],
      raw: message(box.address, { Subject: 'will bounce, sealed' }),
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    await atSink(good);
    // Postfix's report reaches the inbox through Postern's ingress, which seals it: the
    // event comes from the ingress, not from reading the stored (sealed) report.
    const [failed] = await untilDelivered(
      'mail.delivery.failed',
      async () => {
        const found = await eventsOf(s, p.projectId, box.id, ['mail.delivery.failed']);
        return found.length > 0 ? found : null;
      },
      90_000,
    );
    const [accepted] = await eventsOf(s, p.projectId, box.id, ['mail.delivery.accepted']);
    expect(failed!.subject).to.equal((accepted!.data as { messageId: string }).messageId);
    expect(failed!.data).to.deep.include({ from: box.address, permanent: true, recipients: [bad], statuses: ['5.1.1'], status: '5.1.1' });
    expect((failed!.data as { reason: string }).reason).to.include('reject- test hook');
    // The report itself is stored sealed, like all of the inbox's incoming mail.
    const stored = await untilDelivered('the report in INBOX', async () => {
      const got = await storedMessages(box);
      return got.length > 0 ? got : null;
    });
    const text = stored[0]!.source.toString('latin1');
    expect(text).to.match(/^Content-Type: multipart\/encrypted;/m);
    expect(text).not.to.include('delivery-status');
    // Once: reading the inbox (the index's path) finds nothing more in the sealed report.
    const ids = await labelIds(s, token, box.id);
    await listLabel(s, token, box.id, ids.INBOX!);
    await s.postern.bounces.drain();
    expect(await eventsOf(s, p.projectId, box.id, ['mail.delivery.failed'])).to.have.length(1);
  });
});
