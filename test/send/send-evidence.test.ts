// An unknown outcome settled by evidence (docs/sending.md, "Exactly once"): `postern serve` is
// killed with `kill -9` at chosen points of its SMTP conversation with the real Postfix, held
// there by a TCP tap in between (no setting in Postern for it). Killed before the end of the
// message's data was written, Postfix cannot have taken the message: the restarted process drops
// the send, and the client's retry sends it, once, with one Sent copy. Killed after the end of
// data, before Postfix's reply was recorded: the send is `unknown` (the outbox lists it so, the
// log says so), its retries answer that the outcome is unknown, no Sent copy is filed; then
// Postfix's delivery report naming its ENVID settles it: sent, its Sent copy filed once.
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
  type TestServer,
} from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { freePort, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { atSink, draft, eventsOf, labelIds, listLabel, rcpt, sealDraft, sentCopies } from '../helpers/send-fixtures.ts';
import { TcpTap, type TapConnection } from '../helpers/tcp-tap.ts';

/** The answer to a send whose outcome is unknown, on every retry until evidence settles it. */
const UNKNOWN = /outcome unknown: the whole message was written to the mail server but its reply was lost.*will not be sent again/;

function message(from: string, to: readonly string[], subject: string): string {
  return [
    `From: <${from}>`,
    `To: ${to.map((a) => `<${a}>`).join(', ')}`,
    `Subject: ${subject}`,
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <${randomBytes(8).toString('hex')}@postern.test>`,
    '',
    'Sent once, and known to be.',
    '',
  ].join('\r\n');
}

type SendBody = { draftId: string; epoch: number; wrappedDek: string; ciphertext: string; from: string; to: string[] };

async function sealedSend(
  compose: { epoch: number; epochPublic: string },
  inbox: TestInbox,
  to: string[],
  subject: string,
): Promise<SendBody> {
  const draftId = draft();
  return {
    draftId,
    epoch: compose.epoch,
    ...(await sealDraft(compose.epochPublic, message(inbox.address, to, subject), draftId)),
    from: inbox.address,
    to,
  };
}

const post = (base: string, token: string, inboxId: string, body: SendBody) =>
  call(`${base}/inboxes/${inboxId}/send`, {
    method: 'POST',
    token,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });

/** The sink's messages with this subject. */
async function atSinkWith(to: string, subject: string, atLeast: number) {
  return (await atSink(to, atLeast)).filter((m) => m.raw.toString('latin1').includes(`Subject: ${subject}\r\n`));
}

interface OutboxView {
  id: string;
  messageId: string;
  state: string;
}

/**
 * Where the tap holds the conversation: Postfix's 354 (its go-ahead for the message's data, so
 * nothing of the data is written), or its reply to the end of the data (Postfix has queued it).
 */
type Hold = 'go-ahead' | 'final reply';

describe('sending: an unknown outcome settled by evidence (postern serve killed mid-conversation)', function () {
  this.timeout(180_000);
  let admin: TestServer | null = null;
  let child: Listening | null = null;
  let tap: TcpTap | null = null;
  /** Armed: where to hold the next conversation, and what to call once it is held. */
  let hold: { where: Hold; held: () => void; conn: TapConnection | null } | null = null;
  const tails = new WeakMap<TapConnection, string>();

  afterEach(async () => {
    if (child) await stopProcess(child.child);
    child = null;
    await admin?.close();
    admin = null;
    await tap?.close();
    tap = null;
    hold = null;
  });

  /** A store served by a `postern serve` child whose relay goes through the tap; this process only reads the store. */
  async function serve() {
    admin = await startPostern();
    // Only the served process files copies and runs the outbox.
    await admin.postern.sentCopies.stop();
    const p = await newProject(admin);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'send']);
    tap = new TcpTap(mailEnv().submission, {
      onClient(chunk, conn) {
        const text = (tails.get(conn) ?? '') + chunk.toString('latin1');
        tails.set(conn, text.slice(-8));
        if (hold?.where === 'final reply' && !hold.conn && text.endsWith('\r\n.\r\n')) hold.conn = conn;
        return 'forward';
      },
      onServer(chunk, conn) {
        const text = chunk.toString('latin1');
        if (hold?.where === 'go-ahead' && /(^|\n)354[ -]/.test(text)) {
          // Postfix waits for the data; Postern waits for its go-ahead, and has written none of it.
          hold.held();
          hold = null;
          return 'handled';
        }
        if (hold?.where === 'final reply' && hold.conn === conn && text.startsWith('250')) {
          // Postfix has queued it ("250 … queued as"); Postern never hears so.
          hold.held();
          hold = null;
          return 'handled';
        }
        return 'forward';
      },
    });
    const port = await tap.start();
    const env = envVars(mailEnv(), {
      ...admin.storeEnv,
      POSTERN_PORT: String(await freePort()),
      POSTERN_SMTP_HOST: '127.0.0.1',
      POSTERN_SMTP_PORT: String(port),
      POSTERN_SENT_COPY_YIELD_MS: '0',
    });
    child = await spawnPostern(env);
    const compose = await json<{ epoch: number; epochPublic: string }>(
      await call(`${child.url}/v1/inboxes/${inbox.id}/compose`, { token }),
    );
    return { admin, p, inbox, token, env, compose };
  }

  /** Posts `body`, held by the tap at `where`; kills the server there with kill -9 and starts it again. */
  async function killHeldAt(where: Hold, env: Record<string, string>, token: string, inboxId: string, body: SendBody) {
    const held = new Promise<void>((resolve) => (hold = { where, held: resolve, conn: null }));
    const first = post(`${child!.url}/v1`, token, inboxId, body).then(
      (res) => res.status,
      () => 'lost' as const,
    );
    await held;
    const entry = await admin!.postern.store.outbox.byDraft(inboxId, body.draftId);
    child!.child.kill('SIGKILL');
    await new Promise((r) => child!.child.once('exit', r));
    expect(await first, 'the first request, cut off by the kill').to.equal('lost');
    child = await spawnPostern(env);
    return entry!;
  }

  it('killed before the end of DATA: the relay cannot have the message, so the retry sends it, once, with one Sent copy', async () => {
    const { inbox, token, env, compose } = await serve();
    const to = rcpt();
    const body = await sealedSend(compose, inbox, [to], 'killed before the end of data');
    const before = await killHeldAt('go-ahead', env, token, inbox.id, body);
    // How far it got: reserved, the end of its data never written.
    expect(before.state).to.equal('relaying');

    const base = `${child!.url}/v1`;
    const retried = await post(base, token, inbox.id, body);
    expect(retried.status, await retried.clone().text()).to.equal(200);
    const answer = await json<{ sent: boolean; messageId: string }>(retried);
    expect(answer.sent).to.equal(true);
    // Asked again: the same answer, nothing sent again.
    expect(await json(await post(base, token, inbox.id, body))).to.deep.equal(answer);

    // The positive signal: a marker sent after it arrives; the message is there once.
    const marker = await sealedSend(compose, inbox, [to], 'marker');
    expect((await post(base, token, inbox.id, marker)).status).to.equal(200);
    const got = await atSink(to, 2);
    expect(got.map((m) => /^Subject: (.*)$/m.exec(m.raw.toString('latin1'))?.[1]?.trim()).sort()).to.deep.equal([
      'killed before the end of data',
      'marker',
    ]);
    const entry = await admin!.postern.store.outbox.byDraft(inbox.id, body.draftId);
    expect(got.find((m) => m.raw.includes('killed before'))!.envid).to.equal(entry!.id);

    // One Sent copy, filed once the relay's acceptance was known.
    await until('the Sent copies filed', async () => {
      const sent = await sentCopies(inbox);
      return sent.get('marker') === 1 && sent.get('killed before the end of data') === 1;
    });
    expect(Object.fromEntries(await sentCopies(inbox))).to.deep.equal({ 'killed before the end of data': 1, marker: 1 });
    expect(await admin!.postern.store.outbox.byDraft(inbox.id, body.draftId)).to.deep.include({ state: 'filed', outcomeUnknown: false });
  });

  it("killed after the end of DATA, before the reply was recorded: unknown (listed, logged), no Sent copy, retries refused; Postfix's report settles it", async () => {
    const { admin, p, inbox, token, env, compose } = await serve();
    // The sink refuses reject-… after Postfix took the message: Postfix reports that to the
    // inbox, naming the send's ENVID, which is the evidence.
    const [bad, good] = [rcpt('reject-me'), rcpt('fine')];
    const subject = 'killed after the end of data';
    const body = await sealedSend(compose, inbox, [bad, good], subject);
    // The inbox's index filled first: the report is then a new message, noticed when INBOX is read.
    const ids = await labelIds({ base: `${child!.url}/v1` }, token, inbox.id);
    await listLabel({ base: `${child!.url}/v1` }, token, inbox.id, ids.INBOX!);

    const before = await killHeldAt('final reply', env, token, inbox.id, body);
    // How far it got: the end of its data recorded as written, the reply not.
    expect(before.state).to.equal('sending');
    const base = `${child!.url}/v1`;
    // Postfix had it: it arrives, once, under the send's ENVID.
    const [delivered] = await atSinkWith(good, subject, 1);
    expect(delivered!.envid).to.equal(before.id);

    // The restarted process settled it as unknown before serving: listed so, in the log, kept unfiled.
    const pending = await json<{ sends: OutboxView[] }>(await call(`${base}/inboxes/${inbox.id}/outbox`, { token }));
    expect(pending.sends.map((x) => [x.id, x.state])).to.deep.equal([[before.id, 'unknown']]);
    expect(await json<OutboxView>(await call(`${base}/inboxes/${inbox.id}/outbox/${before.id}`, { token }))).to.deep.include({
      state: 'unknown',
    });
    const [logged] = await eventsOf(admin, p.projectId, inbox.id, ['mail.outbox.unknown']);
    expect(logged!.data).to.deep.include({ outboxId: before.id, messageId: before.messageId });
    expect((logged!.data as { reason: string }).reason).to.match(/after the end of the message's data was written/);
    // Retries: refused, saying the outcome is unknown; nothing reaches Postfix.
    await expectError(await post(base, token, inbox.id, body), 422, UNKNOWN);
    await expectError(await post(base, token, inbox.id, body), 422, UNKNOWN);
    // No Sent copy: the row is `unknown` (never due for filing), its copy kept for when it is settled.
    const row = await admin.postern.store.outbox.get(before.id);
    expect(row).to.deep.include({ state: 'unknown', outcomeUnknown: true });
    expect(await admin.postern.store.outbox.copy(before.id)).to.not.equal(null);
    expect((await sentCopies(inbox)).size).to.equal(0);

    // The evidence: Postfix's report for reject-… comes back to INBOX naming the ENVID.
    const [settled] = await until(
      'mail.outbox.settled',
      async () => {
        await listLabel({ base }, token, inbox.id, ids.INBOX!);
        const found = await eventsOf(admin, p.projectId, inbox.id, ['mail.outbox.settled']);
        return found.length > 0 ? found : null;
      },
      90_000,
    );
    expect(settled!.data).to.deep.include({ outboxId: before.id, messageId: before.messageId, evidence: 'dsn' });
    expect((settled!.data as { actions: string[] }).actions).to.include('failed');
    // Settled: sent, its Sent copy filed once, its retries answered as sent.
    expect(await json<OutboxView>(await call(`${base}/inboxes/${inbox.id}/outbox/${before.id}`, { token }))).to.deep.include({
      state: 'sent',
    });
    await until('its Sent copy filed', async () => (await sentCopies(inbox)).get(subject) === 1, 30_000);
    const retried = await post(base, token, inbox.id, body);
    expect(retried.status, await retried.clone().text()).to.equal(200);
    expect(await json(retried)).to.deep.equal({ sent: true, messageId: before.messageId });
    expect(await admin.postern.store.outbox.get(before.id)).to.deep.include({ state: 'filed', settledBy: 'dsn' });
    expect(Object.fromEntries(await sentCopies(inbox))).to.deep.equal({ [subject]: 1 });
    // And still once at the sink.
    expect(await atSinkWith(good, subject, 1)).to.have.length(1);
    // The report's failure is recorded as any bounce is.
    const [failed] = await eventsOf(admin, p.projectId, inbox.id, ['mail.delivery.failed']);
    expect(failed!.data).to.deep.include({ recipients: [bad] });
  });
});
