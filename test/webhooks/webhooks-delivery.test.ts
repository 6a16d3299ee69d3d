// Webhook deliveries (docs/webhooks.md) against a real receiver verifying
// with `standardwebhooks`: mail from SMTP and a mail app's change reach it, filters and the
// token's reach hold, retries (a shortened schedule) bring everything once the receiver is back,
// Retry-After is heeded, 410 and failing for too long disable, a revoked token stops its
// endpoints, replay re-sends, rotation signs with both secrets, and with several processes each
// event is sent once and a `kill -9` loses none.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { openStore } from '../../adapters/store/open.ts';
import { loadConfig } from '../../lib/config.ts';
import type { WebhookSecret, WebhookTestResult } from '../../schemas/wire.ts';
import { call, envVars, json, mailEnv, newStore, startPostern, type TestServer } from '../helpers/harness.ts';
import { append, deliver, mailApp, until } from '../helpers/mail-fixtures.ts';
import { freePort, runPostern, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { Receiver } from '../helpers/webhook-receiver.ts';
import { api, FAST, project, receiverPool, SCHEMA } from '../helpers/webhook-api.ts';

describe('webhook deliveries', function () {
  this.timeout(60_000);
  let s: TestServer;
  const { receiver, close: closeReceivers } = receiverPool();

  before(async () => {
    s = await startPostern(FAST);
  });
  after(async () => {
    await closeReceivers();
    await s?.close();
  });

  it('sends an event signed (Standard Webhooks), its data as GET /events serves it with its cursor, webhook-id the event id', async () => {
    const { a } = await project(s);
    const r = await receiver();
    const hook = await a.hook(r);
    const [id] = await a.ship(1);
    const got = await until('the event at the receiver', async () => r.received.find((x) => x.id === id));
    expect(r.unverified).to.deep.equal([]);
    expect(got.type).to.equal('ext.order.shipped');
    const [served] = await a.events(`types=ext.order.shipped`);
    const { cursor, ...event } = got.data;
    expect(event).to.deep.equal(served);
    expect(JSON.parse(got.body).timestamp).to.equal(served!.time);
    // The cursor resumes GET /events right after it.
    expect(await a.events(`after=${encodeURIComponent(String(cursor))}`)).to.deep.equal([]);
    const [more] = await a.ship(1);
    expect((await a.events(`after=${encodeURIComponent(String(cursor))}`)).map((e) => e.id)).to.deep.equal([more]);
    const delivered = await until('the outcome written', async () =>
      (await a.deliveries(hook.id)).deliveries.find((d) => d.eventId === id && d.state === 'delivered'),
    );
    expect(delivered).to.deep.include({
      type: 'ext.order.shipped',
      cursor,
      attempts: 1,
      lastStatus: 204,
      lastError: null,
      nextAttemptAt: null,
    });
  });

  it('mail reaches it: a message delivered by SMTP, then a mail app flagging it', async () => {
    const { p, a } = await project(s);
    const inbox = await p.inbox();
    const reader = await p.token(['messages:read']);
    const r = await receiver();
    await a.hook(r, { types: ['message.*'], inboxes: [inbox.id] });
    const read = async () => expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: reader })).status).to.equal(200);
    await read();
    await deliver(inbox.address, { subject: 'webhook me' });
    const added = await until(
      'message.added from SMTP at the receiver',
      async () => {
        await read();
        return r.received.find((x) => x.type === 'message.added');
      },
      30_000,
    );
    const msgId = String((added.data.data as { msgId: string }).msgId);
    const app = await mailApp(inbox);
    try {
      await app.mailboxOpen('INBOX');
      await app.messageFlagsAdd(String((added.data.data as { uid: number }).uid), ['\\Flagged'], { uid: true });
    } finally {
      await app.logout();
    }
    await read();
    const flagged = await until('message.flags at the receiver', async () => r.received.find((x) => x.type === 'message.flags'));
    expect(flagged.data.data).to.deep.include({ msgId, flags: ['flagged'] });
    expect(flagged.data.containerid).to.equal(inbox.id);
    expect(r.unverified).to.deep.equal([]);
  });

  it('sends only the types and inboxes it filters for, and only what its token may read', async () => {
    const { p, a } = await project(s);
    const reader = await p.token(['messages:read']);
    const inboxA = await p.inbox();
    const inboxB = await p.inbox();
    // Narrowed to inbox A, without project:read: neither B's events nor project-level ones.
    const narrow = await p.token(['webhooks:write', 'events:read'], { inboxes: [inboxA.id] });
    const rNarrow = await receiver();
    const hookNarrow = await api(s, narrow).hook(rNarrow);
    const rTypes = await receiver();
    const hookTypes = await a.hook(rTypes, { types: ['message.*'], inboxes: [inboxB.id] });
    const labels = async (inbox: { id: string }) =>
      expect((await call(`${s.base}/inboxes/${inbox.id}/labels`, { token: reader })).status).to.equal(200);
    await labels(inboxA);
    await labels(inboxB);
    const appA = await mailApp(inboxA);
    const appB = await mailApp(inboxB);
    try {
      await append(appB, 'INBOX', { subject: 'to B' });
      await labels(inboxB);
      const [shipped] = await a.ship(1);
      await append(appA, 'INBOX', { subject: 'to A' });
      await labels(inboxA);
      const inA = await until("A's message at the narrow receiver", async () => rNarrow.received.find((x) => x.type === 'message.added'));
      expect(inA.data.containerid).to.equal(inboxA.id);
      const inB = await until("B's message at the typed receiver", async () => rTypes.received.find((x) => x.type === 'message.added'));
      expect(inB.data.containerid).to.equal(inboxB.id);
      // Everything up to A's message has been judged for the narrow endpoint (the log is read in
      // order): its deliveries say what was kept. The typed one reads only B's events.
      const narrowKept = (await api(s, narrow).deliveries(hookNarrow.id)).deliveries.map((d) => d.type);
      expect(narrowKept).to.deep.equal(['message.added']);
      const typedKept = (await a.deliveries(hookTypes.id)).deliveries;
      expect(typedKept.map((d) => d.eventId)).to.deep.equal([inB.id]);
      expect(rNarrow.ids()).to.not.include(shipped);
      expect(rTypes.ids()).to.not.include(shipped);
    } finally {
      await appA.logout();
      await appB.logout();
    }
  });

  it('a receiver down for a while gets everything once it is back; the deliveries list shows the attempts and pages', async () => {
    const { a } = await project(s);
    const r = await receiver();
    let down = true;
    r.answer = () => (down ? { status: 503 } : { status: 204 });
    const hook = await a.hook(r);
    const ids = await a.ship(3);
    await until('every event tried twice', async () => ids.every((id) => r.received.filter((x) => x.id === id).length >= 2));
    const pending = await a.deliveries(hook.id);
    for (const d of pending.deliveries) {
      expect(d.state).to.equal('pending');
      expect(d.lastStatus).to.equal(503);
      expect(d.lastError).to.match(/503/);
      expect(d.nextAttemptAt).to.be.a('string');
    }
    down = false;
    await until('every event delivered', async () => ids.every((id) => r.delivered.has(id)));
    // Each retry is the same message: same id, same body.
    for (const id of ids) expect(new Set(r.received.filter((x) => x.id === id).map((x) => x.body)).size).to.equal(1);
    const settled = await until('the outcomes written', async () => {
      const l = await a.deliveries(hook.id);
      return l.deliveries.every((d) => d.state === 'delivered') ? l : null;
    });
    expect(settled.deliveries.map((d) => d.eventId)).to.deep.equal([...ids].reverse());
    for (const d of settled.deliveries) {
      expect(d.attempts).to.be.at.least(3);
      expect(d).to.include({ lastStatus: 204, lastError: null, nextAttemptAt: null });
    }
    const first = await a.deliveries(hook.id, '?limit=2');
    expect(first.deliveries.map((d) => d.eventId)).to.deep.equal([ids[2], ids[1]]);
    const rest = await a.deliveries(hook.id, `?limit=2&before=${encodeURIComponent(first.next!)}`);
    expect(rest.deliveries.map((d) => d.eventId)).to.deep.equal([ids[0]]);
    expect(rest.next).to.equal(null);
    expect((await a.send('GET', `/webhooks/${hook.id}/deliveries?before=nonsense`)).status).to.equal(400);
  });

  it('heeds Retry-After on 429', async () => {
    const { a } = await project(s);
    const r = await receiver();
    let first = true;
    r.answer = () => {
      if (!first) return { status: 200 };
      first = false;
      return { status: 429, headers: { 'retry-after': '2' } };
    };
    await a.hook(r);
    const [id] = await a.ship(1);
    await until('the retry', async () => r.delivered.has(id!));
    const times = r.received.filter((x) => x.id === id).map((x) => x.at);
    expect(times).to.have.length(2);
    // The schedule says 300 ms; the receiver asked for 2 s.
    expect(times[1]! - times[0]!).to.be.at.least(1900);
  });

  it('410 disables the endpoint and records webhook.endpoint.disabled; enabling it sends what waited', async () => {
    const { a } = await project(s);
    const r = await receiver();
    let gone = true;
    r.answer = () => ({ status: gone ? 410 : 204 });
    const hook = await a.hook(r);
    const [id] = await a.ship(1);
    await until('the endpoint disabled', async () => !(await a.get(hook.id)).enabled);
    expect((await a.get(hook.id)).disabledReason).to.match(/410/);
    const [recorded] = await until('webhook.endpoint.disabled', async () => {
      const e = await a.events('types=webhook.endpoint.disabled');
      return e.length > 0 ? e : null;
    });
    expect(recorded!.data).to.deep.include({ webhookId: hook.id, reason: 'gone' });
    expect(recorded!.subject).to.equal(hook.id);
    const [later] = await a.ship(1);
    gone = false;
    const on = await a.send('PATCH', `/webhooks/${hook.id}`, { enabled: true });
    expect(on.status).to.equal(200);
    await until('both events delivered', async () => r.delivered.has(id!) && r.delivered.has(later!));
  });

  it('gives a delivery up when the schedule runs out, and disables an endpoint failing for POSTERN_WEBHOOK_DISABLE_AFTER', async () => {
    const own = await startPostern({ ...FAST, POSTERN_WEBHOOK_RETRY_SCHEDULE: '100ms,100ms', POSTERN_WEBHOOK_DISABLE_AFTER: '1s' });
    try {
      const { a } = await project(own);
      const r = await receiver();
      r.answer = () => ({ status: 500 });
      const hook = await a.hook(r);
      const [id] = await a.ship(1);
      const given = await until('the first delivery given up', async () =>
        (await a.deliveries(hook.id)).deliveries.find((d) => d.eventId === id && d.state === 'failed'),
      );
      expect(given).to.deep.include({ attempts: 3, lastStatus: 500, nextAttemptAt: null });
      expect(r.received.filter((x) => x.id === id)).to.have.length(3);
      expect((await a.get(hook.id)).enabled).to.equal(true);
      // A second spell of failures, the first still unbroken a second later: disabled.
      await until('a second past the first failure', async () => Date.now() - r.received[0]!.at > 1100);
      await a.ship(1);
      await until('the endpoint disabled', async () => !(await a.get(hook.id)).enabled);
      const [recorded] = await a.events('types=webhook.endpoint.disabled');
      expect(recorded!.data).to.deep.include({ webhookId: hook.id, reason: 'failing' });
      expect(recorded!.data!.detail).to.match(/500/);
    } finally {
      await own.close();
    }
  });

  it('stops the endpoints of a revoked token', async () => {
    const { p, a: writer } = await project(s);
    const owner = await p.token(['webhooks:write', 'events:read', 'project:read']);
    const r = await receiver();
    const hook = await api(s, owner).hook(r);
    const [before] = await writer.ship(1);
    await until('an event while the token lives', async () => r.delivered.has(before!));
    const tokenId = /^svc_(tok_[0-9A-Z]{26})_/.exec(owner)![1]!;
    await s.postern.admin.revokeToken(tokenId);
    // The dispatcher reads a token's standing at most a second old (docs/webhooks.md).
    await until('the standing it holds gone stale', async () => Date.now() - r.received.at(-1)!.at > 1100);
    const [after] = await writer.ship(1);
    await until('the endpoint disabled', async () => (await s.postern.store.webhooks.get(p.projectId, hook.id))!.disabledAt !== null);
    const [recorded] = await writer.events('types=webhook.endpoint.disabled');
    expect(recorded!.data).to.deep.include({ webhookId: hook.id, reason: 'token' });
    expect(r.ids()).to.not.include(after);
  });

  it('replay re-sends every event after a cursor', async () => {
    const { a } = await project(s);
    const r = await receiver();
    const hook = await a.hook(r);
    const ids = await a.ship(3);
    await until('three delivered', async () => ids.every((id) => r.delivered.has(id)));
    const cursor = r.received.find((x) => x.id === ids[0])!.data.cursor!;
    const res = await a.send('POST', `/webhooks/${hook.id}/replay`, { after: cursor });
    expect(res.status).to.equal(202);
    expect(await json(res)).to.deep.equal({ after: cursor });
    await until('the two after it sent again', async () => ids.slice(1).every((id) => r.received.filter((x) => x.id === id).length === 2));
    expect(r.received.filter((x) => x.id === ids[0])).to.have.length(1);
    expect((await a.send('POST', `/webhooks/${hook.id}/replay`, { after: 'not-a-cursor' })).status).to.equal(400);
    expect((await a.send('POST', `/webhooks/${hook.id}/replay`, {})).status).to.equal(400);
  });

  it('after a rotation both secrets sign each delivery', async () => {
    const { a } = await project(s);
    const r = await receiver();
    const hook = await a.hook(r);
    const res = await a.send('POST', `/webhooks/${hook.id}/rotate-secret`);
    const { secret } = await json<WebhookSecret>(res);
    r.secrets = [hook.secret, secret];
    const [id] = await a.ship(1);
    const got = await until('the event', async () => r.received.find((x) => x.id === id));
    expect(got.verifiedWith).to.deep.equal([0, 1]);
    expect(got.signature.split(' ')).to.have.length(2);
  });

  it('POST /test sends one signed webhook.test; an address not allowed is reported, not called', async () => {
    const { a } = await project(s);
    const r = await receiver();
    const hook = await a.hook(r);
    const res = await a.send('POST', `/webhooks/${hook.id}/test`);
    const result = s.postern.validator.body<WebhookTestResult>(`${SCHEMA}WebhookTestResult`, await json(res));
    expect(result).to.include({ delivered: true, status: 204, error: null });
    expect(r.received).to.have.length(1);
    expect(r.received[0]!).to.deep.include({ type: 'webhook.test', verifiedWith: [0] });
    // The same receiver from a server that does not allow loopback.
    const strict = await startPostern({ POSTERN_WEBHOOK_ALLOW_HTTP_LOOPBACK: '1' });
    try {
      const { a: sa } = await project(strict);
      const other = await sa.hook(r);
      const refused = await json<WebhookTestResult>(await sa.send('POST', `/webhooks/${other.id}/test`));
      expect(refused.delivered).to.equal(false);
      expect(refused.status).to.equal(null);
      expect(refused.error).to.match(/127\.0\.0\.1.*loopback/);
      // By name: refused without saying what the name resolved to (the check is no DNS oracle).
      const named = await sa.hook(r, { url: r.url.replace('127.0.0.1', 'localhost') });
      const hidden = await json<WebhookTestResult>(await sa.send('POST', `/webhooks/${named.id}/test`));
      expect(hidden).to.include({
        delivered: false,
        status: null,
        error: 'localhost resolves to an address Postern does not call (docs/webhooks.md)',
      });
      expect(r.received).to.have.length(1);
    } finally {
      await strict.close();
    }
  });
});

