// docs/api.md, "Authentication", rules 1-8 on GET /inboxes, and the HTTP surface every endpoint shares.
import { expect } from 'chai';
import { call, expectError, json, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';

/** Waits until a credential issued before `issuedBy` with this lifetime has surely expired. */
const pastExpiry = (issuedBy: number, seconds: number) =>
  new Promise((r) => setTimeout(r, Math.max(0, issuedBy + seconds * 1000 + 50 - Date.now())));

describe('authentication and access (GET /inboxes)', () => {
  let s: TestServer;
  let p: TestProject;
  let inboxA: string;
  let inboxB: string;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    inboxA = (await p.inbox()).id;
    inboxB = (await p.inbox({ role: 'reader' })).id;
  });
  after(() => s.close());

  it('lists the granted inboxes with the role and main address', async () => {
    const token = await p.token(['messages:read']);
    const res = await call(`${s.base}/inboxes`, { token });
    expect(res.status).to.equal(200);
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const body = await json(res);
    const inboxes = body.inboxes as Array<{ inboxId: string; role: string; label: string }>;
    expect(inboxes.map((i) => [i.inboxId, i.role])).to.deep.equal([
      [inboxA, 'owner'],
      [inboxB, 'reader'],
    ]);
    for (const i of inboxes) expect(i.label).to.match(/@postern\.test$/);
  });

  it('401 without a credential, with a WWW-Authenticate challenge', async () => {
    const res = await call(`${s.base}/inboxes`);
    await expectError(res, 401);
    expect(res.headers.get('www-authenticate')).to.equal('Bearer');
  });

  for (const [what, header] of [
    ['a non-Bearer scheme', 'Basic dXNlcjpwYXNz'],
    ['Bearer with nothing', 'Bearer '],
    ['a token of the wrong form', 'Bearer not-a-token'],
    ['a token with a short secret', 'Bearer svc_tok_01M80W1F3RD7BV8C61QAP73X5Y_short'],
    ['a session token on /v1', 'Bearer ses_01M80W1F3RD7BV8C61QAP73X5Y_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'],
  ] as const) {
    it(`401 for a malformed credential: ${what}`, async () => {
      await expectError(await call(`${s.base}/inboxes`, { headers: { authorization: header } }), 401);
    });
  }

  it('401 for an unknown token id', async () => {
    const real = await p.token(['messages:read']);
    const forged = real.replace(/^svc_tok_[0-9A-Z]{26}/, 'svc_tok_01M80W1F3RD7BV8C61QAP73X5Y');
    await expectError(await call(`${s.base}/inboxes`, { token: forged }), 401);
  });

  it('401 for the right token id with a wrong secret', async () => {
    const real = await p.token(['messages:read']);
    const last = real.at(-1) === 'A' ? 'B' : 'A';
    await expectError(await call(`${s.base}/inboxes`, { token: real.slice(0, -1) + last }), 401);
  });

  it('401 for an expired token', async () => {
    // 2 s: the first call must land before the expiry even on a loaded machine.
    const token = await p.token(['messages:read'], { expiresInSeconds: 2 });
    const issued = Date.now(); // the server's clock: it runs in this process
    expect((await call(`${s.base}/inboxes`, { token })).status).to.equal(200);
    await pastExpiry(issued, 2);
    expect(await expectError(await call(`${s.base}/inboxes`, { token }), 401)).to.match(/expired/);
  });

  it('401 for a revoked token, at once', async () => {
    const token = await p.token(['messages:read']);
    expect((await call(`${s.base}/inboxes`, { token })).status).to.equal(200);
    const id = /^svc_(tok_[0-9A-Z]{26})_/.exec(token)![1]!;
    expect(await s.postern.admin.revokeToken(id)).to.deep.equal({ id, revoked: true });
    expect(await expectError(await call(`${s.base}/inboxes`, { token }), 401)).to.match(/revoked/);
  });

  it('401 for an API token on {app_url}', async () => {
    const token = await p.token(['messages:read']);
    await expectError(await call(`${s.app}/inboxes`, { token }), 401);
    await expectError(await call(`${s.app}/inboxes`, { headers: { 'x-svc-token': token } }), 401);
  });

  it('401 for a session on {base_url}; 200 on {app_url}', async () => {
    const session = await p.session();
    await expectError(await call(`${s.base}/inboxes`, { session }), 401);
    await expectError(await call(`${s.base}/inboxes`, { headers: { authorization: `Bearer ${session}` } }), 401);
    const res = await call(`${s.app}/inboxes`, { session });
    expect(res.status).to.equal(200);
    expect(((await json(res)).inboxes as unknown[]).length).to.equal(2);
  });

  it('401 for an expired session', async () => {
    const session = await p.session({ expiresInSeconds: 1 });
    await pastExpiry(Date.now(), 1);
    expect(await expectError(await call(`${s.app}/inboxes`, { session }), 401)).to.match(/expired/);
  });

  it('403 for a token without messages:read (and for one with no scopes)', async () => {
    for (const scopes of [['events:read', 'send'], []]) {
      const token = await p.token(scopes);
      expect(await expectError(await call(`${s.base}/inboxes`, { token }), 403)).to.match(/messages:read/);
    }
  });

  it('a narrowed token sees only its inboxes, and 404 for the others', async () => {
    const token = await p.token(['messages:read'], { inboxes: [inboxB] });
    const body = await json(await call(`${s.base}/inboxes`, { token }));
    expect((body.inboxes as Array<{ inboxId: string }>).map((i) => i.inboxId)).to.deep.equal([inboxB]);
    const principal = await s.postern.access.authenticateToken(`Bearer ${token}`);
    await s.postern.access.inboxAccess(principal, inboxB, 'messages:read');
    const err = await s.postern.access.inboxAccess(principal, inboxA, 'messages:read').catch((e: unknown) => e);
    expect(err).to.have.property('kind', 'not-found');
  });

  it('a revoked grant takes effect at once, for tokens and sessions', async () => {
    const memberId = await p.member();
    const inbox = await p.inbox({ memberId });
    const token = await p.token(['messages:read'], { memberId });
    const session = await p.session({ memberId });
    const ids = async (res: Response) => ((await json(res)).inboxes as Array<{ inboxId: string }>).map((i) => i.inboxId);
    expect(await ids(await call(`${s.base}/inboxes`, { token }))).to.deep.equal([inbox.id]);
    await s.postern.admin.revoke(memberId, inbox.id);
    expect(await ids(await call(`${s.base}/inboxes`, { token }))).to.deep.equal([]);
    expect(await ids(await call(`${s.app}/inboxes`, { session }))).to.deep.equal([]);
    const principal = await s.postern.access.authenticateToken(`Bearer ${token}`);
    const err = await s.postern.access.inboxAccess(principal, inbox.id, 'messages:read').catch((e: unknown) => e);
    expect(err).to.have.property('kind', 'not-found');
  });

  it("another project's inbox is invisible: not listed, 404, even when narrowed to it", async () => {
    const other = await newProject(s);
    const foreign = await other.inbox();
    // Staff cannot narrow a token to another project's inbox…
    const refused = await s.postern.admin
      .createToken({ memberId: p.memberId, scopes: ['messages:read'], inboxes: [foreign.id] })
      .catch((e: unknown) => e);
    expect(refused).to.have.property('kind', 'not-found');
    // …and a grant across projects is refused too.
    const crossGrant = await s.postern.admin.grant(p.memberId, foreign.id, 'owner').catch((e: unknown) => e);
    expect(crossGrant).to.have.property('kind', 'invalid');
    const token = await p.token(['messages:read']);
    const body = await json(await call(`${s.base}/inboxes`, { token }));
    expect((body.inboxes as Array<{ inboxId: string }>).map((i) => i.inboxId)).to.not.include(foreign.id);
    const principal = await s.postern.access.authenticateToken(`Bearer ${token}`);
    const err = await s.postern.access.inboxAccess(principal, foreign.id, 'messages:read').catch((e: unknown) => e);
    expect(err).to.have.property('kind', 'not-found');
  });

  it('a malformed or unknown inbox id is 404, never 400', async () => {
    const principal = await s.postern.access.authenticateToken(`Bearer ${await p.token(['messages:read'])}`);
    for (const id of ['ibx_nope', 'ibx_01M80W1F3RD7BV8C61QAP73X5Y', '../etc', '']) {
      const err = await s.postern.access.inboxAccess(principal, id, 'messages:read').catch((e: unknown) => e);
      expect(err, id).to.have.property('kind', 'not-found');
    }
  });

  it('a role that does not allow an action is 403 in that inbox (reader cannot send)', async () => {
    const principal = await s.postern.access.authenticateToken(`Bearer ${await p.token(['messages:read', 'send'])}`);
    await s.postern.access.inboxAccess(principal, inboxA, 'send');
    const err = await s.postern.access.inboxAccess(principal, inboxB, 'send').catch((e: unknown) => e);
    expect(err).to.have.property('kind', 'forbidden');
  });
});

