// A draft is sent at most once, and answered definitely, when the relay's final reply is lost
// (Postfix queued the message, its "250" never came back) and when `postern serve` is killed
// with sends under way: the restarted process settles what was left (docs/sending.md, "Exactly
// once"): no row stays in flight, no draft answers 503 for good, every message known sent gets
// one Sent copy promptly and one whose outcome is unknown none, nothing goes twice, nothing
// acknowledged is lost. test/send/send-evidence.test.ts kills it at chosen points of the SMTP
// conversation and settles an unknown outcome with Postfix's delivery report.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
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
import { until } from '../helpers/mail-fixtures.ts';
import { childPids, freePort, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { atSink, draft, eventsOf, postRaw, rcpt, sealDraft, sentCopies } from '../helpers/send-fixtures.ts';
import { TcpTap, type TapConnection } from '../helpers/tcp-tap.ts';

/** The answer to a send whose final reply was lost, the first time and on every retry. */
const UNKNOWN = /^.*outcome unknown: the whole message was written to the mail server but its reply was lost.*it will not be sent again/;

function message(from: string, to: string, subject: string): string {
  return [
    `From: <${from}>`,
    `To: <${to}>`,
    `Subject: ${subject}`,
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <${randomBytes(8).toString('hex')}@postern.test>`,
    '',
    'Exactly once.',
    '',
  ].join('\r\n');
}

/** Each subject the sink got for `to`, with how many copies. */
async function sinkCounts(to: string, atLeast: number): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const m of await atSink(to, atLeast)) {
    const subject = /^Subject: (.*)$/m.exec(m.raw.toString('latin1'))?.[1]?.trim() ?? '';
    counts.set(subject, (counts.get(subject) ?? 0) + 1);
  }
  return counts;
}

type SendBody = { draftId: string; epoch: number; wrappedDek: string; ciphertext: string; from: string; to: string[] };

async function sealedSend(
  compose: { epoch: number; epochPublic: string },
  inbox: TestInbox,
  to: string,
  subject: string,
): Promise<SendBody> {
  const draftId = draft();
  return {
    draftId,
    epoch: compose.epoch,
    ...(await sealDraft(compose.epochPublic, message(inbox.address, to, subject), draftId)),
    from: inbox.address,
    to: [to],
  };
}

/** Longer than any send takes here: a request still unanswered then was left hanging. */
const HUNG_MS = 30_000;

const post = (base: string, token: string, inboxId: string, body: SendBody) =>
  call(`${base}/inboxes/${inboxId}/send`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(HUNG_MS),
  });

/** A request neither answered nor cut off: a dead worker's connection left open somewhere. */
const hung = (err: unknown) => err instanceof DOMException && err.name === 'TimeoutError';

/**
 * As a client retries a draft: again on a lost connection (a kept-alive one to a worker that
 * just died), which a draft makes safe.
 */
async function postAgain(base: string, token: string, inboxId: string, body: SendBody): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await post(base, token, inboxId, body);
    } catch (err) {
      if (hung(err)) throw new Error(`a retried send hung for ${HUNG_MS} ms`);
      if (!(err instanceof TypeError) || attempt >= 5) throw err;
    }
  }
}

describe('sending exactly once: a lost final reply', function () {
  this.timeout(90_000);
  let s: TestServer;
  let tap: TcpTap;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;
  let compose: { epoch: number; epochPublic: string };
  /** DATA commands Postern sent through the tap, in all. */
  let datas = 0;
  /** Armed: the connection whose message's final dot went to Postfix, and what to call once its reply is dropped. */
  let lose: { done: () => void; after: TapConnection | null } | null = null;
  const tails = new WeakMap<TapConnection, string>();

  before(async () => {
    const env = mailEnv();
    tap = new TcpTap(env.submission, {
      onClient(chunk, conn) {
        // An envelope is one write: its DATA is within one chunk.
        datas += chunk.toString('latin1').match(/(?:^|\r\n)DATA\r\n/g)?.length ?? 0;
        const text = (tails.get(conn) ?? '') + chunk.toString('latin1');
        tails.set(conn, text.slice(-8));
        // The message's end reached Postfix: its reply is the one to lose.
        if (lose && !lose.after && text.endsWith('\r\n.\r\n')) lose.after = conn;
        return 'forward';
      },
      onServer(chunk, conn) {
        if (!lose || lose.after !== conn || !chunk.toString('latin1').startsWith('250')) return 'forward';
        // Postfix queued it ("250 … queued as"); Postern never hears so.
        const { done } = lose;
        lose = null;
        conn.drop();
        done();
        return 'handled';
      },
    });
    const port = await tap.start();
    s = await startPostern({ POSTERN_SMTP_HOST: '127.0.0.1', POSTERN_SMTP_PORT: String(port) });
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'send']);
    compose = await json<{ epoch: number; epochPublic: string }>(await call(`${s.base}/inboxes/${inbox.id}/compose`, { token }));
  });
  after(async () => {
    await s?.close();
    await tap?.close();
  });

  it('answers 422 (outcome unknown) to the send and every retry of its draft, relays it once, and files no Sent copy', async () => {
    const to = rcpt();
    const body = await sealedSend(compose, inbox, to, 'reply lost');
    const lost = new Promise<void>((done) => (lose = { done, after: null }));
    await expectError(await post(s.base, token, inbox.id, body), 422, UNKNOWN);
    await lost;
    // Postfix had it: it arrives, once.
    expect((await sinkCounts(to, 1)).get('reply lost')).to.equal(1);

    // Retries, one after another and at once: the same definite answer, and nothing reaches Postfix.
    const before = datas;
    await expectError(await post(s.base, token, inbox.id, body), 422, UNKNOWN);
    const again = await Promise.all(Array.from({ length: 5 }, () => post(s.base, token, inbox.id, body)));
    for (const res of again) await expectError(res, 422, UNKNOWN);
    expect(datas - before, 'DATA commands for the retries').to.equal(0);

    // The positive signal: a later message through the same relay arrives, and the lost one is still there once.
    const marker = await sealedSend(compose, inbox, to, 'marker');
    expect((await post(s.base, token, inbox.id, marker)).status).to.equal(200);
    expect(datas - before).to.equal(1);
    const counts = await sinkCounts(to, 2);
    expect(Object.fromEntries(counts)).to.deep.equal({ 'reply lost': 1, marker: 1 });

    // Kept with its outcome unknown, listed so; no Sent copy for a message Postfix was not known
    // to take (the marker's, filed meanwhile, is the positive signal).
    await until('the marker filed in Sent', async () => (await sentCopies(inbox)).get('marker') === 1);
    const entry = await s.postern.store.outbox.byDraft(inbox.id, body.draftId);
    expect(entry).to.deep.include({ state: 'unknown', outcomeUnknown: true });
    expect((await sentCopies(inbox)).has('reply lost')).to.equal(false);
    const listed = await json<{ sends: Array<{ id: string; state: string }> }>(
      await call(`${s.base}/inboxes/${inbox.id}/outbox`, { token }),
    );
    expect(listed.sends.find((x) => x.id === entry!.id)?.state).to.equal('unknown');
  });

  it('answers 422 (outcome unknown) to POST /messages too: a client that retried a 503 there would send a second copy', async () => {
    const to = rcpt();
    const lost = new Promise<void>((done) => (lose = { done, after: null }));
    const raw = message(inbox.address, to, 'raw reply lost');
    const messageId = /^Message-ID: (.*)$/m.exec(raw)![1]!.trim();
    await expectError(await postRaw(s, token, inbox.id, { from: inbox.address, to: [to], raw }), 422, UNKNOWN);
    await lost;
    expect(Object.fromEntries(await sinkCounts(to, 1))).to.deep.equal({ 'raw reply lost': 1 });
    // In the log: mail.outbox.unknown, with what happened to the connection.
    const [unknown] = await until('mail.outbox.unknown', async () => {
      const found = (await eventsOf(s, p.projectId, inbox.id, ['mail.outbox.unknown'])).filter(
        (e) => (e.data as { messageId: string }).messageId === messageId,
      );
      return found.length > 0 ? found : null;
    });
    expect(unknown!.data).to.have.property('reason').that.is.a('string');
  });

  it('answers 422 to a used draftId with other content, and sends nothing', async () => {
    const to = rcpt();
    const first = await sealedSend(compose, inbox, to, 'first content');
    expect((await post(s.base, token, inbox.id, first)).status).to.equal(200);
    const other = { ...first, ...(await sealDraft(compose.epochPublic, message(inbox.address, to, 'other content'), first.draftId)) };
    const before = datas;
    await expectError(await post(s.base, token, inbox.id, other), 422, /already sent with other content/);
    expect(datas - before).to.equal(0);
  });
});

describe('sending exactly once: postern serve killed with sends under way', function () {
  this.timeout(180_000);
  let admin: TestServer | null = null;
  let child: Listening | null = null;

  afterEach(async () => {
    if (child) await stopProcess(child.child);
    child = null;
    await admin?.close();
    admin = null;
  });

  it('settles every send at restart: none left in flight, each draft answered definitely, one Sent copy each, promptly, nothing twice', () =>
    killUnderLoad('server'));

  it("with POSTERN_WORKERS=2, settles a killed worker's sends and leaves its live sibling's alone", () => killUnderLoad('worker'));

  /**
   * 16 senders post sealed drafts; `postern serve` (or one of its two workers) is killed with
   * `kill -9` under them. The server is restarted (or the primary replaces the worker), and every
   * draft whose request died is sent again.
   */
  async function killUnderLoad(what: 'server' | 'worker'): Promise<void> {
    const server = (admin = await startPostern());
    // Only the served process files copies: what it left at the kill is the restarted one's.
    await server.postern.sentCopies.stop();
    const p = await newProject(admin);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'send']);
    const compose = await json<{ epoch: number; epochPublic: string }>(await call(`${server.base}/inboxes/${inbox.id}/compose`, { token }));
    const env = envVars(mailEnv(), { ...server.storeEnv, POSTERN_PORT: String(await freePort()), POSTERN_SEND_RATE_PER_HOUR: '100000' });
    // Copies are filed while sends go on, so some are claimed when the process dies.
    child = await spawnPostern({ ...env, POSTERN_SENT_COPY_YIELD_MS: '0', ...(what === 'worker' ? { POSTERN_WORKERS: '2' } : {}) });
    const base = `${child.url}/v1`;
    const workers = what === 'worker' ? childPids(child.child.pid!) : [];
    if (what === 'worker') expect(workers).to.have.length(2);

    const to = rcpt();
    // Sealed beforehand: the senders only post, so 16 requests are under way at any moment.
    const PER_SENDER = 12;
    const bodies = await Promise.all(
      Array.from({ length: 16 * PER_SENDER }, async (_, k) => {
        const subject = `kill ${Math.floor(k / PER_SENDER)}-${k % PER_SENDER}`;
        return { body: await sealedSend(compose, inbox, to, subject), subject };
      }),
    );
    const sends: Array<{ body: SendBody; subject: string; status: number | 'lost' | 'hung' }> = [];
    let killed = false;
    let accepted = 0;
    const sender = async (n: number) => {
      for (let i = 0; !killed && i < PER_SENDER; i++) {
        const entry = { ...bodies[n * PER_SENDER + i]!, status: 'lost' as number | 'lost' | 'hung' };
        sends.push(entry);
        try {
          const res = await post(base, token, inbox.id, entry.body);
          await res.arrayBuffer();
          entry.status = res.status;
          if (res.status === 200) accepted++;
        } catch (err) {
          // The process died under this request: its connection was cut, or it hung.
          if (hung(err)) entry.status = 'hung';
          return;
        }
      }
    };
    const senders = Array.from({ length: 16 }, (_, n) => sender(n));
    await until('sends under way', async () => accepted >= 48, 60_000);
    if (what === 'server') child.child.kill('SIGKILL');
    else process.kill(workers[0]!, 'SIGKILL');
    killed = true;
    await Promise.all(senders);
    const killedAt = Date.now();
    const backlog = await server.postern.store.outbox.backlog(inbox.id, 1000);
    const left = {
      relaying: backlog.filter((e) => e.state === 'relaying').length,
      sending: backlog.filter((e) => e.state === 'sending').length,
      claimed: backlog.filter((e) => e.state === 'filing' && e.nextAttemptAt > killedAt + 60_000).length,
    };
    // A connection cut by the kill is seen at once; none is left open with nobody to answer it.
    expect(
      sends.filter((x) => x.status === 'hung').map((x) => x.subject),
      'requests left hanging by the kill',
    ).to.deep.equal([]);
    const lost = sends.filter((x) => x.status === 'lost');
    // Every request the process (or worker) answered before it died was sent.
    expect(
      sends.filter((x) => x.status !== 200 && x.status !== 'lost').map((x) => x.status),
      'answers before the kill',
    ).to.deep.equal([]);
    // A worker may die between its requests (its sibling took the rest); a whole server cannot.
    if (what === 'server') expect(lost.length, `sends in flight at the kill (rows left: ${JSON.stringify(left)})`).to.be.greaterThan(0);

    // The other worker goes on meanwhile; the primary starts a new one, which settles what the dead one left.
    if (what === 'server') child = await spawnPostern(env);
    const restartedAt = Date.now();
    const restarted = `${child.url}/v1`;
    // Every draft whose request died gets a definite answer at once: sent now, or outcome unknown.
    const retried = await Promise.all(
      lost.map(async (x) => {
        const res = await postAgain(restarted, token, inbox.id, x.body);
        return { x, status: res.status, text: await res.text() };
      }),
    );
    for (const { x, status, text } of retried) {
      expect([200, 422], `${x.subject}: ${text}`).to.include(status);
      if (status === 422) expect(text).to.match(UNKNOWN);
      x.status = status;
    }
    expect(Date.now() - restartedAt, 'the retries answered without waiting').to.be.below(30_000);
    // Asked again, each answers the same.
    for (const { x } of retried) expect((await postAgain(restarted, token, inbox.id, x.body)).status, x.subject).to.equal(x.status);

    // Nothing left in flight; every copy filed well before a dead process's claims (2 minutes) run
    // out. Those whose outcome is unknown stay (their copies unfiled) until evidence settles them.
    await until(
      'every Sent copy filed',
      async () => (await server.postern.store.outbox.backlog(inbox.id, 1000)).every((e) => e.state === 'unknown'),
      60_000,
    );
    expect(Date.now() - killedAt).to.be.below(90_000);

    // The sink: a marker sent last arrives; every acknowledged message is there once, none twice.
    const marker = await sealedSend(compose, inbox, to, 'marker');
    expect((await postAgain(restarted, token, inbox.id, marker)).status).to.equal(200);
    const acknowledged = sends.filter((x) => x.status === 200);
    const unknown = sends.filter((x) => x.status === 422);
    await atSink((m) => m.rcptTo.includes(to), acknowledged.length + 1);
    await until('the marker at the sink', async () => ((await sinkCounts(to, 1)).get('marker') ? true : null), 30_000);
    const atSinkNow = await sinkCounts(to, 1);
    for (const x of acknowledged) expect(atSinkNow.get(x.subject), x.subject).to.equal(1);
    for (const x of unknown) expect(atSinkNow.get(x.subject) ?? 0, x.subject).to.be.at.most(1);
    for (const [subject, n] of atSinkNow) expect(n, subject).to.equal(1);

    // Sent: one copy of each message known sent, none of one whose outcome is unknown (nor of one never sent).
    const sent = await sentCopies(inbox);
    sent.delete('marker');
    for (const x of acknowledged) expect(sent.get(x.subject), x.subject).to.equal(1);
    for (const x of unknown) expect(sent.has(x.subject), `${x.subject}: outcome unknown, yet filed`).to.equal(false);
    for (const [subject, n] of sent) expect(n, subject).to.equal(1);
    expect(sent.size).to.equal(acknowledged.length);
    // Each unknown one is listed so, with its end of data written: how many of them Postfix had
    // (the rest were cut off between the record and the final dot reaching it) is reported.
    for (const x of unknown)
      expect((await server.postern.store.outbox.byDraft(inbox.id, x.body.draftId))?.state, x.subject).to.equal('unknown');
    const reached = unknown.filter((x) => atSinkNow.has(x.subject)).length;
    console.log(`      ${lost.length} sends in flight at the kill: ${unknown.length} outcome unknown (${reached} of them at the sink)`);
  }
});
