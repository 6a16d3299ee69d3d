// Postern's LMTP ingress in the real delivery path: Postfix → Postern (POSTERN_LMTP_PORT, the
// env's ingress port) → Dovecot. A zero-access inbox stores only the sealed form (no plaintext
// in Dovecot's files or in any API answer), which opens with gpg; other mail passes untouched;
// each recipient gets its own answer; message.received is recorded for each inbox.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import nodemailer from 'nodemailer';
import * as openpgp from 'openpgp';
import { sealedEpoch } from '../../lib/mail/sealing.ts';
import { addUser } from '../../scripts/mailenv.ts';
import {
  call,
  envVars,
  mailEnv,
  newProject,
  startPostern,
  unique,
  type TestInbox,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { CORPUS_DIR, corpusFiles, itWithCorpus } from '../helpers/corpus-files.ts';
import { ingressInbox, lmtpDeliver, lmtpSend, postfixLog, storedMessages, untilDelivered } from '../helpers/ingress-helpers.ts';
import { freePort, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { gpgDecrypt, openSealed, type TestEpochKey } from '../helpers/seal-helpers.ts';

/** Through Postfix's SMTP port, as mail from the internet arrives. */
export async function sendThroughPostfix(to: string, subject: string, text: string, messageId: string): Promise<void> {
  const env = mailEnv();
  const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
  try {
    await transport.sendMail({
      from: 'Sender <sender@example.org>',
      to,
      subject,
      text,
      messageId,
      headers: { 'X-Private-Note': 'inside only' },
    });
  } finally {
    transport.close();
  }
}

/** The inbox's epoch key as a test key: what a member's mail app would hold once unwrapped. */
async function epochKey(s: TestServer, inboxId: string): Promise<TestEpochKey> {
  const current = await s.postern.keys.current(inboxId);
  const privateKey = await s.postern.keys.privateKey(inboxId, current.epoch);
  return { sealKey: { epoch: current.epoch, publicKey: current.publicKey }, privateKey, armoredPrivate: privateKey.armor() };
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** Every file under a directory, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

/** The messages as Dovecot itself reads them back (mail_crypt opened): `doveadm fetch text`. */
function doveadmText(user: string): Promise<string> {
  const env = mailEnv();
  return new Promise((resolve, reject) =>
    execFile(
      'doveadm',
      ['-c', join(env.dir, 'dovecot', 'dovecot.conf'), 'fetch', '-u', user, 'text', 'mailbox', '*', 'all'],
      { maxBuffer: 64 * 1024 * 1024 },
      (err, out) => (err ? reject(err) : resolve(out)),
    ),
  );
}

interface ReceivedEvent {
  type: string;
  /** The inbox, for events about one. */
  containerid?: string;
  subject?: string;
  data: Record<string, unknown>;
}

async function eventsOf(s: TestServer, token: string, type: string): Promise<ReceivedEvent[]> {
  const res = await call(`${s.base}/events?types=${type}&limit=500`, { token });
  expect(res.status, await res.clone().text()).to.equal(200);
  return ((await res.json()) as { events: ReceivedEvent[] }).events;
}

describe('delivery ingress (Postfix → Postern LMTP → Dovecot)', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let sealed: TestInbox;
  let plain: TestInbox;
  let token: string;

  before(async () => {
    s = await startPostern({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port), POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    sealed = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    plain = await ingressInbox(s, p.projectId, p.memberId, 'compatible');
    token = await p.token(['messages:read', 'content:read', 'events:read']);
  });
  after(async () => {
    await s?.close();
  });

  it('seals mail for a zero-access inbox: routing headers in clear, the rest opens with gpg to what Postfix delivered', async () => {
    const marker = `zero-access-body-${unique('m')}`;
    const messageId = `${unique('zid')}@example.org`;
    await sendThroughPostfix(sealed.address, 'sealed hello', `the secret is ${marker}`, `<${messageId}>`);
    const [stored] = await untilDelivered('the sealed message in Dovecot', async () => {
      const got = await storedMessages(sealed);
      return got.length > 0 && got;
    });
    const text = stored!.source.toString('latin1');
    expect(text).to.not.include(marker);
    expect(text).to.not.include('X-Private-Note');
    expect(text).to.match(/^Content-Type: multipart\/encrypted; protocol="application\/pgp-encrypted";/m);
    expect(text).to.match(/^Subject: sealed hello\r$/m);
    expect(text).to.match(/^From: Sender <sender@example\.org>\r$/m);
    expect(text).to.include(`Message-ID: <${messageId}>`);
    const key = await epochKey(s, sealed.id);
    expect(sealedEpoch(stored!.source)).to.equal(key.sealKey.epoch);
    // As a mail app would: GnuPG with the epoch key opens the stored message.
    const opened = (await gpgDecrypt(stored!.source, key)).toString('latin1');
    expect(opened).to.include(marker);
    expect(opened).to.include('X-Private-Note: inside only');
    // Postfix's own trace header is inside: the whole message as delivered was sealed.
    expect(opened).to.match(/^Received: from /m);
    expect(Buffer.compare(await openSealed(stored!.source, key), Buffer.from(opened, 'latin1'))).to.equal(0);

    // As the web app does: wrappedDek from the detail + /raw opens to the same bytes.
    const labels = (await (await call(`${s.base}/inboxes/${sealed.id}/labels`, { token })).json()) as {
      labels: Array<{ id: string; name: string }>;
    };
    const inboxLabel = labels.labels.find((l) => l.name === 'INBOX')!.id;
    const list = (await (await call(`${s.base}/inboxes/${sealed.id}/labels/${inboxLabel}/messages`, { token })).json()) as {
      messages: Array<{ id: string; subject?: string }>;
    };
    const msg = list.messages.find((m) => m.subject === 'sealed hello')!;
    const detail = (await (await call(`${s.base}/inboxes/${sealed.id}/messages/${msg.id}`, { token })).json()) as {
      keyEpoch: number;
      wrappedDek: string;
    };
    expect(detail.keyEpoch).to.equal(key.sealKey.epoch);
    const rawRes = await call(`${s.base}/inboxes/${sealed.id}/messages/${msg.id}/raw`, { token });
    expect(rawRes.status).to.equal(200);
    const packets = Buffer.concat([Buffer.from(detail.wrappedDek, 'base64'), Buffer.from(await rawRes.arrayBuffer())]);
    const { data } = await openpgp.decrypt({
      message: await openpgp.readMessage({ binaryMessage: packets }),
      decryptionKeys: key.privateKey,
      format: 'binary',
    });
    expect(Buffer.from(data as Uint8Array).toString('latin1')).to.equal(opened);
  });

  it('stores no plaintext of a zero-access message anywhere: Dovecot files, doveadm, any API answer', async () => {
    const marker = `nowhere-${unique('m')}`;
    const messageId = `${unique('nid')}@example.org`;
    await sendThroughPostfix(sealed.address, 'nowhere to be seen', `body ${marker} body`, `<${messageId}>`);
    const controlMarker = `control-${unique('m')}`;
    await sendThroughPostfix(plain.address, 'control', `body ${controlMarker} body`, `<${unique('cid')}@example.org>`);
    await untilDelivered(
      'both messages stored',
      async () => (await storedMessages(sealed)).some((m) => m.source.includes(messageId)) && (await storedMessages(plain)).length > 0,
    );

    // What Dovecot holds, read back through Dovecot (mail_crypt opened): sealed; the control is not.
    expect(await doveadmText(sealed.imapUser)).to.not.include(marker);
    expect(await doveadmText(plain.imapUser), 'the check can see plaintext').to.include(controlMarker);
    // Every file of the user's mail directory, raw: indexes and caches included.
    const home = join(mailEnv().dir, 'mail', mailEnv().domain, sealed.imapUser.split('@')[0]!);
    const files = filesUnder(home);
    expect(files.length).to.be.greaterThan(0);
    for (const f of files) expect(readFileSync(f).includes(marker), f).to.equal(false);

    // Every API answer about it.
    const answers: string[] = [];
    const get = async (url: string) => {
      const res = await call(url, { token });
      const body = await res.text();
      expect(res.status, `${url}: ${body}`).to.be.below(500);
      answers.push(body);
      return body;
    };
    const labels = JSON.parse(await get(`${s.base}/inboxes/${sealed.id}/labels`)) as { labels: Array<{ id: string; name: string }> };
    const inboxLabel = labels.labels.find((l) => l.name === 'INBOX')!.id;
    const list = JSON.parse(await get(`${s.base}/inboxes/${sealed.id}/labels/${inboxLabel}/messages`)) as {
      messages: Array<{ id: string; subject?: string; from?: string }>;
    };
    const summary = list.messages.find((m) => m.subject === 'nowhere to be seen');
    expect(summary, JSON.stringify(list)).to.not.equal(undefined);
    // The metadata API still shows the clear routing headers.
    expect(summary!.from).to.include('sender@example.org');
    for (const part of ['', '/raw', '/source', '/content', '/attachments/0'])
      await get(`${s.base}/inboxes/${sealed.id}/messages/${summary!.id}${part}`);
    await get(`${s.base}/events?limit=500`);
    await get(`${s.base}/inboxes`);
    for (const body of answers) expect(body).to.not.include(marker);
  });

  it('passes mail for a compatible inbox through untouched and records message.received for both modes', async () => {
    const marker = `plain-${unique('m')}`;
    const messageId = `${unique('pid')}@example.org`;
    await sendThroughPostfix(plain.address, 'plain hello', `visible ${marker}`, `<${messageId}>`);
    const stored = await untilDelivered('the plain message', async () =>
      (await storedMessages(plain)).find((m) => m.source.includes(messageId)),
    );
    expect(stored.source.toString()).to.include(marker);
    expect(sealedEpoch(stored.source)).to.equal(null);
    const events = await until('message.received for both inboxes', async () => {
      const got = await eventsOf(s, token, 'message.received');
      return (
        got.some((e) => e.containerid === plain.id && e.data.messageId === `<${messageId}>`) &&
        got.some((e) => e.containerid === sealed.id) &&
        got
      );
    });
    const plainEvent = events.find((e) => e.containerid === plain.id && e.data.messageId === `<${messageId}>`)!;
    expect(plainEvent.subject).to.equal(`<${messageId}>`);
    expect(plainEvent.data).to.include({ recipient: plain.address, from: 'sender@example.org', sealed: false });
    expect(plainEvent.data.size).to.be.a('number').above(100);
    const sealedEvent = events.find((e) => e.containerid === sealed.id)!;
    expect(sealedEvent.data).to.include({ recipient: sealed.address, sealed: true, epoch: 1 });
  });

  it('answers each recipient on its own: known inboxes, a Dovecot user Postern does not know, an unknown user', async () => {
    const env = mailEnv();
    const unknown = `${unique('nobody')}@${env.domain}`;
    const message = `From: a@example.org\r\nTo: many\r\nSubject: fan-out ${unique('f')}\r\nMessage-ID: <${unique('fid')}@example.org>\r\n\r\nfan-out body\r\n`;
    // A Dovecot user that is no inbox of Postern's: its mail is none of Postern's business.
    const raw = `${unique('raw')}@${env.domain}`;
    await addUser(env, raw, 'secret-raw-pass');
    const result = await lmtpSend(env.ingress.port, 'a@example.org', [sealed.address, unknown, raw, plain.address], message);
    expect(result.rejected.map((r) => [r.recipient, r.code])).to.deep.equal([[unknown, 550]]);
    expect(result.accepted).to.have.members([sealed.address, raw, plain.address]);
    // The address Postern does not know got the message byte for byte (Dovecot adds its trace headers on top).
    const rawInbox: TestInbox = { id: '', address: raw, imapUser: raw, imapPassword: 'secret-raw-pass' };
    const [got] = await storedMessages(rawInbox);
    expect(got!.source.toString().endsWith(message)).to.equal(true);
  });

  itWithCorpus('delivers every corpus message sealed, each opening to exactly the bytes delivered', async function () {
    this.timeout(600_000);
    const files = corpusFiles().map((f) => join(CORPUS_DIR, f.name));
    const box = await ingressInbox(s, p.projectId, p.memberId, 'zero-access');
    // Four at a time, as Postfix would; stored order is then arrival order, so match by content.
    const sent = new Map<string, string>();
    const queue = [...files];
    await Promise.all(
      [1, 2, 3, 4].map(async () => {
        for (let f = queue.shift(); f; f = queue.shift()) {
          const raw = readFileSync(f);
          const result = await lmtpDeliver(mailEnv().ingress.port, 'corpus@example.org', [box.address], raw);
          expect(result.accepted, f).to.deep.equal([box.address]);
          sent.set(sha256(onTheWire(raw)), f);
        }
      }),
    );
    const stored = await storedMessages(box);
    expect(stored.length).to.equal(files.length);
    const key = await epochKey(s, box.id);
    const opened = new Set<string>();
    for (const m of stored) {
      expect(sealedEpoch(m.source)).to.equal(key.sealKey.epoch);
      opened.add(sha256(await openSealed(m.source, key)));
    }
    // Each stored message opens to one delivered byte for byte, and every delivered one is there.
    const missing = [...sent].filter(([hash]) => !opened.has(hash)).map(([, f]) => f);
    expect(missing).to.deep.equal([]);
    expect(opened.size).to.equal(sent.size);
  });
});

/**
 * What an LMTP client puts on the wire for `raw` (nodemailer, as Postfix does): every line ending
 * CRLF, and a final line ending added when missing. That is what the ingress receives.
 */
export function onTheWire(raw: Buffer): Buffer {
  let text = raw.toString('latin1').replace(/\r\n|\r|\n/g, '\r\n');
  if (!text.endsWith('\r\n')) text += '\r\n';
  return Buffer.from(text, 'latin1');
}

describe('delivery ingress when the ingress or Dovecot is down', function () {
  this.timeout(240_000);
  const servers: TestServer[] = [];
  after(async () => {
    for (const srv of servers) await srv.close().catch(() => undefined);
  });

  /** Postfix's log lines for deliveries to `address` with this status. */
  const attempts = (address: string, status: string) =>
    postfixLog()
      .split('\n')
      .filter((l) => l.includes(`to=<${address}>`) && l.includes(`status=${status}`));

  /**
   * Waits until Postfix has logged an attempt for `address` that `matches`, its queue flushed
   * meanwhile (untilDelivered); on a timeout, says what Postfix did log.
   */
  async function attemptLogged(what: string, address: string, matches: (line: string) => boolean): Promise<void> {
    try {
      await untilDelivered(
        what,
        async () =>
          postfixLog()
            .split('\n')
            .some((l) => l.includes(`to=<${address}>`) && matches(l)),
        60_000,
      );
    } catch (err) {
      const seen = postfixLog()
        .split('\n')
        .filter((l) => l.includes(`to=<${address}>`));
      throw new Error(`${(err as Error).message}; Postfix logged for ${address}:\n${seen.join('\n') || '(nothing)'}`);
    }
  }

  it('keeps the mail queued while nothing listens and while Dovecot is down, then delivers it once', async () => {
    const env = mailEnv();
    // Administration only: no LMTP listener yet.
    const admin = await startPostern();
    servers.push(admin);
    const p = await newProject(admin);
    const inbox = await ingressInbox(admin, p.projectId, p.memberId, 'zero-access');
    const marker = `retry-${unique('m')}`;
    await sendThroughPostfix(inbox.address, 'retried', `body ${marker}`, `<${unique('rid')}@example.org>`);

    // 1. Nobody on the ingress port: Postfix defers (connection refused) and keeps it.
    await attemptLogged('a deferral while no ingress listens', inbox.address, (l) => l.includes('status=deferred'));

    // 2. An ingress whose Dovecot is down: it answers 4xx, Postfix defers again.
    const deadDovecot = await startPostern({
      ...admin.storeEnv,
      POSTERN_LMTP_PORT: String(env.ingress.port),
      POSTERN_DOVECOT_LMTP_PORT: String(await freePort()),
    });
    servers.push(deadDovecot);
    await attemptLogged('a 4xx from the ingress', inbox.address, (l) => l.includes('status=deferred') && /\b45\d 4\.4\.2\b/.test(l));
    await deadDovecot.close();
    servers.splice(servers.indexOf(deadDovecot), 1);
    expect(await storedMessages(inbox)).to.have.length(0);

    // 3. Everything up: the next retry delivers it.
    const live = await startPostern({ ...admin.storeEnv, POSTERN_LMTP_PORT: String(env.ingress.port) });
    servers.push(live);
    await attemptLogged('Postfix delivered it', inbox.address, (l) => l.includes('status=sent'));
    // Postfix has finished with the message (sent is final): exactly one copy, sealed.
    expect(attempts(inbox.address, 'sent')).to.have.length(1);
    const stored = await storedMessages(inbox);
    expect(stored).to.have.length(1);
    expect(sealedEpoch(stored[0]!.source)).to.equal(1);
    expect(stored[0]!.source.includes(marker)).to.equal(false);
  });
});

describe('delivery ingress with POSTERN_WORKERS=2', function () {
  this.timeout(120_000);
  // Every worker listens on the ingress port; the cluster shares it as it shares HTTP's.
  let admin: TestServer;
  let cluster: Listening | null = null;
  before(async () => {
    admin = await startPostern();
    cluster = await spawnPostern(
      envVars(mailEnv(), {
        ...admin.storeEnv,
        POSTERN_WORKERS: '2',
        POSTERN_PORT: String(await freePort()),
        POSTERN_LMTP_PORT: String(mailEnv().ingress.port),
      }),
    );
  });
  after(async () => {
    if (cluster) await stopProcess(cluster.child);
    await admin?.close();
  });

  it('starts with every worker listening on the shared ingress port, and seals what arrives there', async () => {
    const p = await newProject(admin);
    const inbox = await ingressInbox(admin, p.projectId, p.memberId, 'zero-access');
    for (let i = 0; i < 4; i++) {
      const result = await lmtpSend(
        mailEnv().ingress.port,
        'a@example.org',
        [inbox.address],
        `Subject: worker ${i}\r\n\r\nworker body ${i}\r\n`,
      );
      expect(result.accepted).to.deep.equal([inbox.address]);
    }
    const stored = await storedMessages(inbox);
    expect(stored).to.have.length(4);
    for (const m of stored) expect(sealedEpoch(m.source)).to.equal(1);
  });
});