describe('HTTP surface', () => {
  let s: TestServer;
  before(async () => {
    s = await startPostern();
  });
  after(() => s.close());

  it('GET /healthz answers without credentials', async () => {
    const res = await fetch(`${s.url}/healthz`);
    expect(res.status).to.equal(200);
    expect(await res.json()).to.deep.equal({ status: 'ok' });
  });

  it('unknown routes are a JSON 404 on every surface', async () => {
    for (const path of ['/nope', '/v1/nope', '/api/v1/nope', '/v2/inboxes']) {
      await expectError(await fetch(`${s.url}${path}`), 404);
    }
  });

  it('a known path with another method is a JSON 405 with Allow', async () => {
    const p = await newProject(s);
    const res = await call(`${s.base}/inboxes`, { method: 'DELETE', token: await p.token(['messages:read']) });
    await expectError(res, 405);
    expect(res.headers.get('allow')).to.match(/GET/);
  });

  it('echoes a sane X-Request-Id and mints one otherwise', async () => {
    const given = await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': 'abc-123' } });
    expect(given.headers.get('x-request-id')).to.equal('abc-123');
    const minted = await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': 'bad id\twith spaces' } });
    expect(minted.headers.get('x-request-id')).to.match(/^[0-9a-f-]{36}$/);
  });
});
