// Webhook endpoints over HTTP (docs/webhooks.md, "Endpoints"): created, listed, changed,
// removed and their secrets rotated by the token that made them; validated (https only, GET
// /events' type syntax without audit-only types, the token's own inboxes); and the secret shown
// once, kept only sealed.
import { expect } from 'chai';
import { Webhook as Verifier } from 'standardwebhooks';
import type { Webhook, WebhookCreated, WebhookList, WebhookSecret } from '../../schemas/wire.ts';
import { MasterKey } from '../../lib/crypto/master-key.ts';
import type { Poster } from '../../lib/webhooks/dispatcher.ts';
import { WebhookEndpoints } from '../../lib/webhooks/endpoints.ts';
import { signedHeaders, webhookBody } from '../../lib/webhooks/signature.ts';
import {
  call,
  expectError,
  json,
  newProject,
  startPostern,
  TEST_MASTER_KEY,
  type TestProject,
  type TestServer,
} from '../helpers/harness.ts';

const SCHEMA = 'https://postern.dev/schemas/webhooks.json#/$defs/';
const MANAGE = ['webhooks:write', 'events:read'];

/** Signing only: nothing here sends. */
const refuseAll: Poster = async () => ({ ok: false, error: 'not in this test', ms: 0 });

describe('webhook endpoints (POST/GET/PATCH/DELETE /webhooks, rotate-secret)', function () {
  let s: TestServer;
  let dev: TestServer;
  let p: TestProject;
  let token: string;

  before(async () => {
    s = await startPostern();
    dev = await startPostern({ POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1' });
    p = await newProject(s);
    token = await p.token(MANAGE);
  });
  after(async () => {
    await s?.close();
    await dev?.close();
  });

  const send = (server: TestServer, method: string, path: string, tok: string, body?: unknown) =>
    call(`${server.base}${path}`, {
      method,
      token: tok,
      ...(body !== undefined ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
    });

  async function create(body: unknown, tok = token, server = s): Promise<WebhookCreated> {
    const res = await send(server, 'POST', '/webhooks', tok, body);
    expect(res.status, await res.clone().text()).to.equal(201);
    return server.postern.validator.body<WebhookCreated>(`${SCHEMA}WebhookCreated`, await json(res));
  }

  it("creates an endpoint: its secret once, never again; it starts at the log's head", async () => {
    const before = await s.postern.store.events.lastPosition();
    const made = await create({
      url: 'https://hooks.example.org/postern',
      types: ['message.*', 'ext.order.shipped'],
      description: 'orders',
    });
    expect(made.id).to.match(/^whk_[0-9A-Z]{26}$/);
    expect(made.secret).to.match(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(made.secret.slice('whsec_'.length), 'base64')).to.have.length(32);
    expect(made).to.include({
      url: 'https://hooks.example.org/postern',
      description: 'orders',
      enabled: true,
      disabledAt: null,
      previousSecretExpiresAt: null,
    });
    expect(made.types).to.deep.equal(['message.*', 'ext.order.shipped']);
    expect(made.inboxes).to.equal(null);

    const res = await send(s, 'GET', `/webhooks/${made.id}`, token);
    const got = s.postern.validator.body<Webhook>(`${SCHEMA}Webhook`, await json(res));
    const { secret, ...rest } = made;
    expect(got).to.deep.equal(rest);
    expect(JSON.stringify(got)).not.to.include(secret.slice('whsec_'.length));
    const list = s.postern.validator.body<WebhookList>(`${SCHEMA}WebhookList`, await json(await send(s, 'GET', '/webhooks', token)));
    expect(list.webhooks.map((w) => w.id)).to.include(made.id);
    expect(JSON.stringify(list)).not.to.include(secret.slice('whsec_'.length));

    const stored = (await s.postern.store.webhooks.get(p.projectId, made.id))!;
    expect(stored.position)
      .to.be.at.least(before)
      .and.at.most(await s.postern.store.events.lastPosition());
  });

  it('keeps the secret only sealed with the master key', async () => {
    const made = await create({ url: 'https://hooks.example.org/sealed' });
    const key = Buffer.from(made.secret.slice('whsec_'.length), 'base64');
    const stored = (await s.postern.store.webhooks.get(p.projectId, made.id))!;
    expect(stored.secretSealed.includes(key)).to.equal(false);
    expect(stored.secretSealed.toString('latin1')).not.to.include(made.secret.slice('whsec_'.length));
    expect(JSON.stringify(stored)).not.to.include(made.secret.slice('whsec_'.length));
    // The master key opens it to the secret shown.
    const endpoints = new WebhookEndpoints({
      store: s.postern.store.webhooks,
      access: s.postern.access,
      masterKey: MasterKey.parse(TEST_MASTER_KEY),
      head: async () => 0,
      allowHttpLoopback: false,
      cursors: () => s.postern.events.cursors(),
      post: refuseAll,
      testsPerMinute: 5,
    });
    expect(endpoints.signingSecrets(stored)).to.deep.equal([made.secret]);
  });

  it('changes an endpoint, disables and enables it, and removes it', async () => {
    const made = await create({ url: 'https://hooks.example.org/a', types: ['message.received'] });
    const inbox = await p.inbox();
    const patched = s.postern.validator.body<Webhook>(
      `${SCHEMA}Webhook`,
      await json(
        await send(s, 'PATCH', `/webhooks/${made.id}`, token, {
          url: 'https://hooks.example.org/b',
          types: null,
          inboxes: [inbox.id],
          description: 'moved',
        }),
      ),
    );
    expect(patched).to.include({ id: made.id, url: 'https://hooks.example.org/b', description: 'moved', enabled: true });
    expect(patched.types).to.equal(null);
    expect(patched.inboxes).to.deep.equal([inbox.id]);

    const off = await json<Webhook>(await send(s, 'PATCH', `/webhooks/${made.id}`, token, { enabled: false }));
    expect(off.enabled).to.equal(false);
    expect(off.disabledAt).to.be.a('string');
    expect(off.disabledReason).to.be.a('string');
    expect(off.url).to.equal('https://hooks.example.org/b');
    // Disabling again keeps when and why it was first disabled; an edit leaves it disabled.
    const again = await json<Webhook>(await send(s, 'PATCH', `/webhooks/${made.id}`, token, { enabled: false, description: 'still off' }));
    expect(again).to.include({ enabled: false, disabledAt: off.disabledAt, description: 'still off' });
    const on = await json<Webhook>(await send(s, 'PATCH', `/webhooks/${made.id}`, token, { enabled: true }));
    expect(on).to.include({ enabled: true, disabledAt: null, disabledReason: null, description: 'still off' });
    // A change refused in part writes nothing.
    await expectError(
      await send(s, 'PATCH', `/webhooks/${made.id}`, token, { url: 'https://hooks.example.org/c', types: ['access.content.read'] }),
      422,
    );
    expect((await json<Webhook>(await send(s, 'GET', `/webhooks/${made.id}`, token))).url).to.equal('https://hooks.example.org/b');

    await expectError(await send(s, 'PATCH', `/webhooks/${made.id}`, token, {}), 400);
    const gone = await send(s, 'DELETE', `/webhooks/${made.id}`, token);
    expect(gone.status).to.equal(204);
    await expectError(await send(s, 'GET', `/webhooks/${made.id}`, token), 404);
    await expectError(await send(s, 'DELETE', `/webhooks/${made.id}`, token), 404);
    expect(await s.postern.store.webhooks.get(p.projectId, made.id)).to.equal(null);
  });

  it('rotates the secret: a new one, shown once, and the old one signs for 24 hours more', async () => {
    const made = await create({ url: 'https://hooks.example.org/rotate' });
    const at = Date.now();
    const res = await send(s, 'POST', `/webhooks/${made.id}/rotate-secret`, token);
    expect(res.status).to.equal(200);
    const rotated = s.postern.validator.body<WebhookSecret>(`${SCHEMA}WebhookSecret`, await json(res));
    expect(rotated.secret)
      .to.match(/^whsec_/)
      .and.not.equal(made.secret);
    const until = Date.parse(rotated.previousSecretExpiresAt);
    expect(until).to.be.within(at + 24 * 3600_000 - 1000, Date.now() + 24 * 3600_000 + 1000);
    const got = await json<Webhook>(await send(s, 'GET', `/webhooks/${made.id}`, token));
    expect(got.previousSecretExpiresAt).to.equal(rotated.previousSecretExpiresAt);
    expect(JSON.stringify(got)).not.to.include(rotated.secret.slice('whsec_'.length));

    const stored = (await s.postern.store.webhooks.get(p.projectId, made.id))!;
    for (const secret of [made.secret, rotated.secret]) {
      const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
      expect(stored.secretSealed.includes(key)).to.equal(false);
      expect(stored.previousSecretSealed!.includes(key)).to.equal(false);
    }
    const endpoints = new WebhookEndpoints({
      store: s.postern.store.webhooks,
      access: s.postern.access,
      masterKey: MasterKey.parse(TEST_MASTER_KEY),
      head: async () => 0,
      allowHttpLoopback: false,
      cursors: () => s.postern.events.cursors(),
      post: refuseAll,
      testsPerMinute: 5,
    });
    expect(endpoints.signingSecrets(stored)).to.deep.equal([rotated.secret, made.secret]);
    // What the stored secrets sign verifies, by the reference library, with either secret shown.
    const body = webhookBody('message.received', new Date(), { n: 1 });
    const headers = signedHeaders(endpoints.signingSecrets(stored), 'evt_01J0000000000000000000000Z', body);
    for (const secret of [made.secret, rotated.secret])
      expect(new Verifier(secret).verify(body, { ...headers })).to.deep.include({ type: 'message.received' });
    expect(() => new Verifier(`whsec_${Buffer.alloc(32, 7).toString('base64')}`).verify(body, { ...headers })).to.throw();
    // Once the overlap is over only the new secret signs.
    expect(endpoints.signingSecrets(stored, until + 1)).to.deep.equal([rotated.secret]);
  });

  it('refuses urls that are not https://, unless http:// to loopback is allowed for development', async () => {
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'not a url' }), 400);
    await expectError(await send(s, 'POST', '/webhooks', token, {}), 400);
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'ftp://hooks.example.org/' }), 422);
    await expectError(
      await send(s, 'POST', '/webhooks', token, { url: 'http://127.0.0.1:8080/hook' }),
      422,
      /https:\/\/.*POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK/,
    );
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'https://user:pass@hooks.example.org/' }), 422, /credentials/);

    const q = await newProject(dev);
    const devToken = await q.token(MANAGE);
    for (const url of ['http://127.0.0.1:8080/hook', 'http://localhost:9000/', 'http://[::1]:8080/x']) {
      expect((await create({ url }, devToken, dev)).url).to.equal(new URL(url).toString());
    }
    for (const url of ['http://hooks.example.org/', 'http://10.0.0.1/', 'http://192.168.1.1/', 'http://[::ffff:10.0.0.1]/']) {
      await expectError(await send(dev, 'POST', '/webhooks', devToken, { url }), 422, /loopback/);
    }
    // A change is checked as a creation is.
    const made = await create({ url: 'https://hooks.example.org/x' });
    await expectError(await send(s, 'PATCH', `/webhooks/${made.id}`, token, { url: 'http://127.0.0.1/' }), 422);
  });

  it("takes types in GET /events' syntax, unknown ones too, and refuses audit-only types", async () => {
    const made = await create({ url: 'https://hooks.example.org/types', types: ['ext.shop.order_shipped', 'mail.*', 'message.received'] });
    expect(made.types).to.deep.equal(['ext.shop.order_shipped', 'mail.*', 'message.received']);
    await expectError(
      await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', types: ['access.content.read'] }),
      422,
      /audit-only/,
    );
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', types: ['Message Received'] }), 400);
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', types: ['a,b'] }), 400);
    await expectError(await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', types: [] }), 400);
    await expectError(
      await send(s, 'PATCH', `/webhooks/${made.id}`, token, { types: ['message.*', 'access.content.read'] }),
      422,
      /audit-only/,
    );
  });

  it('takes only inboxes the token may read', async () => {
    const mine = await p.inbox();
    const other = await p.inbox();
    const narrowed = await p.token(MANAGE, { inboxes: [mine.id] });
    const made = await create({ url: 'https://hooks.example.org/inboxes', inboxes: [mine.id] }, narrowed);
    expect(made.inboxes).to.deep.equal([mine.id]);
    await expectError(
      await send(s, 'POST', '/webhooks', narrowed, { url: 'https://hooks.example.org/', inboxes: [other.id] }),
      422,
      /inbox/,
    );
    await expectError(await send(s, 'PATCH', `/webhooks/${made.id}`, narrowed, { inboxes: [mine.id, other.id] }), 422, /inbox/);
    // Another project's inbox, and one that does not exist, get the same answer.
    const q = await newProject(s);
    const theirs = await q.inbox();
    const e1 = await expectError(
      await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', inboxes: [theirs.id] }),
      422,
    );
    const e2 = await expectError(
      await send(s, 'POST', '/webhooks', token, { url: 'https://hooks.example.org/', inboxes: ['ibx_01J0000000000000000000000Z'] }),
      422,
    );
    expect(e1.replace(theirs.id, '')).to.equal(e2.replace('ibx_01J0000000000000000000000Z', ''));
  });

  it("needs webhooks:write (and events:read to create); another project's or token's endpoint is not found", async () => {
    const made = await create({ url: 'https://hooks.example.org/mine' });
    const reader = await p.token(['events:read', 'messages:read']);
    await expectError(await send(s, 'GET', '/webhooks', reader), 403, /webhooks:write/);
    await expectError(await send(s, 'POST', '/webhooks', reader, { url: 'https://hooks.example.org/' }), 403, /webhooks:write/);
    await expectError(await send(s, 'GET', `/webhooks/${made.id}`, reader), 403);
    const writeOnly = await p.token(['webhooks:write']);
    await expectError(await send(s, 'POST', '/webhooks', writeOnly, { url: 'https://hooks.example.org/' }), 403, /events:read/);

    const q = await newProject(s);
    const theirs = await q.token(MANAGE);
    const sibling = await p.token(MANAGE);
    for (const tok of [theirs, sibling]) {
      await expectError(await send(s, 'GET', `/webhooks/${made.id}`, tok), 404);
      await expectError(await send(s, 'PATCH', `/webhooks/${made.id}`, tok, { url: 'https://attacker.example/' }), 404);
      await expectError(await send(s, 'POST', `/webhooks/${made.id}/rotate-secret`, tok), 404);
      await expectError(await send(s, 'DELETE', `/webhooks/${made.id}`, tok), 404);
      expect((await json<WebhookList>(await send(s, 'GET', '/webhooks', tok))).webhooks.map((w) => w.id)).not.to.include(made.id);
    }
    await expectError(await send(s, 'GET', '/webhooks/whk_nope', token), 404);
    expect((await json<Webhook>(await send(s, 'GET', `/webhooks/${made.id}`, token))).url).to.equal('https://hooks.example.org/mine');
  });
});
