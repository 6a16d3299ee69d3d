// Send later and undo (docs/sending.md, "Send later", "The outbox") against the real Postfix and
// Dovecot: a scheduled send reaches the sink at its time and not before, one cancelled inside its
// hold comes back as a draft and never goes, a reschedule moves it, a sealed send waits sealed,
// a draft's send leaves Drafts and comes back on cancel, the outbox lists each state with its
// events, and bad input is a 4xx.
import { randomBytes } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Draft } from '../../schemas/wire.ts';
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
import { atSink, draft as newDraftId, eventsOf, postRaw, rcpt, sealDraft } from '../helpers/send-fixtures.ts';

interface Scheduled {
  sent: false;
  outboxId: string;
  messageId: string;
  state: 'held' | 'scheduled';
  sendAt: string;
  holdUntil: string | null;
}
interface OutboxView {
  id: string;
  state: string;
  sendAt: string | null;
  draftId: string | null;
  reason: string | null;
}

const SEND = 'https://postern.dev/schemas/send.json#/$defs/';

function message(from: string, to: string, subject: string, body = 'Sent later.'): string {
  return [`From: <${from}>`, `To: <${to}>`, `Subject: ${subject}`, '', body, ''].join('\r\n');
}

describe('send later and undo: scheduled sends in the outbox', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;
  let inbox: TestInbox;
  let token: string;

  before(async () => {
    s = await startPostern({ POSTERN_SEND_HORIZON: '2d' });
    p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read', 'drafts:write', 'send', 'events:read', 'project:read']);
  });
  after(async () => {
    await s?.close();
  });

  const at = (ms: number) => new Date(Date.now() + ms).toISOString();
  const outbox = (box: TestInbox, rest = '') => `${s.base}/inboxes/${box.id}/outbox${rest}`;
  const view = async (box: TestInbox, id: string) => json<OutboxView>(await call(outbox(box, `/${id}`), { token }));
  const later = (box: TestInbox, query: string, to: string, subject: string) =>
    call(`${s.base}/inboxes/${box.id}/messages?${query}`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: box.address, to: [to], raw: Buffer.from(message(box.address, to, subject)).toString('base64') }),
    });
  const compose = (box: TestInbox, body: Record<string, unknown>) =>
    call(`${s.base}/inboxes/${box.id}/messages/compose`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ from: box.address, text: 'Composed, sent later.', ...body }),
    });
  const cancel = (box: TestInbox, id: string) => call(outbox(box, `/${id}/cancel`), { method: 'POST', token });

  it('sends a scheduled message at its time, not before, and lists it and its events', async () => {
    const to = rcpt();
    const sendAt = at(3000);
    const res = await later(inbox, `sendAt=${encodeURIComponent(sendAt)}`, to, 'at its time');
    expect(res.status, await res.clone().text()).to.equal(202);
    const answer = await json<Scheduled>(res);
    s.postern.validator.body(`${SEND}ScheduledResult`, structuredClone(answer));
    expect(answer).to.include({ sent: false, state: 'scheduled', sendAt: new Date(sendAt).toISOString(), holdUntil: null });

    const pending = await json<{ sends: OutboxView[] }>(await call(outbox(inbox), { token }));
    s.postern.validator.body(`${SEND}OutboxList`, structuredClone(pending));
    expect(pending.sends.find((e) => e.id === answer.outboxId)?.state).to.equal('scheduled');

    // The positive signal first: it arrived; then when.
    const [arrived] = await atSink(to);
    expect(Date.parse(arrived!.receivedAt)).to.be.at.least(Date.parse(sendAt));
    expect(Date.parse(arrived!.receivedAt) - Date.parse(sendAt), 'lateness at the sink').to.be.below(5000);
    expect(arrived!.raw.toString()).to.include('Subject: at its time');
    await until('the send shown sent', async () => (await view(inbox, answer.outboxId)).state === 'sent');
    const types = (await eventsOf(s, p.projectId, inbox.id, ['mail.outbox.scheduled', 'mail.outbox.sending', 'mail.delivery.accepted']))
      .filter((e) => (e.data as { messageId?: string }).messageId === answer.messageId)
      .map((e) => e.type);
    expect(types).to.deep.equal(['mail.outbox.scheduled', 'mail.outbox.sending', 'mail.delivery.accepted']);
  });

  it('takes back a send inside its hold: a draft comes back and nothing reaches the sink', async () => {
    const to = rcpt('undone');
    const res = await compose(inbox, { to: [to], subject: 'undo me', holdSeconds: 30 });
    expect(res.status, await res.clone().text()).to.equal(202);
    const held = await json<Scheduled & { date: string }>(res);
    expect(held.state).to.equal('held');
    expect(held.date).to.be.a('string');

    const undone = await cancel(inbox, held.outboxId);
    expect(undone.status, await undone.clone().text()).to.equal(200);
    const { draftId } = await json<{ cancelled: true; draftId: string }>(undone);
    const drafts = (await json<{ drafts: Draft[] }>(await call(`${s.base}/inboxes/${inbox.id}/drafts`, { token }))).drafts;
    expect(drafts.find((d) => d.id === draftId)).to.include({ subject: 'undo me', from: inbox.address });
    expect((await view(inbox, held.outboxId)).state).to.equal('cancelled');
    // Cancelled once: asked again, a conflict; and it cannot be rescheduled.
    expect((await cancel(inbox, held.outboxId)).status).to.equal(409);
    const moved = await call(outbox(inbox, `/${held.outboxId}`), {
      method: 'PATCH',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sendAt: at(1000) }),
    });
    expect(moved.status).to.equal(409);

    // The system had its chance: a later send with a 1 s hold, sent after it, arrives first.
    const marker = rcpt('marker');
    const second = await compose(inbox, { to: [marker], subject: 'after the undo', holdSeconds: 1 });
    expect(second.status).to.equal(202);
    await atSink(marker);
    const sink = await atSink((m) => m.rcptTo.includes(to) || m.rcptTo.includes(marker), 1);
    expect(sink.map((m) => m.rcptTo)).to.deep.equal([[marker]]);
    const cancelled = await eventsOf(s, p.projectId, inbox.id, ['mail.outbox.cancelled']);
    expect(cancelled.map((e) => e.data)).to.deep.include({ outboxId: held.outboxId, messageId: held.messageId, draftId });

    // The draft sends as any other.
    const sent = await call(`${s.base}/inboxes/${inbox.id}/drafts/${draftId}/send`, { method: 'POST', token });
    expect(sent.status, await sent.clone().text()).to.equal(200);
    await atSink(to);
  });

  it('reschedules a waiting send, and sends a draft later (out of Drafts, back on cancel)', async () => {
    const to = rcpt('moved');
    const res = await later(inbox, `sendAt=${encodeURIComponent(at(3_600_000))}`, to, 'moved earlier');
    const first = await json<Scheduled>(res);
    const sendAt = at(2000);
    const moved = await call(outbox(inbox, `/${first.outboxId}`), {
      method: 'PATCH',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ sendAt }),
    });
    expect(moved.status, await moved.clone().text()).to.equal(200);
    expect((await json<OutboxView>(moved)).sendAt).to.equal(new Date(sendAt).toISOString());
    const [arrived] = await atSink(to);
    expect(Date.parse(arrived!.receivedAt)).to.be.at.least(Date.parse(sendAt));

    // A draft sent with a hold leaves Drafts at once, and cancelled comes back under its id.
    const dto = rcpt('draft');
    const created = await json<Draft>(
      await call(`${s.base}/inboxes/${inbox.id}/drafts`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ raw: Buffer.from(message(inbox.address, dto, 'draft later')).toString('base64') }),
      }),
    );
    const sent = await call(`${s.base}/inboxes/${inbox.id}/drafts/${created.id}/send?holdSeconds=30`, { method: 'POST', token });
    expect(sent.status, await sent.clone().text()).to.equal(202);
    const held = await json<Scheduled>(sent);
    const listed = async () => (await json<{ drafts: Draft[] }>(await call(`${s.base}/inboxes/${inbox.id}/drafts`, { token }))).drafts;
    expect((await listed()).map((d) => d.id)).to.not.include(created.id);
    expect((await view(inbox, held.outboxId)).draftId).to.equal(created.id);
    const undone = await json<{ draftId: string }>(await cancel(inbox, held.outboxId));
    expect(undone.draftId).to.equal(created.id);
    expect((await listed()).find((d) => d.id === created.id)).to.include({ subject: 'draft later' });
  });

  it('keeps a sealed send sealed until its time, and gives it back as the sealed draft', async () => {
    const box = await p.inbox({ mode: 'zero-access' });
    const session = await p.session();
    const keys = await json<{ epoch: number; epochPublic: string }>(await call(`${s.app}/inboxes/${box.id}/compose`, { session }));
    const sealedSend = async (to: string, secret: string, query: string) => {
      const id = newDraftId();
      const body = {
        draftId: id,
        epoch: keys.epoch,
        ...(await sealDraft(keys.epochPublic, message(box.address, to, 'sealed later', secret), id)),
        from: box.address,
        to: [to],
      };
      const res = await call(`${s.app}/inboxes/${box.id}/send?${query}`, {
        method: 'POST',
        session,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { id, res };
    };
    const to = rcpt('sealed');
    const secret = `secret-${randomBytes(6).toString('hex')}`;
    const sendAt = at(2500);
    const { res } = await sealedSend(to, secret, `sendAt=${encodeURIComponent(sendAt)}`);
    expect(res.status, await res.clone().text()).to.equal(202);
    const answer = await json<Scheduled>(res);
    // Waiting, nothing of it rests in plaintext: the Sent copy is sealed, the body as it came.
    const copy = await s.postern.store.outbox.copy(answer.outboxId);
    expect(copy?.toString('latin1')).to.not.include(secret);
    const parts = await s.postern.store.outbox.scheduledParts(answer.outboxId);
    expect(parts?.sealed?.ciphertext.toString('latin1')).to.not.include(secret);
    const [arrived] = await atSink(to);
    expect(arrived!.raw.toString()).to.include(secret);
    expect(Date.parse(arrived!.receivedAt)).to.be.at.least(Date.parse(sendAt));

    // Cancelled inside its hold: back as the sealed draft, under its own id.
    const { id, res: heldRes } = await sealedSend(rcpt('sealed-undo'), secret, 'holdSeconds=30');
    const held = await json<Scheduled>(heldRes);
    const undone = await call(`${s.app}/inboxes/${box.id}/outbox/${held.outboxId}/cancel`, { method: 'POST', session });
    expect(undone.status, await undone.clone().text()).to.equal(200);
    expect((await json<{ draftId: string }>(undone)).draftId).to.equal(id);
    const back = await json<Draft>(await call(`${s.app}/inboxes/${box.id}/drafts/${id}`, { session }));
    expect(back).to.include({ id, sealed: true });

    // A zero-access inbox's plaintext send cannot wait (it would rest in plaintext).
    const plain = await postRaw(s, token, box.id, { from: box.address, to: [rcpt()], raw: message(box.address, rcpt(), 'x') });
    expect(plain.status).to.not.equal(202);
    const scheduledPlain = await later(box, 'holdSeconds=5', rcpt(), 'plain later');
    await expectError(scheduledPlain, 422, /wait sealed/);
  });

  it('sends later from MCP: send_message and send_draft take send_at', async () => {
    const client = new Client({ name: 'send-later-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${s.base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
    );
    try {
      const to = rcpt('mcp');
      const sendAt = at(2000);
      const r = (await client.callTool({
        name: 'send_message',
        arguments: { inboxId: inbox.id, from: inbox.address, to: [to], subject: 'from an agent, later', text: 'Later.', send_at: sendAt },
      })) as CallToolResult;
      expect(r.isError, JSON.stringify(r.content)).to.not.equal(true);
      const structured = r.structuredContent as unknown as Scheduled;
      expect(structured).to.include({ sent: false, state: 'scheduled' });
      expect((r.content[0] as { text: string }).text).to.match(/^Scheduled for /);
      const [arrived] = await atSink(to);
      expect(Date.parse(arrived!.receivedAt)).to.be.at.least(Date.parse(sendAt));

      const dto = rcpt('mcp-draft');
      const created = await json<Draft>(
        await call(`${s.base}/inboxes/${inbox.id}/drafts`, {
          method: 'POST',
          token,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ raw: Buffer.from(message(inbox.address, dto, 'agent draft later')).toString('base64') }),
        }),
      );
      const d = (await client.callTool({
        name: 'send_draft',
        arguments: { inboxId: inbox.id, draftId: created.id, send_at: at(3_600_000) },
      })) as CallToolResult;
      const waiting = d.structuredContent as unknown as Scheduled;
      expect(waiting.state).to.equal('scheduled');
      expect((await view(inbox, waiting.outboxId)).draftId).to.equal(created.id);
      const bad = (await client.callTool({
        name: 'send_draft',
        arguments: { inboxId: inbox.id, draftId: created.id, send_at: 'soon' },
      })) as CallToolResult;
      expect(bad.isError).to.equal(true);
      expect((await cancel(inbox, waiting.outboxId)).status).to.equal(200);
    } finally {
      await client.close();
    }
  });

  it('answers bad send times and holds with 4xx, and a past send time sends at once', async () => {
    await expectError(await later(inbox, `sendAt=${encodeURIComponent(at(3 * 86_400_000))}`, rcpt(), 'x'), 422, /POSTERN_SEND_HORIZON/);
    await expectError(await later(inbox, 'sendAt=tomorrow', rcpt(), 'x'), 400, /RFC 3339/);
    await expectError(await later(inbox, 'sendAt=2026-12-01T09:00:00', rcpt(), 'x'), 400, /time zone/);
    await expectError(await later(inbox, 'holdSeconds=31', rcpt(), 'x'), 400, /holdSeconds/);
    await expectError(await compose(inbox, { to: [rcpt()], holdSeconds: -1 }), 400);
    await expectError(await cancel(inbox, 'f'.repeat(32)), 404);
    await expectError(await call(outbox(inbox, '?state=later'), { token }), 400);
    const noSend = await p.token(['messages:read']);
    await expectError(await call(outbox(inbox), { token: noSend }), 403);

    const to = rcpt('past');
    const res = await later(inbox, `sendAt=${encodeURIComponent(at(-60_000))}`, to, 'in the past');
    expect(res.status, await res.clone().text()).to.equal(200);
    expect((await json<{ sent: boolean }>(res)).sent).to.equal(true);
    await atSink(to);
  });
});