describe('webhook test sends and deletion', function () {
  this.timeout(60_000);
  let s: TestServer;
  const { receiver, close: closeReceivers } = receiverPool();
  before(async () => {
    // Attempts may take 10 s: a slow receiver's are cut short by the DELETE, not by the timeout.
    s = await startPostern({ ...FAST, POSTERN_WEBHOOK_TIMEOUT_MS: '10000', POSTERN_WEBHOOK_LEASE_MS: '20000' });
  });
  after(async () => {
    await closeReceivers();
    await s?.close();
  });

  it('POST /test: a few a minute per endpoint (429 with Retry-After), and a failure names no address', async () => {
    const { a } = await project(s);
    const r = await receiver();
    const hook = await a.hook(r);
    for (let i = 0; i < 5; i++) expect((await a.send('POST', `/webhooks/${hook.id}/test`)).status, `test ${i}`).to.equal(200);
    const limited = await a.send('POST', `/webhooks/${hook.id}/test`);
    expect(limited.status).to.equal(429);
    expect(Number(limited.headers.get('retry-after'))).to.be.within(1, 60);
    expect(((await limited.json()) as { error: string }).error).to.match(/at most 5 test sends per webhook a minute/);
    expect(r.received).to.have.length(5);
    // Another endpoint has its own budget; this one refuses to connect, and says so by the URL's host.
    const closed = await new Receiver().start();
    const url = closed.url.replace('127.0.0.1', 'localhost');
    await closed.close();
    const other = await a.hook(r, { url });
    const failed = await json<WebhookTestResult>(await a.send('POST', `/webhooks/${other.id}/test`));
    expect(failed.error).to.match(/^connecting to localhost failed: ECONNREFUSED$/);
  });

  it('DELETE stops its deliveries at once: attempts under way abandoned, none waiting sent', async () => {
    const { a } = await project(s);
    const slow = await receiver();
    slow.answer = () => ({ status: 200, delayMs: 5000 });
    const fast = await receiver();
    const hook = await a.hook(slow, { types: ['ext.*'] });
    await a.hook(fast, { types: ['ext.*'] });
    // More than its 8 at a time: some wait, leased, while 8 are under way.
    const shipped = await a.ship(20);
    await until('attempts under way', async () => slow.hangingCount >= 1);
    expect((await a.send('DELETE', `/webhooks/${hook.id}`)).status).to.equal(204);
    const answered = slow.delivered.size;
    // Cut short at once, not answered 5 s later.
    await until('attempts under way abandoned', async () => slow.hangingCount === 0, 2000);
    expect(slow.cutShort).to.be.at.least(1);
    expect(slow.delivered.size).to.equal(answered);
    const seen = slow.received.length;
    // The dispatcher goes on: the other endpoint gets a later event, and everything before it.
    const [later] = await a.ship(1);
    await until('the later event at the other endpoint', async () => [...shipped, later!].every((id) => fast.delivered.has(id)));
    expect(slow.received.length, 'attempts reaching the deleted endpoint after the DELETE').to.equal(seen);
    expect((await a.send('GET', `/webhooks/${hook.id}`)).status).to.equal(404);
  });
});

