// Cursors are private to their project (docs/events.md, "Cursors"): they do not move with other projects'
// events, another project's cursor is a 400, old clear-text cursors get a clear 400, and the
// same place always has the same cursor, on pages, on publish and on live frames.
import { expect } from 'chai';
import { call, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { expectError, getPage, json, post, register, SseClient } from '../helpers/events-helpers.ts';

describe('events: cursors are private to their project', () => {
  let s: TestServer;
  let a: TestProject;
  let b: TestProject;
  let aWriter: string;
  let aReader: string;
  let bWriter: string;
  let bReader: string;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    a = await newProject(s);
    b = await newProject(s);
    aWriter = await a.token(['events:write']);
    aReader = await a.token(['events:read', 'project:read']);
    bWriter = await b.token(['events:write']);
    bReader = await b.token(['events:read', 'project:read']);
    await register(s, aWriter, { name: 'ext.a.happened', description: 'a' });
    await register(s, bWriter, { name: 'ext.b.happened', description: 'b' });
  });
  after(() => s.close());

  const publish = async (token: string, type: string): Promise<{ id: string; cursor: string }> => {
    const res = await post(s, token, { type });
    expect(res.status).to.equal(201);
    return json<{ id: string; cursor: string }>(res);
  };

  it("a project's cursor does not move when only other projects record events", async () => {
    await publish(aWriter, 'ext.a.happened');
    const caughtUp = await getPage(`${s.base}/events`, { token: aReader });
    // Another project's events, paged through by their own reader so the log surely moved on.
    for (let i = 0; i < 5; i++) await publish(bWriter, 'ext.b.happened');
    expect((await getPage(`${s.base}/events`, { token: bReader })).events).to.have.length(5);
    const again = await getPage(`${s.base}/events?after=${caughtUp.cursor}`, { token: aReader });
    expect(again.events).to.deep.equal([]);
    expect(again.cursor, 'the cursor moved with project B').to.equal(caughtUp.cursor);
    // A sparse filter over many of B's events neither moves it nor finds anything.
    const filtered = await getPage(`${s.base}/events?after=${caughtUp.cursor}&types=ext.nothing.*`, { token: aReader });
    expect(filtered.cursor).to.equal(caughtUp.cursor);
    // Its own next event moves it, to that event's cursor.
    const next = await publish(aWriter, 'ext.a.happened');
    const page = await getPage(`${s.base}/events?after=${caughtUp.cursor}`, { token: aReader });
    expect(page.events.map((e) => e.id)).to.deep.equal([next.id]);
    expect(page.cursor).to.equal(next.cursor);
  });

  it("another project's cursor, or an altered one, is a 400 that says nothing more than garbage would", async () => {
    const mine = await publish(aWriter, 'ext.a.happened');
    const theirs = await publish(bWriter, 'ext.b.happened');
    const own = await getPage(`${s.base}/events?after=${theirs.cursor}&types=ext.b.happened`, { token: bReader });
    expect(own.events).to.deep.equal([]);
    const foreign = await expectError(await call(`${s.base}/events?after=${mine.cursor}`, { token: bReader }), 400);
    const altered = mine.cursor.slice(0, 5) + (mine.cursor[5] === 'A' ? 'B' : 'A') + mine.cursor.slice(6);
    const garbage = await expectError(await call(`${s.base}/events?after=${altered}`, { token: aReader }), 400);
    expect(foreign).to.equal(garbage);
    // Live streams too, through Last-Event-ID.
    const res = await call(`${s.base}/events`, { token: bReader, headers: { accept: 'text/event-stream', 'last-event-id': mine.cursor } });
    expect(res.status).to.equal(400);
    await res.body?.cancel();
  });

  it('old clear-text cursors get a 400 that says how to resume', async () => {
    // Version 1: the byte 1 and the global position, base64url (position 1 here).
    const old = Buffer.from([1, 0, 0, 0, 0, 0, 0, 0, 1]).toString('base64url');
    expect(await expectError(await call(`${s.base}/events?after=${old}`, { token: aReader }), 400)).to.match(/earlier version.*evt_/);
  });

  it('the same place has the same cursor: publish, page and live frame agree, and resume from each other', async () => {
    const stream = await SseClient.open(`${s.base}/events?types=ext.a.happened`, { token: aReader });
    try {
      const first = await publish(aWriter, 'ext.a.happened');
      const second = await publish(aWriter, 'ext.a.happened');
      const frames = await stream.waitFor(2);
      expect(frames.map((f) => f.id)).to.deep.equal([first.cursor, second.cursor]);
      const page = await getPage(`${s.base}/events?after=${first.cursor}&types=ext.a.happened`, { token: aReader });
      expect(page.events.map((e) => e.id)).to.deep.equal([second.id]);
      expect(page.cursor).to.equal(second.cursor);
      // A stream resumed from the first frame's id sends the second event, then goes live.
      const resumed = await SseClient.open(`${s.base}/events?types=ext.a.happened`, { token: aReader, lastEventId: frames[0]!.id! });
      try {
        expect((await resumed.waitFor(1)).map((f) => f.id)).to.deep.equal([second.cursor]);
      } finally {
        resumed.close();
      }
    } finally {
      stream.close();
    }
  });

  it('two projects at the same place get different cursors, and a restart keeps them', async () => {
    const c = await newProject(s);
    // Both empty projects read from the very start: the same position (0), different cursors.
    const one = await getPage(`${s.base}/events`, { token: await c.token(['events:read']) });
    const d = await newProject(s);
    const two = await getPage(`${s.base}/events`, { token: await d.token(['events:read']) });
    expect(one.cursor).to.not.equal(two.cursor);
    // Another process on the same store reads the same cursors (the secret is in the store).
    const other = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0', ...s.storeEnv });
    try {
      const token = await a.token(['events:read', 'project:read']);
      const here = await getPage(`${s.base}/events`, { token });
      const there = await getPage(`${other.base}/events`, { token });
      expect(there.cursor).to.equal(here.cursor);
    } finally {
      await other.close();
    }
  });
});
