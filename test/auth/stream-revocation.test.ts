// Live streams re-check their credential and access every POSTERN_STREAM_RECHECK_MS (a short
// interval here): a revoked token, an expired session or a withdrawn grant ends the stream (or, for
// the "every inbox I can use" event stream, drops that inbox) with a final `event: error` frame,
// while streams of other credentials go on.
import { expect } from 'chai';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
import { newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { addInbox, SseClient, type Frame } from '../helpers/events-helpers.ts';
import { until } from '../helpers/mail-fixtures.ts';

const RECHECK_MS = 200;
/** Time allowed past one interval for the close to reach the client on a loaded machine. */
const SLACK_MS = 1500;
const MSG = (n: number) => `msg_${String(n).padStart(26, '0')}`;
const tokenId = (token: string) => /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1]!;

/** Waits for the server to end the stream; returns how long that took. */
async function ends(c: SseClient, timeoutMs = RECHECK_MS + SLACK_MS): Promise<number> {
  const started = Date.now();
  expect(await c.waitUntil(() => c.ended, timeoutMs), 'the stream ended').to.equal(true);
  return Date.now() - started;
}

/** The stream's last frame is the final error, with an `{ error }` body. */
function lastFrameIsError(c: SseClient, message: RegExp): void {
  const last: Frame | undefined = c.frames.at(-1);
  expect(last?.event, JSON.stringify(c.frames)).to.equal('error');
  const body = JSON.parse(last!.data) as Record<string, unknown>;
  expect(Object.keys(body)).to.deep.equal(['error']);
  expect(body.error).to.match(message);
}