describe('webhook deliveries when the server stops', function () {
  this.timeout(60_000);

  it('abandons attempts a receiver leaves hanging and hands them back, instead of waiting out the timeout', async () => {
    // A store of the test's own, kept when the server closes, so what it left can be read after.
    const dir = mkdtempSync(join(tmpdir(), 'postern-webhooks-stop-'));
    const store = await newStore(dir);
    const own = await startPostern({ ...FAST, POSTERN_WEBHOOK_TIMEOUT_MS: '20000', POSTERN_WEBHOOK_LEASE_MS: '40000', ...store.env });
    const r = await new Receiver().start();
    let closed = false;
    try {
      r.answer = () => 'hang';
      const { p, a } = await project(own);
      const hook = await a.hook(r);
      const [id] = await a.ship(1);
      await until('the attempt under way', async () => r.hangingCount === 1);
      const started = Date.now();
      await own.close();
      closed = true;
      expect(Date.now() - started).to.be.below(10_000);
      // Released: pending as before the attempt, no attempt counted against the receiver.
      const reopened = await openStore(loadConfig(store.env));
      try {
        const [d] = await reopened.webhooks.deliveries(p.projectId, hook.id, null, 10);
        expect(d).to.deep.include({ eventId: id, state: 'pending', attempts: 0, lastError: null });
      } finally {
        await reopened.close();
      }
    } finally {
      if (!closed) await own.close();
      await r.close();
      await store.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('postern admin webhook', function () {
  this.timeout(120_000);
  let s: TestServer;
  before(async () => {
    s = await startPostern(FAST);
  });
  after(async () => {
    await s?.close();
  });

  it('lists every endpoint, and disables one: recorded, and its owner cannot enable it again (409)', async () => {
    const { p, a } = await project(s);
    const r = await new Receiver().start();
    try {
      const hook = await a.hook(r, { types: ['ext.*'] });
      const env = envVars(mailEnv(), s.storeEnv);
      const listed = await runPostern(['admin', 'webhook', 'list', '--project', p.projectId], env);
      expect(listed.code, listed.stderr).to.equal(0);
      expect(listed.out).to.deep.equal([
        {
          id: hook.id,
          projectId: p.projectId,
          tokenId: /^svc_(tok_[0-9A-Z]{26})_/.exec(a.token)![1],
          url: r.url,
          types: ['ext.*'],
          inboxes: null,
          enabled: true,
          disabledBy: null,
          disabledAt: null,
          disabledReason: null,
          failingSince: null,
          createdAt: hook.createdAt,
        },
      ]);
      const off = await runPostern(['admin', 'webhook', 'disable', '--id', hook.id, '--reason', 'receiver under maintenance'], env);
      expect(off.code, off.stderr).to.equal(0);
      expect(off.out).to.include({ id: hook.id, enabled: false, disabledReason: 'disabled by staff: receiver under maintenance' });
      expect((await a.get(hook.id)).enabled).to.equal(false);
      const [recorded] = await a.events('types=webhook.endpoint.disabled');
      expect(recorded!.data).to.deep.include({ webhookId: hook.id, reason: 'staff', detail: 'receiver under maintenance' });
      const missing = await runPostern(['admin', 'webhook', 'disable', '--id', 'whk_01M8ANF4Q35SV94XVK3S6RVM3P'], env);
      expect(missing.code).to.not.equal(0);
      expect(missing.out.error).to.match(/no webhook endpoint/);
      // Its owner cannot undo staff's decision: a clear 409, and it stays disabled.
      const again = await a.send('PATCH', `/webhooks/${hook.id}`, { enabled: true });
      expect(again.status).to.equal(409);
      expect(((await again.json()) as { error: string }).error).to.match(/disabled by the service's staff/);
      expect(await a.get(hook.id)).to.include({ enabled: false, disabledReason: 'disabled by staff: receiver under maintenance' });
      // Other changes are the owner's to make; they leave it disabled.
      expect((await a.send('PATCH', `/webhooks/${hook.id}`, { description: 'edited' })).status).to.equal(200);
      expect((await a.get(hook.id)).enabled).to.equal(false);

      // One its owner disabled, then staff too: staff's, so the owner cannot enable it either.
      const other = await a.hook(r, { types: ['ext.*'] });
      expect((await a.send('PATCH', `/webhooks/${other.id}`, { enabled: false })).status).to.equal(200);
      const offToo = await runPostern(['admin', 'webhook', 'disable', '--id', other.id, '--reason', 'abuse'], env);
      expect(offToo.out).to.include({ id: other.id, enabled: false, disabledBy: 'staff', disabledReason: 'disabled by staff: abuse' });
      expect((await a.send('PATCH', `/webhooks/${other.id}`, { enabled: true })).status).to.equal(409);
    } finally {
      await r.close();
    }
  });

  it('enables again what staff disabled: its waiting deliveries are sent; not one its owner disabled', async () => {
    const { a } = await project(s);
    const r = await new Receiver().start();
    try {
      const hook = await a.hook(r, { types: ['ext.*'] });
      const env = envVars(mailEnv(), s.storeEnv);
      const off = await runPostern(['admin', 'webhook', 'disable', '--id', hook.id, '--reason', 'checking the receiver'], env);
      expect(off.code, off.stderr).to.equal(0);
      // Published while disabled: it waits.
      const [id] = await a.ship(1);
      const on = await runPostern(['admin', 'webhook', 'enable', '--id', hook.id], env);
      expect(on.code, on.stderr).to.equal(0);
      expect(on.out).to.include({ id: hook.id, enabled: true, disabledBy: null, disabledAt: null, disabledReason: null });
      expect(await a.get(hook.id)).to.include({ enabled: true });
      await until('the waiting delivery', async () => r.received.find((x) => x.id === id), 15_000);
      // Enabled already: left so.
      const twice = await runPostern(['admin', 'webhook', 'enable', '--id', hook.id], env);
      expect(twice.code, twice.stderr).to.equal(0);
      expect(twice.out).to.include({ id: hook.id, enabled: true });

      // Its owner's decision is its owner's: staff do not undo it.
      expect((await a.send('PATCH', `/webhooks/${hook.id}`, { enabled: false })).status).to.equal(200);
      const owners = await runPostern(['admin', 'webhook', 'enable', '--id', hook.id], env);
      expect(owners.code).to.not.equal(0);
      expect(owners.out.error).to.match(/disabled by its owner, not by staff/);
      expect((await a.get(hook.id)).enabled).to.equal(false);
      const missing = await runPostern(['admin', 'webhook', 'enable', '--id', 'whk_01M8ANF4Q35SV94XVK3S6RVM3P'], env);
      expect(missing.out.error).to.match(/no webhook endpoint/);
    } finally {
      await r.close();
    }
  });
});

describe('webhook deliveries across processes', function () {
  this.timeout(120_000);
  let s: TestServer;
  let other: Listening | null = null;

  before(async () => {
    s = await startPostern({ ...FAST, POSTERN_WEBHOOK_CONCURRENCY: '2' });
  });
  afterEach(async () => {
    if (other) await stopProcess(other.child);
    other = null;
  });
  after(async () => {
    await s?.close();
  });

  const second = async () => {
    other = await spawnPostern(
      envVars(mailEnv(), { ...s.storeEnv, ...FAST, POSTERN_WEBHOOK_CONCURRENCY: '2', POSTERN_PORT: String(await freePort()) }),
    );
    return other;
  };

  it('two processes send each event once', async () => {
    await second();
    const { a } = await project(s);
    const r = await new Receiver().start();
    try {
      const hook = await a.hook(r);
      const ids = await a.ship(40);
      // Every delivery settled: none is left that either process could send again.
      await until(
        'all forty settled',
        async () => (await a.deliveries(hook.id, '?limit=100')).deliveries.filter((d) => d.state === 'delivered').length === 40,
        30_000,
      );
      expect(r.ids().sort()).to.deep.equal([...ids].sort());
      expect(r.unverified).to.deep.equal([]);
    } finally {
      await r.close();
    }
  });

  it('kill -9 of a process with deliveries under way loses none', async () => {
    const killed = await second();
    const { a } = await project(s);
    const r = await new Receiver().start();
    try {
      let hang = true;
      r.answer = () => (hang ? 'hang' : { status: 204 });
      const hook = await a.hook(r);
      const ids = await a.ship(10);
      // Two attempts under way per process at most: four held open means the other process holds two.
      await until('both processes holding attempts', async () => r.hangingCount >= 4);
      killed.child.kill('SIGKILL');
      await new Promise((resolve) => killed.child.once('exit', resolve));
      hang = false;
      await until('every event delivered', async () => ids.every((id) => r.delivered.has(id)), 60_000);
      const list = await until(
        'every delivery settled',
        async () => {
          const l = await a.deliveries(hook.id, '?limit=100');
          return l.deliveries.every((d) => d.state === 'delivered') ? l : null;
        },
        30_000,
      );
      expect(list.deliveries).to.have.length(10);
    } finally {
      await r.close();
    }
  });
});
