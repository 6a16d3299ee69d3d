// Changes to mail reach the project event log as message.added / message.flags /
// message.removed, whoever made them (a mail app over IMAP, or the API), in the order applied.
import { expect } from 'chai';
import { call, json, newProject, startPostern, type TestProject, type TestServer } from './harness.ts';
import { append, mailApp, until } from './mail-fixtures.ts';
import type { WireEvent } from './events-helpers.ts';

describe('mail changes in the project event log', () => {
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  it('records what a mail app and the API change, in order, as the service acting', async () => {
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'flags:write', 'events:read']);
    const read = async () => {
      const res = await call(`${s.base}/inboxes/${inbox.id}/labels`, { token });
      expect(res.status).to.equal(200);
      return json<{ labels: Array<{ id: string; name: string }> }>(res);
    };
    const { labels } = await read(); // the first read fills the index: nothing changed, nothing recorded
    const inboxLabel = labels.find((l) => l.name === 'INBOX')!.id;

    const client = await mailApp(inbox);
    try {
      const uid = await append(client, 'INBOX', { subject: 'for the log' });
      await read();
      await client.mailboxOpen('INBOX');
      await client.messageFlagsAdd(String(uid), ['\\Flagged'], { uid: true });
      await read();
      const page = await json<{ messages: Array<{ id: string }> }>(await call(`${s.base}/inboxes/${inbox.id}/labels/${inboxLabel}/messages`, { token }));
      const msgId = page.messages[0]!.id;
      const flagged = await call(`${s.base}/inboxes/${inbox.id}/messages/${msgId}/flags`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ add: ['seen'] }),
      });
      expect(flagged.status).to.equal(200);
      await client.messageDelete(String(uid), { uid: true });
      await read();

      const events = await until('the four mail events in the log', async () => {
        const res = await call(`${s.base}/events?inboxes=${inbox.id}`, { token });
        const body = await json<{ events: WireEvent[] }>(res);
        return body.events.length >= 4 ? body.events : null;
      });
      expect(events.map((e) => e.type)).to.deep.equal(['message.added', 'message.flags', 'message.flags', 'message.removed']);
      for (const e of events) {
        expect(e.actor).to.equal('sys_postern');
        expect(e.containerid).to.equal(inbox.id);
        expect(e.subject).to.equal(msgId);
        expect(e.data).to.include({ msgId, labelId: inboxLabel });
      }
      expect(events[0]!.data).to.include({ uid });
      expect(events[1]!.data!.flags).to.deep.equal(['flagged']);
      expect(events[2]!.data!.flags).to.have.members(['flagged', 'seen']);
    } finally {
      await client.logout();
    }
  });
});
