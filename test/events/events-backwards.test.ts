// GET /events newest first (docs/events.md, "Reading backwards"): order=desc from the newest
// settled event, `before` a cursor or an event id, paging down to the start of the log; the same
// visibility as reading forwards, and the combinations that make no sense refused with a 400.
import { expect } from 'chai';
import { call, newProject, type TestProject, type TestServer, startPostern } from '../helpers/harness.ts';
import { addInbox, expectError, getPage, json, post, register } from '../helpers/events-helpers.ts';

describe('events: reading backwards (GET /events?order=desc, before=)', () => {
  let s: TestServer;
  let p: TestProject;
  let writer: string;
  let inbox: string;
  const ids: string[] = [];

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    writer = await p.token(['events:write', 'events:read', 'project:read']);
    inbox = await addInbox(s, p);
    await register(s, writer, {
      name: 'ext.backwards.step',
      description: 'A numbered step.',
      data: [{ name: 'n', type: 'integer', required: true }],
    });
    // Every other one in the inbox: the inbox filter then has gaps to skip.
    for (let n = 0; n < 7; n++) {
      const res = await post(s, writer, { type: 'ext.backwards.step', data: { n }, ...(n % 2 === 0 ? { inbox } : {}) });
      expect(res.status, await res.clone().text()).to.equal(201);
      ids.push((await json<{ id: string }>(res)).id);
    }
    // Another project's events interleave nothing into this one's pages.
    const other = await newProject(s);
    const theirs = await other.token(['events:write']);
    await register(s, theirs, { name: 'ext.backwards.step', description: 'x', data: [{ name: 'n', type: 'integer', required: true }] });
    await post(s, theirs, { type: 'ext.backwards.step', data: { n: 99 } });
  });
  after(() => s.close());

  const url = (q: string) => `${s.base}/events?types=ext.backwards.*&${q}`;

  it('pages from the newest event down to the first; an empty page with the same cursor is the start', async () => {
    const seen: string[] = [];
    let page = await getPage(url('order=desc&limit=3'), { token: writer });
    for (let guard = 0; guard < 10; guard++) {
      seen.push(...page.events.map((e) => e.id));
      const next = await getPage(url(`before=${page.cursor}&limit=3`), { token: writer });
      if (next.events.length === 0 && next.cursor === page.cursor) break;
      page = next;
    }
    expect(seen).to.deep.equal([...ids].reverse());
    // order=desc may be repeated with before; the answer is the same.
    const third = await getPage(url('order=desc&limit=3'), { token: writer });
    expect((await getPage(url(`order=desc&before=${third.cursor}&limit=3`), { token: writer })).events.map((e) => e.id)).to.deep.equal(
      ids.slice(1, 4).reverse(),
    );
  });

  it('takes an event id as before, and its cursor reads forwards from the same place', async () => {
    const below = await getPage(url(`before=${ids[4]}&limit=2`), { token: writer });
    expect(below.events.map((e) => e.id)).to.deep.equal([ids[3], ids[2]]);
    // The cursor is a place in the log like any other: read forwards, after it comes ids[3].
    const forwards = await getPage(url(`after=${below.cursor}&limit=2`), { token: writer });
    expect(forwards.events.map((e) => e.id)).to.deep.equal([ids[3], ids[4]]);
  });

  it('a web session reads its inbox newest first; the inbox filter skips the rest', async () => {
    const { token: session } = await s.postern.admin.createSession(p.memberId);
    const page = await getPage(`${s.app}/events?inboxes=${inbox}&order=desc&limit=2`, { session });
    expect(page.events.map((e) => e.id)).to.deep.equal([ids[6], ids[4]]);
    expect(page.events.every((e) => e.actor === '')).to.equal(true);
    const rest = await getPage(`${s.app}/events?inboxes=${inbox}&before=${page.cursor}&limit=5`, { session });
    expect(rest.events.map((e) => e.id)).to.deep.equal([ids[2], ids[0]]);
    await expectError(await call(`${s.app}/events?order=desc`, { session }), 400, /name its inboxes/);
  });

  it('400 for what cannot be served: after with before, before with order=asc, a live stream, a foreign or bad cursor', async () => {
    const { cursor } = await getPage(url('order=desc&limit=1'), { token: writer });
    await expectError(await call(url(`after=${cursor}&before=${cursor}`), { token: writer }), 400, /after and before/);
    await expectError(await call(url(`after=${cursor}&order=desc`), { token: writer }), 400, /after and before/);
    await expectError(await call(url(`before=${cursor}&order=asc`), { token: writer }), 400, /order=asc/);
    await expectError(await call(url('order=sideways'), { token: writer }), 400);
    await expectError(
      await call(url('order=desc'), { token: writer, headers: { accept: 'text/event-stream' } }),
      400,
      /live stream reads forwards/,
    );
    await expectError(await call(url('before=garbage'), { token: writer }), 400, /before must be a cursor/);
    const other = await newProject(s);
    const theirs = await other.token(['events:read']);
    await expectError(await call(`${s.base}/events?before=${cursor}`, { token: theirs }), 400, /before must be a cursor/);
    await expectError(await call(`${s.base}/events?before=${ids[0]}`, { token: theirs }), 400, /before names an event/);
  });
});
