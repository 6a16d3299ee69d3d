// Passkey enrollment and sign-in against the real server, with a software passkey that can be
// made to misbehave: every ceremony failure is a clear 4xx, never a 500, and never a session.
import { expect } from 'chai';
import { Passkeys } from '../../lib/auth/passkeys.ts';
import { memberKeyPair } from '../helpers/crypto-fixtures.ts';
import { call, expectError, json, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { SoftPasskey } from '../helpers/webauthn-authenticator.ts';

const ORIGIN = 'http://localhost:8787';

interface SignedIn {
  session: string;
  expiresAt: string;
  memberId: string;
  passkeyId: string;
  passkey?: { id: string };
}

describe('passkeys: enrollment, sign-in, sessions', () => {
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    // These tests run far more ceremonies a minute than one person would; the per-address budget
    // has its own tests below.
    s = await startPostern({ POSTERN_APP_ORIGIN: ORIGIN, POSTERN_SIGN_IN_RATE_PER_MINUTE: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  const post = (path: string, body?: unknown, session?: string) =>
    call(`${s.app}${path}`, {
      method: 'POST',
      ...(session ? { session } : {}),
      ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
    });

  /** A past clock on the same store: what it issues is already expired for the server. */
  const pastPasskeys = () => {
    const { passkeys, directory } = s.postern.store;
    return new Passkeys(passkeys, directory, {
      events: s.postern.events,
      origin: ORIGIN,
      rpName: 'Postern',
      sessionTtlSeconds: 3600,
      inviteTtlSeconds: 60,
      now: () => Date.now() - 3_600_000,
    });
  };

  async function enrollOptions(invite: string) {
    const res = await post('/auth/enroll/options', { invite });
    expect(res.status).to.equal(200);
    return (await json<{ publicKey: { challenge: string; user: { id: string }; rp: { id: string } } }>(res)).publicKey;
  }

  /** A member with one enrolled passkey, signed in by the enrollment. */
  async function enrolled(memberId = p.memberId): Promise<{ key: SoftPasskey; signedIn: SignedIn }> {
    const { link } = await s.postern.passkeys.invite(memberId);
    const invite = new URL(link).hash.replace('#enroll=', '');
    const key = new SoftPasskey(ORIGIN);
    const res = await post('/auth/enroll', { invite, name: 'Laptop', response: key.register(await enrollOptions(invite)) });
    expect(res.status, await res.clone().text()).to.equal(201);
    return { key, signedIn: await json<SignedIn>(res) };
  }

  async function reauthOptions(session: string, operation: string) {
    const res = await post('/me/reauth/options', { operation }, session);
    expect(res.status, await res.clone().text()).to.equal(200);
    return (await json<{ publicKey: { challenge: string; allowCredentials: Array<{ id: string }>; userVerification: string } }>(res))
      .publicKey;
  }

  async function signInOptions() {
    const res = await post('/auth/sign-in/options');
    expect(res.status).to.equal(200);
    return (await json<{ publicKey: { challenge: string; rpId: string; allowCredentials?: unknown[] } }>(res)).publicKey;
  }

  it('an invite link enrolls a passkey and signs the member in; the session reads the inboxes', async () => {
    const inbox = await p.inbox();
    const { link, expiresAt } = await s.postern.passkeys.invite(p.memberId);
    expect(link).to.match(/^http:\/\/localhost:8787\/app\/#enroll=inv_[0-9A-Z]{26}_[\w-]{43}$/);
    expect(Date.parse(expiresAt) - Date.now()).to.be.greaterThan(6 * 86400_000);
    const invite = new URL(link).hash.replace('#enroll=', '');
    const options = await enrollOptions(invite);
    expect(options.rp.id).to.equal('localhost');
    const key = new SoftPasskey(ORIGIN);
    const res = await post('/auth/enroll', { invite, name: 'Laptop', response: key.register(options) });
    expect(res.status).to.equal(201);
    const body = await json<SignedIn>(res);
    s.postern.validator.body('https://postern.dev/schemas/app.json#/$defs/SignedIn', body);
    expect(body.memberId).to.equal(p.memberId);
    const inboxes = await call(`${s.app}/inboxes`, { session: body.session });
    expect(inboxes.status).to.equal(200);
    expect((await json<{ inboxes: Array<{ inboxId: string }> }>(inboxes)).inboxes.map((i) => i.inboxId)).to.include(inbox.id);
  });

  it('a discoverable passkey signs in; sign-out ends that session at once', async () => {
    const { key } = await enrolled();
    const options = await signInOptions();
    expect(options.rpId).to.equal('localhost');
    expect(options.allowCredentials ?? []).to.deep.equal([]);
    const res = await post('/auth/sign-in', { response: key.signIn(options) });
    expect(res.status).to.equal(200);
    const { session, expiresAt } = await json<SignedIn>(res);
    // POSTERN_SESSION_TTL: 12 hours by default.
    expect(Date.parse(expiresAt) - Date.now()).to.be.within(12 * 3600_000 - 60_000, 12 * 3600_000);
    expect((await call(`${s.app}/inboxes`, { session })).status).to.equal(200);
    const out = await post('/auth/sign-out', undefined, session);
    expect(out.status).to.equal(204);
    expect(out.headers.get('clear-site-data'), 'the browser drops what it cached for the member').to.equal('"cache"');
    await expectError(await call(`${s.app}/inboxes`, { session }), 401, /session ended/);
    await expectError(await post('/auth/sign-out', undefined, session), 401);
  });

  it('a session is not an API token: /v1 refuses it, and the passkey endpoints are not on /v1', async () => {
    const { signedIn } = await enrolled();
    await expectError(await call(`${s.base}/inboxes`, { session: signedIn.session }), 401);
    await expectError(await call(`${s.base}/auth/sign-in/options`, { method: 'POST' }), 404);
  });

  it('a challenge is answered once: a replayed sign-in is refused', async () => {
    const { key } = await enrolled();
    const response = key.signIn(await signInOptions());
    expect((await post('/auth/sign-in', { response })).status).to.equal(200);
    await expectError(await post('/auth/sign-in', { response }), 401, /unknown or already answered challenge/);
  });

  it('a failed answer spends the challenge too', async () => {
    const { key } = await enrolled();
    const options = await signInOptions();
    key.origin = 'http://localhost:9999';
    await expectError(await post('/auth/sign-in', { response: key.signIn(options) }), 401, /origin/i);
    key.origin = ORIGIN;
    await expectError(await post('/auth/sign-in', { response: key.signIn(options) }), 401, /already answered/);
  });

  it('refuses a response from another origin or for another RP ID', async () => {
    const { key } = await enrolled();
    key.origin = 'https://evil.example';
    await expectError(await post('/auth/sign-in', { response: key.signIn(await signInOptions()) }), 401, /origin/i);
    key.origin = ORIGIN;
    key.rpId = 'evil.example';
    await expectError(await post('/auth/sign-in', { response: key.signIn(await signInOptions()) }), 401, /RP ID/i);
  });

  it('refuses enrollment from another origin, and the invite stays usable', async () => {
    const { link } = await s.postern.passkeys.invite(p.memberId);
    const invite = new URL(link).hash.replace('#enroll=', '');
    const wrong = new SoftPasskey('http://localhost:1');
    await expectError(await post('/auth/enroll', { invite, response: wrong.register(await enrollOptions(invite)) }), 400, /origin/i);
    const right = new SoftPasskey(ORIGIN);
    expect((await post('/auth/enroll', { invite, response: right.register(await enrollOptions(invite)) })).status).to.equal(201);
  });

  it('refuses an unknown passkey', async () => {
    await enrolled();
    const stranger = new SoftPasskey(ORIGIN);
    await expectError(await post('/auth/sign-in', { response: stranger.signIn(await signInOptions()) }), 401, /unknown passkey/);
  });

  it('refuses an expired challenge', async () => {
    const { key } = await enrolled();
    const old = await pastPasskeys().signInOptions();
    await expectError(await post('/auth/sign-in', { response: key.signIn(old) }), 401, /expired/);
  });

  it('refuses the challenge of another ceremony', async () => {
    const { key } = await enrolled();
    const { link } = await s.postern.passkeys.invite(p.memberId);
    const options = await enrollOptions(new URL(link).hash.replace('#enroll=', ''));
    await expectError(await post('/auth/sign-in', { response: key.signIn(options) }), 401, /another ceremony/);
  });

  it('refuses an expired invite, a used invite, an unknown and a malformed one', async () => {
    const expired = await pastPasskeys().invite(p.memberId);
    const expiredInvite = new URL(expired.link).hash.replace('#enroll=', '');
    await expectError(await post('/auth/enroll/options', { invite: expiredInvite }), 410, /expired/);

    const { link } = await s.postern.passkeys.invite(p.memberId);
    const invite = new URL(link).hash.replace('#enroll=', '');
    const first = new SoftPasskey(ORIGIN);
    const options = await enrollOptions(invite);
    const second = new SoftPasskey(ORIGIN);
    const secondResponse = second.register(await enrollOptions(invite));
    expect((await post('/auth/enroll', { invite, response: first.register(options) })).status).to.equal(201);
    await expectError(await post('/auth/enroll/options', { invite }), 410, /already been used/);
    await expectError(await post('/auth/enroll', { invite, response: secondResponse }), 410, /already been used/);

    const unknown = invite.replace(/_[\w-]{43}$/, `_${'A'.repeat(43)}`);
    await expectError(await post('/auth/enroll/options', { invite: unknown }), 404, /invite not found/);
    await expectError(await post('/auth/enroll/options', { invite: 'inv_nonsense' }), 400, /malformed invite/);
    await expectError(await post('/auth/enroll/options', {}), 400);
    await expectError(await post('/auth/enroll/options', { invite, extra: 1 }), 400);
  });

  it('refuses malformed ceremony bodies with 400, not 500', async () => {
    await expectError(await post('/auth/sign-in', { response: { id: 'x' } }), 400);
    await expectError(
      await post('/auth/sign-in', {
        response: {
          id: 'x',
          rawId: 'x',
          type: 'public-key',
          clientExtensionResults: {},
          response: { clientDataJSON: 'bm9wZQ', authenticatorData: 'AA', signature: 'AA' },
        },
      }),
      400,
      /client data/,
    );
    await expectError(await post('/auth/sign-in', 'not an object'), 400);
    await expectError(
      await call(`${s.app}/auth/sign-in`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' }),
      400,
    );
  });

  it('refuses a response that carries PRF output: that key material must stay in the browser', async () => {
    const { key } = await enrolled();
    const response = key.signIn(await signInOptions());
    const leaky = { ...response, clientExtensionResults: { prf: { results: { first: 'AAAA' } } } };
    await expectError(await post('/auth/sign-in', { response: leaky }), 400, /prf/);
  });

  it('a signature counter that goes backwards disables the passkey (a possible clone)', async () => {
    const { key } = await enrolled();
    expect((await post('/auth/sign-in', { response: key.signIn(await signInOptions()) })).status).to.equal(200);
    expect((await post('/auth/sign-in', { response: key.signIn(await signInOptions()) })).status).to.equal(200);
    key.counter = 0; // the clone's copy of the counter is behind: its next signature says 1
    await expectError(await post('/auth/sign-in', { response: key.signIn(await signInOptions()) }), 403, /counter/);
    key.counter = 100; // even a counter ahead is no longer trusted
    await expectError(await post('/auth/sign-in', { response: key.signIn(await signInOptions()) }), 403, /disabled/);
  });

  it('a member lists and removes passkeys; removing one ends the sessions it opened', async () => {
    const member = await p.member();
    const { key, signedIn } = await enrolled(member);
    // A second passkey, added while signed in.
    const optionsRes = await post('/auth/passkeys/options', undefined, signedIn.session);
    expect(optionsRes.status).to.equal(200);
    const { publicKey } = await json<{ publicKey: { challenge: string; user: { id: string }; excludeCredentials: Array<{ id: string }> } }>(
      optionsRes,
    );
    expect(publicKey.excludeCredentials.map((c) => c.id)).to.deep.equal([key.id]);
    const phone = new SoftPasskey(ORIGIN);
    const reauth = key.signIn(await reauthOptions(signedIn.session, 'add-passkey'));
    const added = await post('/auth/passkeys', { name: 'Phone', response: phone.register(publicKey), reauth }, signedIn.session);
    expect(added.status).to.equal(201);
    const phoneView = await json<{ id: string; name: string }>(added);
    expect(phoneView.name).to.equal('Phone');

    const phoneSession = (await json<SignedIn>(await post('/auth/sign-in', { response: phone.signIn(await signInOptions()) }))).session;
    const list = await json<{ passkeys: Array<{ id: string; name: string; lastUsedAt: string | null }> }>(
      await call(`${s.app}/auth/passkeys`, { session: signedIn.session }),
    );
    s.postern.validator.body('https://postern.dev/schemas/app.json#/$defs/PasskeyList', list);
    expect(list.passkeys.map((k) => k.name)).to.deep.equal(['Laptop', 'Phone']);
    expect(list.passkeys[1]!.lastUsedAt).to.be.a('string');

    // Someone else's passkey is not found; nor is a malformed id.
    const other = await enrolled();
    await expectError(await call(`${s.app}/auth/passkeys/${phoneView.id}`, { method: 'DELETE', session: other.signedIn.session }), 404);
    await expectError(await call(`${s.app}/auth/passkeys/nope`, { method: 'DELETE', session: signedIn.session }), 404);

    expect((await call(`${s.app}/auth/passkeys/${phoneView.id}`, { method: 'DELETE', session: signedIn.session })).status).to.equal(204);
    await expectError(await call(`${s.app}/inboxes`, { session: phoneSession }), 401, /session ended/);
    expect((await call(`${s.app}/inboxes`, { session: signedIn.session })).status).to.equal(200);
    await expectError(await post('/auth/sign-in', { response: phone.signIn(await signInOptions()) }), 401, /unknown passkey/);
  });

  it('a member lists their sessions and ends another one', async () => {
    const member = await p.member();
    const { key, signedIn } = await enrolled(member);
    const second = (await json<SignedIn>(await post('/auth/sign-in', { response: key.signIn(await signInOptions()) }))).session;
    const res = await call(`${s.app}/auth/sessions`, { session: signedIn.session });
    const { sessions } = await json<{ sessions: Array<{ id: string; current: boolean; passkeyId: string | null }> }>(res);
    s.postern.validator.body('https://postern.dev/schemas/app.json#/$defs/SessionList', { sessions });
    expect(sessions).to.have.length(2);
    expect(sessions.filter((x) => x.current)).to.have.length(1);
    const other = sessions.find((x) => !x.current)!;
    expect(other.passkeyId).to.equal(signedIn.passkeyId);
    expect((await call(`${s.app}/auth/sessions/${other.id}`, { method: 'DELETE', session: signedIn.session })).status).to.equal(204);
    await expectError(await call(`${s.app}/inboxes`, { session: second }), 401, /session ended/);
    await expectError(await call(`${s.app}/auth/sessions/${other.id}`, { method: 'DELETE', session: signedIn.session }), 404);
    // Another member's session cannot be ended (nor told apart from a missing one).
    const stranger = await enrolled();
    const current = sessions.find((x) => x.current)!;
    await expectError(await call(`${s.app}/auth/sessions/${current.id}`, { method: 'DELETE', session: stranger.signedIn.session }), 404);
    expect((await call(`${s.app}/inboxes`, { session: signedIn.session })).status).to.equal(200);
  });

  it("names each session's device from the User-Agent it signed in with, and its last use", async () => {
    const member = await p.member();
    const { key, signedIn } = await enrolled(member);
    const iphone =
      'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1';
    const res = await call(`${s.app}/auth/sign-in`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'user-agent': iphone },
      body: JSON.stringify({ response: key.signIn(await signInOptions()) }),
    });
    expect(res.status, await res.clone().text()).to.equal(200);
    const phone = (await json<SignedIn>(res)).session;
    expect((await call(`${s.app}/inboxes`, { session: phone })).status).to.equal(200);
    const { sessions } = await json<{
      sessions: Array<{ id: string; current: boolean; device: string | null; createdAt: string; lastUsedAt: string | null }>;
    }>(await call(`${s.app}/auth/sessions`, { session: signedIn.session }));
    s.postern.validator.body('https://postern.dev/schemas/app.json#/$defs/SessionList', { sessions });
    const other = sessions.find((x) => !x.current)!;
    expect(other.device).to.equal('Safari on iPhone');
    expect(Date.parse(other.lastUsedAt!)).to.be.at.least(Date.parse(other.createdAt));
    // Node's fetch says "node": nothing a person would recognise, so no name rather than a wrong one.
    expect(sessions.find((x) => x.current)!.device).to.equal(null);
    // Only the short name is kept, never the header.
    const raw = JSON.stringify(await s.postern.store.passkeys.listLiveSessions(member, Date.now()));
    expect(raw).to.not.include('AppleWebKit');
  });

  it('management endpoints need a session', async () => {
    await expectError(await call(`${s.app}/auth/passkeys`), 401);
    await expectError(await call(`${s.app}/auth/sessions`), 401);
    await expectError(await post('/auth/passkeys/options'), 401);
    const token = await p.token(['messages:read']);
    await expectError(await call(`${s.app}/auth/passkeys`, { token }), 401);
  });
});

describe('passkeys: the per-address budget for the public ceremonies', () => {
  let s: TestServer;
  before(async () => {
    s = await startPostern({ POSTERN_APP_ORIGIN: ORIGIN, POSTERN_SIGN_IN_RATE_PER_MINUTE: '3', POSTERN_TRUST_PROXY: 'true' });
  });
  after(() => s.close());

  const from = (address: string, path: string, body?: unknown) =>
    call(`${s.app}${path}`, {
      method: 'POST',
      headers: { 'x-forwarded-for': address, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });

  it('answers 429 with Retry-After past POSTERN_SIGN_IN_RATE_PER_MINUTE, across the ceremony endpoints, for that address only', async () => {
    for (let i = 0; i < 2; i++) expect((await from('203.0.113.7', '/auth/sign-in/options')).status).to.equal(200);
    // Enrollment counts against the same budget, whatever its answer (an unknown invite here).
    expect((await from('203.0.113.7', '/auth/enroll/options', { invite: `inv_${'a'.repeat(26)}_${'b'.repeat(43)}` })).status)
      .to.be.within(400, 499)
      .and.not.equal(429);
    const refused = await from('203.0.113.7', '/auth/sign-in/options');
    await expectError(refused, 429);
    expect(Number(refused.headers.get('retry-after'))).to.be.within(1, 60);
    expect((await from('198.51.100.2', '/auth/sign-in/options')).status).to.equal(200);
    // Entries a client puts before the proxy's own are not its address.
    await expectError(await from('192.0.2.1, 203.0.113.7', '/auth/sign-in/options'), 429);
  });

  it('leaves the session endpoints alone', async () => {
    for (let i = 0; i < 4; i++) await expectError(await from('192.0.2.9', '/auth/sign-out'), 401);
  });
});

describe("the member's encrypted key (GET/PUT /me/key-backup)", () => {
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    s = await startPostern({ POSTERN_APP_ORIGIN: ORIGIN });
    p = await newProject(s);
  });
  after(() => s.close());

  const put = (session: string, body: unknown) =>
    call(`${s.app}/me/key-backup`, { method: 'PUT', session, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  it('stores the blob as sent, versioned: a write over a version the writer has not seen is a 409', async () => {
    const session = await p.session();
    await expectError(await call(`${s.app}/me/key-backup`, { session }), 404, /no encrypted key/);
    const first = await put(session, { blob: 'b3BhcXVl', replaces: 0 });
    expect(first.status).to.equal(200);
    expect((await json<{ version: number }>(first)).version).to.equal(1);
    await expectError(await put(session, { blob: 'c2Vjb25k', replaces: 0 }), 409);
    const second = await put(session, { blob: 'c2Vjb25k', replaces: 1 });
    expect((await json<{ version: number }>(second)).version).to.equal(2);
    await expectError(await put(session, { blob: 'dGhpcmQ', replaces: 1 }), 409);
    const got = await json<{ blob: string; version: number; updatedAt: string }>(await call(`${s.app}/me/key-backup`, { session }));
    s.postern.validator.body('https://postern.dev/schemas/app.json#/$defs/KeyBackup', got);
    expect(got).to.include({ blob: 'c2Vjb25k', version: 2 });
    // Each member has their own.
    const otherMember = await p.member();
    const other = await p.session({ memberId: otherMember });
    await expectError(await call(`${s.app}/me/key-backup`, { session: other }), 404);
  });

  it('is bounded in size and shape, and for sessions only', async () => {
    const session = await p.session({ memberId: await p.member() });
    await expectError(await put(session, { blob: 'A'.repeat(65537), replaces: 0 }), 400, /blob/);
    await expectError(await put(session, { blob: 'A'.repeat(200_000), replaces: 0 }), 413);
    await expectError(await put(session, { blob: 'not base64url!', replaces: 0 }), 400, /blob/);
    await expectError(await put(session, { blob: 'AAAA' }), 400, /replaces/);
    await expectError(await put(session, { blob: 'AAAA', replaces: -1 }), 400);
    expect((await put(session, { blob: 'A'.repeat(65536), replaces: 0 })).status).to.equal(200);
    await expectError(await call(`${s.app}/me/key-backup`), 401);
    const token = await p.token(['messages:read']);
    await expectError(await call(`${s.base}/me/key-backup`, { token }), 404);
  });
});

describe('re-authentication: replacing the key (PUT /me/key) and adding a passkey need a fresh passkey assertion', () => {
  let s: TestServer;
  let p: TestProject;
  let logToken: string;

  before(async () => {
    s = await startPostern({ POSTERN_APP_ORIGIN: ORIGIN, POSTERN_SIGN_IN_RATE_PER_MINUTE: '0', POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    logToken = await p.token(['events:read', 'project:read']);
  });
  after(() => s.close());

  const post = (path: string, body: unknown, session?: string) =>
    call(`${s.app}${path}`, {
      method: 'POST',
      ...(session ? { session } : {}),
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const putKey = (session: string, publicKey: string, reauth?: unknown) =>
    call(`${s.app}/me/key`, {
      method: 'PUT',
      session,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ publicKey, ...(reauth ? { reauth } : {}) }),
    });
  const storedKey = async (memberId: string) => (await s.postern.store.keys.getMemberKey(memberId))?.fingerprint;
  const newKey = async () => {
    const { armoredPublic, privateKey } = await memberKeyPair();
    return { armored: armoredPublic, fingerprint: privateKey.getFingerprint().toUpperCase() };
  };

  /** The project log as a project:read token reads it: this member's events of `type`. */
  async function logged(
    type: string,
    memberId: string,
  ): Promise<Array<{ actor: string; subject?: string; data: Record<string, unknown> }>> {
    const res = await call(`${s.base}/events?types=${type}&limit=500`, { token: logToken });
    expect(res.status, await res.clone().text()).to.equal(200);
    const { events } = await json<{ events: Array<{ actor: string; subject?: string; data: Record<string, unknown> }> }>(res);
    return events.filter((e) => e.data.memberId === memberId);
  }

  /** A clock an hour behind on the same store: what it issues is already stale for the server. */
  const pastPasskeys = () => {
    const { passkeys, directory } = s.postern.store;
    return new Passkeys(passkeys, directory, {
      events: s.postern.events,
      origin: ORIGIN,
      rpName: 'Postern',
      sessionTtlSeconds: 2 * 3600,
      inviteTtlSeconds: 60,
      now: () => Date.now() - 3_600_000,
    });
  };

  async function enrolled(memberId: string): Promise<{ key: SoftPasskey; session: string; passkeyId: string }> {
    const { link } = await s.postern.passkeys.invite(memberId);
    const invite = new URL(link).hash.replace('#enroll=', '');
    const options = await json<{ publicKey: { challenge: string; user: { id: string } } }>(await post('/auth/enroll/options', { invite }));
    const key = new SoftPasskey(ORIGIN);
    const res = await post('/auth/enroll', { invite, name: 'Laptop', response: key.register(options.publicKey) });
    expect(res.status, await res.clone().text()).to.equal(201);
    const signedIn = await json<SignedIn>(res);
    return { key, session: signedIn.session, passkeyId: signedIn.passkeyId };
  }

  async function reauthOptions(session: string, operation: string) {
    const res = await post('/me/reauth/options', { operation }, session);
    expect(res.status, await res.clone().text()).to.equal(200);
    return (await json<{ publicKey: { challenge: string; allowCredentials: Array<{ id: string }>; userVerification: string } }>(res))
      .publicKey;
  }

  async function addOptions(session: string) {
    const res = await post('/auth/passkeys/options', {}, session);
    expect(res.status, await res.clone().text()).to.equal(200);
    return (await json<{ publicKey: { challenge: string; user: { id: string } } }>(res)).publicKey;
  }

  it('the first key rides on the fresh sign-in; replacing it needs an assertion for replace-key, used once; both are in the project log', async () => {
    const member = await p.member();
    const { key, session, passkeyId } = await enrolled(member);
    const first = await newKey();
    const set = await putKey(session, first.armored);
    expect(set.status, await set.clone().text()).to.equal(200);
    const [firstSet, ...more] = await logged('access.key.set', member);
    expect(more).to.deep.equal([]);
    expect(firstSet).to.deep.include({
      actor: member,
      subject: member,
      data: { memberId: member, fingerprint: first.fingerprint, confirmedBy: 'fresh-session', passkeyId },
    });
    // The same key again changes nothing: no confirmation, no event.
    expect((await putKey(session, first.armored)).status).to.equal(200);

    // A stolen session replacing the key: refused, and the key stays.
    const second = await newKey();
    await expectError(await putKey(session, second.armored), 403, /re-authentication required.*replace-key/);
    // An assertion made for another operation does not do.
    const forAdding = key.signIn(await reauthOptions(session, 'add-passkey'));
    await expectError(await putKey(session, second.armored, forAdding), 403, /another operation \(add-passkey\)/);
    // A sign-in assertion is not one either.
    const signInOptions = await json<{ publicKey: { challenge: string } }>(await post('/auth/sign-in/options', {}));
    await expectError(await putKey(session, second.armored, key.signIn(signInOptions.publicKey)), 403, /another ceremony \(sign-in\)/);
    expect(await storedKey(member)).to.equal(first.fingerprint);
    expect(await logged('access.key.set', member)).to.have.length(1);

    const options = await reauthOptions(session, 'replace-key');
    expect(options.userVerification).to.equal('required');
    expect(options.allowCredentials.map((c) => c.id)).to.deep.equal([key.id]);
    const reauth = key.signIn(options);
    const replaced = await putKey(session, second.armored, reauth);
    expect(replaced.status, await replaced.clone().text()).to.equal(200);
    expect((await json<{ fingerprint: string }>(replaced)).fingerprint).to.equal(second.fingerprint);
    expect(await storedKey(member)).to.equal(second.fingerprint);
    const events = await logged('access.key.set', member);
    expect(events.map((e) => e.data)).to.deep.equal([
      { memberId: member, fingerprint: first.fingerprint, confirmedBy: 'fresh-session', passkeyId },
      { memberId: member, fingerprint: second.fingerprint, previousFingerprint: first.fingerprint, confirmedBy: 'passkey', passkeyId },
    ]);
    // Single use: the same answer cannot replace the key again.
    const third = await newKey();
    await expectError(await putKey(session, third.armored, reauth), 403, /already answered/);
    expect(await storedKey(member)).to.equal(second.fingerprint);
  });

  it("refuses a stale challenge, another member's challenge or passkey, and an assertion without user verification", async () => {
    const member = await p.member();
    const { key, session } = await enrolled(member);
    const first = await newKey();
    expect((await putKey(session, first.armored)).status).to.equal(200);
    const second = await newKey();

    // Issued an hour ago: older than POSTERN_REAUTH_MAX_AGE (5 minutes by default).
    const stale = await pastPasskeys().reauthOptions(member, 'replace-key');
    await expectError(await putKey(session, second.armored, key.signIn(stale)), 403, /expired/);

    const other = await p.member();
    const stranger = await enrolled(other);
    // A challenge issued to another member, answered by that member's passkey.
    const theirs = stranger.key.signIn(await reauthOptions(stranger.session, 'replace-key'));
    await expectError(await putKey(session, second.armored, theirs), 403, /issued to another member/);
    // This member's challenge, answered by another member's passkey.
    const wrongKey = stranger.key.signIn(await reauthOptions(session, 'replace-key'));
    await expectError(await putKey(session, second.armored, wrongKey), 403, /not one of yours/);

    // The authenticator did not verify the user (no PIN, no biometrics): presence is not enough.
    key.verifiesUser = false;
    await expectError(await putKey(session, second.armored, key.signIn(await reauthOptions(session, 'replace-key'))), 403, /user.*verif/i);
    key.verifiesUser = true;

    // A malformed assertion is a 400, and an unknown operation too.
    await expectError(await putKey(session, second.armored, { id: 'x' }), 400, /reauth/);
    await expectError(await post('/me/reauth/options', { operation: 'become-admin' }, session), 400, /operation/);
    expect(await storedKey(member)).to.equal(first.fingerprint);
    expect(await logged('access.key.set', member)).to.have.length(1);
  });

  it('a first key from a session older than the window needs the assertion too', async () => {
    const member = await p.member();
    const { key } = await enrolled(member);
    // A session the passkey opened an hour ago (still alive).
    const past = pastPasskeys();
    const old = await past.signIn(key.signIn(await past.signInOptions()));
    const mine = await newKey();
    await expectError(await putKey(old.session, mine.armored), 403, /re-authentication required/);
    expect(await storedKey(member)).to.equal(undefined);
    const ok = await putKey(old.session, mine.armored, key.signIn(await reauthOptions(old.session, 'replace-key')));
    expect(ok.status, await ok.clone().text()).to.equal(200);
    expect((await logged('access.key.set', member)).map((e) => e.data)).to.deep.equal([
      { memberId: member, fingerprint: mine.fingerprint, confirmedBy: 'passkey', passkeyId: old.passkeyId },
    ]);
  });

  it('adding a passkey needs an assertion for add-passkey, used once; every passkey added is in the project log', async () => {
    const member = await p.member();
    const { key, session, passkeyId } = await enrolled(member);
    expect((await logged('access.passkey.added', member)).map((e) => e.data)).to.deep.equal([
      { memberId: member, passkeyId, name: 'Laptop', via: 'invite' },
    ]);

    const phone = new SoftPasskey(ORIGIN);
    await expectError(
      await post('/auth/passkeys', { name: 'Phone', response: phone.register(await addOptions(session)) }, session),
      403,
      /re-authentication required.*add-passkey/,
    );
    const forKey = key.signIn(await reauthOptions(session, 'replace-key'));
    await expectError(
      await post('/auth/passkeys', { name: 'Phone', response: phone.register(await addOptions(session)), reauth: forKey }, session),
      403,
      /another operation \(replace-key\)/,
    );
    // (Asked for last: a new challenge stored drops the expired ones, and the answer would be "unknown".)
    const response = phone.register(await addOptions(session));
    const stale = key.signIn(await pastPasskeys().reauthOptions(member, 'add-passkey'));
    await expectError(await post('/auth/passkeys', { name: 'Phone', response, reauth: stale }, session), 403, /expired/);
    expect((await json<{ passkeys: unknown[] }>(await call(`${s.app}/auth/passkeys`, { session }))).passkeys).to.have.length(1);

    const reauth = key.signIn(await reauthOptions(session, 'add-passkey'));
    const added = await post('/auth/passkeys', { name: 'Phone', response: phone.register(await addOptions(session)), reauth }, session);
    expect(added.status, await added.clone().text()).to.equal(201);
    const { id } = await json<{ id: string }>(added);
    expect((await logged('access.passkey.added', member)).map((e) => e.data)).to.deep.equal([
      { memberId: member, passkeyId, name: 'Laptop', via: 'invite' },
      { memberId: member, passkeyId: id, name: 'Phone', via: 'session', confirmedWith: passkeyId },
    ]);
    const tablet = new SoftPasskey(ORIGIN);
    await expectError(
      await post('/auth/passkeys', { name: 'Tablet', response: tablet.register(await addOptions(session)), reauth }, session),
      403,
      /already answered/,
    );
    // The passkey added confirms later operations like the first one.
    const fromPhone = phone.signIn(await reauthOptions(session, 'add-passkey'));
    expect(
      (await post('/auth/passkeys', { name: 'Tablet', response: tablet.register(await addOptions(session)), reauth: fromPhone }, session))
        .status,
    ).to.equal(201);
  });

  it('POST /me/reauth/options is for sessions of members who have a passkey', async () => {
    await expectError(await post('/me/reauth/options', { operation: 'replace-key' }), 401);
    const token = await p.token(['messages:read']);
    await expectError(
      await call(`${s.app}/me/reauth/options`, {
        method: 'POST',
        token,
        headers: { 'content-type': 'application/json' },
        body: '{"operation":"replace-key"}',
      }),
      401,
    );
    // A staff-issued session of a member who never enrolled: nothing to confirm with.
    const staffSession = await p.session({ memberId: await p.member() });
    await expectError(await post('/me/reauth/options', { operation: 'add-passkey' }, staffSession), 409, /none/);
    await expectError(await post('/me/reauth/options', {}, staffSession), 400, /operation/);
  });
});
