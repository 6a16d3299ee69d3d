// POST /inboxes/{inbox}/send: a message the client sealed to the inbox's epoch key (from
// /compose), bound to a draft id, opened by Postern and relayed through the real Postfix. A
// draft sends at most once, however often and however concurrently it is retried.
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
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
import { until } from '../helpers/mail-fixtures.ts';
import { atSink, draft, eventsOf, labelIds, listLabel, rcpt, sealDraft, withoutTrace } from '../helpers/send-fixtures.ts';

function message(from: string, to: string, subject: string): string {
  return [
    `From: <${from}>`,
    `To: <${to}>`,
    `Subject: ${subject}`,
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <${randomBytes(8).toString('hex')}@postern.test>`,
    '',
    'Sealed in the browser.',
    '',
  ].join('\r\n');
}

describe('sending: POST /inboxes/{inbox}/send (sealed, bound to a draft)', function () {
  this.timeout(60_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;
  let compose: { epoch: number; epochPublic: string };

  const post = (body: Record<string, unknown>, auth: { token?: string; session?: string } = { token }, base = s.base) =>
    call(`${base}/inboxes/${inbox.id}/send`, {
      method: 'POST',
      ...auth,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'send']);
    compose = await json<{ epoch: number; epochPublic: string }>(await call(`${s.base}/inboxes/${inbox.id}/compose`, { token }));
  });
  after(async () => {
    await s?.close();
  });

  it('opens, relays and files the message; a web session may send too', async () => {
    const to = rcpt();
    const raw = message(inbox.address, to, 'sealed');
    const draftId = draft();
    const res = await post({
      draftId,
      epoch: compose.epoch,
      ...(await sealDraft(compose.epochPublic, raw, draftId)),
      from: inbox.address,
      to: [to],
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    expect(await res.json()).to.deep.include({ sent: true });
    const [got] = await atSink(to);
    expect(withoutTrace(got!.raw).toString()).to.equal(raw);
    expect(got!.mailFrom).to.equal(inbox.address);
    const ids = await labelIds(s, token, inbox.id);
    await until('the copy in Sent', async () => (await listLabel(s, token, inbox.id, ids.Sent!)).some((m) => m.subject === 'sealed'));
    const [accepted] = await eventsOf(s, p.projectId, inbox.id, ['mail.delivery.accepted']);
    expect(accepted!.data).to.include({ draftId, recipients: 1 });

    const session = await p.session();
    const to2 = rcpt();
    const draft2 = draft();
    const res2 = await post(
      {
        draftId: draft2,
        epoch: compose.epoch,
        ...(await sealDraft(compose.epochPublic, message(inbox.address, to2, 'from the web app'), draft2)),
        from: inbox.address,
        to: [to2],
      },
      { session },
      s.app,
    );
    expect(res2.status, await res2.clone().text()).to.equal(200);
    await atSink(to2);
  });

  it('sends a draft once under 20 concurrent retries; the same draft with other content is a 422', async () => {
    const to = rcpt();
    const draftId = draft();
    const body = {
      draftId,
      epoch: compose.epoch,
      ...(await sealDraft(compose.epochPublic, message(inbox.address, to, 'only once'), draftId)),
      from: inbox.address,
      to: [to],
    };
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(body)));
    for (const a of answers) {
      expect(a.status, await a.clone().text()).to.equal(200);
      expect(await a.json()).to.deep.include({ sent: true });
    }
    // And once more, long after.
    expect((await post(body)).status).to.equal(200);
    const other = {
      draftId,
      epoch: compose.epoch,
      ...(await sealDraft(compose.epochPublic, message(inbox.address, to, 'other content'), draftId)),
      from: inbox.address,
      to: [to],
    };
    await expectError(await post(other), 422, /already sent with other content/);
    // A positive signal that everything relayed so far has reached the sink: a later message.
    const marker = draft();
    expect(
      (
        await post({
          draftId: marker,
          epoch: compose.epoch,
          ...(await sealDraft(compose.epochPublic, message(inbox.address, to, 'marker'), marker)),
          from: inbox.address,
          to: [to],
        })
      ).status,
    ).to.equal(200);
    const got = await atSink(to, 2);
    expect(got.map((m) => /Subject: (.*)\r\n/.exec(m.raw.toString())![1]).sort()).to.deep.equal(['marker', 'only once']);
    expect(got).to.have.length(2);
    expect(
      (await eventsOf(s, p.projectId, inbox.id, ['mail.delivery.accepted'])).filter(
        (e) => (e.data as { draftId?: string }).draftId === draftId,
      ),
    ).to.have.length(1);
  });

  it('400 when the ciphertext is bound to another draft, does not open, names an unknown epoch, or from does not match From', async () => {
    const to = rcpt();
    const raw = message(inbox.address, to, 'bad');
    const draftId = draft();
    const boundElsewhere = await sealDraft(compose.epochPublic, raw, draft());
    await expectError(await post({ draftId, epoch: compose.epoch, ...boundElsewhere, from: inbox.address, to: [to] }), 400, /not bound to/);
    const good = await sealDraft(compose.epochPublic, raw, draftId);
    await expectError(await post({ draftId, epoch: compose.epoch + 5, ...good, from: inbox.address, to: [to] }), 400, /epoch/);
    await expectError(
      await post({
        draftId,
        epoch: compose.epoch,
        wrappedDek: good.wrappedDek,
        ciphertext: Buffer.from('not a packet').toString('base64'),
        from: inbox.address,
        to: [to],
      }),
      400,
      /does not open/,
    );
    const otherFrom = await sealDraft(compose.epochPublic, message('someone@example.org', to, 'x'), draftId);
    await expectError(await post({ draftId, epoch: compose.epoch, ...otherFrom, from: inbox.address, to: [to] }), 400, /From header/);
    await expectError(await post({ draftId: 'draft_short', epoch: compose.epoch, ...good, from: inbox.address, to: [to] }), 400, /draftId/);
    await expectError(await post({ draftId, epoch: 0, ...good, from: inbox.address, to: [to] }), 400, /epoch/);
    await expectError(await post({ draftId, epoch: compose.epoch, ...good, from: 'other@example.org', to: [to] }), 403, /cannot send as/);
    // None of these was sent: the draft is still free.
    const ok = await post({ draftId, epoch: compose.epoch, ...good, from: inbox.address, to: [to] });
    expect(ok.status, await ok.clone().text()).to.equal(200);
    expect(await atSink(to)).to.have.length(1);
  });
});