describe('live streams end when their credential or access goes', function () {
  this.timeout(30_000);
  let s: TestServer;
  let p: TestProject;
  const open: SseClient[] = [];
  const stream = async (url: string, auth: { token?: string; session?: string }) => {
    const c = await SseClient.open(url, auth);
    open.push(c);
    return c;
  };
  const recv = (inboxId: string, n: number) =>
    s.postern.events.record({ type: 'message.received', projectId: p.projectId, inboxId, actor: SYSTEM_ACTOR, data: { msgId: MSG(n) } });
  /** How often each token was authenticated: a pass re-checks each credential once, at its start. */
  const authenticated = new Map<string, number>();
  const checks = (token: string) => authenticated.get(`Bearer ${token}`) ?? 0;
  /**
   * Resolves once `n` re-check passes of the token's streams have begun after the call. Passes
   * never overlap, so with n = 1 the pass running at the call has finished, and with n = 2 a whole
   * pass ran after the call: what a timer-driven sleep only hoped for on a loaded machine.
   */
  const passes = async (token: string, n: number): Promise<void> => {
    const target = checks(token) + n;
    await until(`${n} re-check passes`, async () => checks(token) >= target, 10_000);
  };

  before(async () => {
    s = await startPostern({ POSTERN_STREAM_RECHECK_MS: String(RECHECK_MS), POSTERN_STREAM_HEARTBEAT_MS: '5000' });
    p = await newProject(s);
    const access = s.postern.access;
    const original = access.authenticateToken.bind(access);
    access.authenticateToken = (header) => {
      if (header) authenticated.set(header, (authenticated.get(header) ?? 0) + 1);
      return original(header);
    };
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });
  after(async () => {
    await s?.close();
  });

  it('a revoked token: its event stream and its inbox stream end within the interval with a final error frame; another token streams on', async () => {
    const inbox = await p.inbox();
    const revoked = await p.token(['events:read', 'messages:read']);
    const other = await p.token(['events:read', 'messages:read']);
    const events = await stream(`${s.base}/events`, { token: revoked });
    const changes = await stream(`${s.base}/inboxes/${inbox.id}/events`, { token: revoked });
    const otherEvents = await stream(`${s.base}/events`, { token: other });
    const otherChanges = await stream(`${s.base}/inboxes/${inbox.id}/events`, { token: other });

    await recv(inbox.id, 1);
    await events.waitFor(1);
    await otherEvents.waitFor(1);
    expect(events.frames.map((f) => f.event)).to.deep.equal(['message.received']);

    await s.postern.admin.revokeToken(tokenId(revoked));
    const took = await Promise.all([ends(events), ends(changes)]);
    expect(Math.max(...took)).to.be.below(RECHECK_MS + SLACK_MS);
    lastFrameIsError(events, /^API token revoked$/);
    lastFrameIsError(changes, /^API token revoked$/);
    expect(changes.frames).to.have.length(1);

    // The other token's streams are untouched after a whole pass more, and still deliver.
    await passes(other, 2);
    expect(otherEvents.ended).to.equal(false);
    expect(otherChanges.ended).to.equal(false);
    await recv(inbox.id, 2);
    await otherEvents.waitFor(2);
    expect(otherEvents.frames.map((f) => f.event)).to.deep.equal(['message.received', 'message.received']);
  });

  it('an expired token ends its stream', async () => {
    const A = await addInbox(s, p);
    const c = await stream(`${s.base}/events?inboxes=${A}`, { token: await p.token(['events:read'], { expiresInSeconds: 1 }) });
    await ends(c, 1000 + RECHECK_MS + SLACK_MS);
    lastFrameIsError(c, /^API token expired$/);
  });

  it('an expired session: its event stream and inbox stream end with a final error frame', async () => {
    const inbox = await p.inbox();
    const session = await p.session({ expiresInSeconds: 1 });
    const events = await stream(`${s.app}/events?inboxes=${inbox.id}`, { session });
    const changes = await stream(`${s.app}/inboxes/${inbox.id}/events`, { session });
    const lasting = await stream(`${s.app}/events?inboxes=${inbox.id}`, { session: await p.session() });
    await Promise.all([ends(events, 1000 + RECHECK_MS + SLACK_MS), ends(changes, 1000 + RECHECK_MS + SLACK_MS)]);
    lastFrameIsError(events, /^session expired$/);
    lastFrameIsError(changes, /^session expired$/);
    expect(lasting.ended).to.equal(false);
  });

  it('a withdrawn grant: the member\'s streams of that inbox end, and its "every inbox" stream stops showing it', async () => {
    const memberId = await p.member();
    const A = await p.inbox({ memberId });
    const B = await addInbox(s, p, { memberId });
    const token = await p.token(['events:read', 'messages:read'], { memberId });
    const everything = await stream(`${s.base}/events`, { token });
    const namedA = await stream(`${s.base}/events?inboxes=${A.id}`, { token });
    const namedB = await stream(`${s.base}/events?inboxes=${B}`, { token });
    const changesA = await stream(`${s.base}/inboxes/${A.id}/events`, { token });
    // The project's first member keeps its own grant on A.
    await s.postern.admin.grant(p.memberId, A.id, 'owner');
    const owner = await stream(`${s.base}/events?inboxes=${A.id}`, { token: await p.token(['events:read']) });

    await recv(A.id, 10);
    await recv(B, 11);
    await everything.waitFor(2);
    expect(everything.events().map((e) => e.containerid)).to.deep.equal([A.id, B]);

    await s.postern.admin.revoke(memberId, A.id);
    await Promise.all([ends(namedA), ends(changesA)]);
    lastFrameIsError(namedA, /^inbox not found$/);
    lastFrameIsError(changesA, /^inbox not found$/);
    // Every stream of the credential was re-checked in that pass: wait for it to finish.
    await passes(token, 1);

    await recv(A.id, 12);
    await recv(B, 13);
    await everything.waitFor(3);
    await namedB.waitFor(2);
    await owner.waitFor(2);
    // Only B's event reached the member's "every inbox" stream, which is still open (A's 12 was
    // recorded before B's 13, and a stream delivers in order: no wait needed to be sure).
    expect(everything.events().map((e) => [e.containerid, e.data])).to.deep.equal([
      [A.id, { msgId: MSG(10) }],
      [B, { msgId: MSG(11) }],
      [B, { msgId: MSG(13) }],
    ]);
    expect(everything.ended).to.equal(false);
    expect(namedB.ended).to.equal(false);
    expect(namedB.events().map((e) => e.data)).to.deep.equal([{ msgId: MSG(11) }, { msgId: MSG(13) }]);
    // Someone else's access to A is untouched.
    expect(owner.ended).to.equal(false);
    expect(owner.events().map((e) => e.data)).to.deep.equal([{ msgId: MSG(10) }, { msgId: MSG(12) }]);

    // A grant given back reaches the "every inbox" stream at the next re-check.
    await s.postern.admin.grant(memberId, A.id, 'reader');
    await passes(token, 2);
    await recv(A.id, 14);
    await everything.waitFor(4);
    expect(everything.events().at(-1)).to.deep.include({ containerid: A.id, data: { msgId: MSG(14) } });
  });

  it('re-checks each credential once per pass, however many streams share it', async () => {
    const A = await addInbox(s, p);
    const token = await p.token(['events:read']);
    for (let i = 0; i < 20; i++) await stream(`${s.base}/events?inboxes=${A}`, { token });
    // A credential with one stream counts the passes (the timer's pace on a loaded machine is not the test's).
    const counter = await p.token(['events:read']);
    await stream(`${s.base}/events?inboxes=${A}`, { token: counter });
    await passes(counter, 1);
    const [before, counted] = [checks(token), checks(counter)];
    await passes(counter, 3);
    // One per pass, never one per stream (the pass running at the start may or may not be counted).
    const ran = checks(counter) - counted;
    expect(checks(token) - before, `${ran} passes`).to.be.within(ran - 1, ran + 1);
  });
});
