// The project event log over HTTP (docs/api.md: "EventType" to "Event", "Events", "Project event log" to "Which operation emits which event", "Errors", "Limits"): catalog, registered
// types, publishing with idempotency, paged reads and the visibility matrix.
import { request } from 'node:http';
import { expect } from 'chai';
import { SYSTEM_ACTOR } from '../../lib/events/log.ts';
import { call, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { addInbox, expectError, getPage, json, post, register, type WireEvent } from '../helpers/events-helpers.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { onStore } from '../helpers/store-backdoor.ts';

const MSG = (n: number) => `msg_${String(n).padStart(26, '0')}`;

describe('events: catalog (GET /event-types)', () => {
  let s: TestServer;
  let p: TestProject;
  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  it('401 without a credential', async () => {
    await expectError(await call(`${s.base}/event-types`), 401);
    await expectError(await call(`${s.app}/event-types`), 401);
  });

  it('any valid token (even with no scopes) gets every built-in type with a JSON Schema', async () => {
    const res = await call(`${s.base}/event-types`, { token: await p.token([]) });
    expect(res.status).to.equal(200);
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const { eventTypes } = await json<{ eventTypes: Array<Record<string, unknown>> }>(res);
    const names = eventTypes.map((t) => t.name);
    for (const n of [
      'message.received',
      'message.added',
      'message.removed',
      'message.flags',
      'mail.delivery.accepted',
      'mail.delivery.failed',
      'access.content.read',
    ]) {
      expect(names).to.include(n);
    }
    for (const t of eventTypes) {
      expect(t).to.include.keys('name', 'version', 'description', 'source', 'class', 'visibility', 'status', 'data', 'dataSchema');
      expect(t.status).to.be.oneOf(['experimental', 'stable', 'deprecated']);
      expect((t.dataSchema as Record<string, unknown>).additionalProperties).to.equal(false);
    }
    const audit = eventTypes.find((t) => t.name === 'access.content.read')!;
    expect(audit.visibility).to.equal('audit');
    expect(eventTypes.find((t) => t.name === 'message.flags')!.visibility).to.equal('inbox');
    expect(eventTypes.find((t) => t.name === 'mail.delivery.accepted')!.visibility).to.equal('project');
  });

  it("tokens also get their project's ext.* types; sessions get the built-ins; other projects see none", async () => {
    const writer = await p.token(['events:write']);
    await register(s, writer, {
      name: 'ext.invoice.paid',
      description: 'An invoice was paid.',
      data: [{ name: 'amount', type: 'integer', required: true }],
    });
    const listed = async (auth: { token?: string; session?: string }, base: string) =>
      (await json<{ eventTypes: Array<{ name: string }> }>(await call(`${base}/event-types`, auth))).eventTypes.map((t) => t.name);
    expect(await listed({ token: await p.token([]) }, s.base)).to.include('ext.invoice.paid');
    const session = await listed({ session: await p.session() }, s.app);
    expect(session).to.include('message.received').and.not.include('ext.invoice.paid');
    const other = await newProject(s);
    expect(await listed({ token: await other.token([]) }, s.base)).to.not.include('ext.invoice.paid');
  });
});

describe('events: registering types (POST /event-types)', () => {
  let s: TestServer;
  let p: TestProject;
  let writer: string;
  const reg = (body: unknown, token = writer) =>
    call(`${s.base}/event-types`, {
      method: 'POST',
      token,
      body: typeof body === 'string' ? body : JSON.stringify(body),
      headers: { 'content-type': 'application/json' },
    });

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    writer = await p.token(['events:write']);
  });
  after(() => s.close());

  it('201 with the EventType, its data fields and a closed JSON Schema', async () => {
    const res = await reg({
      name: 'ext.order.shipped',
      description: 'An order left the warehouse.',
      data: [
        { name: 'orderId', type: 'string', required: true, description: 'Our order number.' },
        { name: 'items', type: 'integer' },
        { name: 'express', type: 'boolean' },
        { name: 'tags', type: 'string[]' },
      ],
    });
    expect(res.status).to.equal(201);
    const t = await json<Record<string, unknown>>(res);
    expect(t).to.include({
      name: 'ext.order.shipped',
      version: 1,
      description: 'An order left the warehouse.',
      class: 'ext',
      status: 'stable',
    });
    expect(t.source).to.equal(`/postern/projects/${p.projectId}`);
    expect(t.data).to.deep.equal([
      { name: 'orderId', type: 'string', description: 'Our order number.', required: true },
      { name: 'items', type: 'integer', required: false },
      { name: 'express', type: 'boolean', required: false },
      { name: 'tags', type: 'string[]', required: false },
    ]);
    expect(t.dataSchema).to.deep.include({
      type: 'object',
      required: ['orderId'],
      additionalProperties: false,
    });
  });

  it('401 without a token; 403 without events:write; 403 for a web session', async () => {
    const body = JSON.stringify({ name: 'ext.a.done', description: 'x' });
    await expectError(await call(`${s.base}/event-types`, { method: 'POST', body }), 401);
    await expectError(
      await reg({ name: 'ext.a.done', description: 'x' }, await p.token(['events:read', 'project:read'])),
      403,
      /events:write/,
    );
    await expectError(await call(`${s.app}/event-types`, { method: 'POST', session: await p.session(), body }), 403);
  });

  for (const [what, body] of [
    ['a name outside ext.<thing>.<verb>', { name: 'invoice.paid', description: 'x' }],
    ['a name with capitals', { name: 'ext.Invoice.paid', description: 'x' }],
    ['a name with three parts after ext', { name: 'ext.a.b.c', description: 'x' }],
    ['no description', { name: 'ext.a.done' }],
    ['a description over 1000 characters', { name: 'ext.a.done', description: 'x'.repeat(1001) }],
    ['version 0', { name: 'ext.a.done', description: 'x', version: 0 }],
    ['a fractional version', { name: 'ext.a.done', description: 'x', version: 1.5 }],
    [
      '33 data fields',
      { name: 'ext.a.done', description: 'x', data: Array.from({ length: 33 }, (_, i) => ({ name: `f${i}`, type: 'string' })) },
    ],
    ['a field of an unknown type', { name: 'ext.a.done', description: 'x', data: [{ name: 'n', type: 'number' }] }],
    ['a field without a name', { name: 'ext.a.done', description: 'x', data: [{ type: 'string' }] }],
    [
      'a field declared twice',
      {
        name: 'ext.a.done',
        description: 'x',
        data: [
          { name: 'n', type: 'string' },
          { name: 'n', type: 'integer' },
        ],
      },
    ],
    ['an unknown top-level field', { name: 'ext.a.done', description: 'x', pattern: '.*' }],
    ['a field named __proto__', { name: 'ext.a.done', description: 'x', data: [{ name: '__proto__', type: 'string' }] }],
    ['an array body', [{ name: 'ext.a.done', description: 'x' }]],
  ] as const) {
    it(`422 for ${what}`, async () => {
      await expectError(await reg(body), 422);
    });
  }

  it('400 for a body that is not JSON; 415 for another content type', async () => {
    await expectError(await reg('{"name":'), 400);
    await expectError(
      await call(`${s.base}/event-types`, {
        method: 'POST',
        token: writer,
        body: 'name=x',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      }),
      415,
    );
  });

  it('32 fields is the limit and is accepted', async () => {
    const res = await reg({
      name: 'ext.wide.made',
      description: 'x',
      data: Array.from({ length: 32 }, (_, i) => ({ name: `f${i}`, type: 'string' })),
    });
    expect(res.status).to.equal(201);
  });

  it('within a version only optional fields may be added (and descriptions change); anything else is 422', async () => {
    const base = {
      name: 'ext.ticket.closed',
      description: 'v1',
      data: [
        { name: 'ticket', type: 'string', required: true },
        { name: 'note', type: 'string' },
      ],
    };
    expect((await reg(base)).status).to.equal(201);
    // The same registration again is fine.
    expect((await reg(base)).status).to.equal(201);
    const added = await reg({
      ...base,
      description: 'v1, with who',
      data: [...base.data, { name: 'by', type: 'string', description: 'who closed it' }],
    });
    expect(added.status).to.equal(201);
    const t = await json<{ data: Array<{ name: string }>; description: string }>(added);
    expect(t.data.map((f) => f.name)).to.deep.equal(['ticket', 'note', 'by']);
    expect(t.description).to.equal('v1, with who');
    // Omitting a field that exists would remove it.
    expect(await expectError(await reg(base), 422)).to.match(/by cannot be removed/);
    const all = [...base.data, { name: 'by', type: 'string' }];
    await expectError(await reg({ ...base, data: [...all, { name: 'must', type: 'string', required: true }] }), 422, /optional/);
    await expectError(await reg({ ...base, data: all.map((f) => (f.name === 'note' ? { ...f, type: 'integer' } : f)) }), 422, /type/);
    await expectError(await reg({ ...base, data: all.map((f) => (f.name === 'note' ? { ...f, required: true } : f)) }), 422);
    await expectError(await reg({ ...base, data: all.map((f) => (f.name === 'ticket' ? { name: 'ticket', type: 'string' } : f)) }), 422);
    // A new version may change anything; both versions are listed.
    const v2 = await reg({
      name: 'ext.ticket.closed',
      description: 'v2',
      version: 2,
      data: [{ name: 'ticketId', type: 'integer', required: true }],
    });
    expect(v2.status).to.equal(201);
    expect((await json<{ version: number }>(v2)).version).to.equal(2);
    const { eventTypes } = await json<{ eventTypes: Array<{ name: string; version: number }> }>(
      await call(`${s.base}/event-types`, { token: writer }),
    );
    expect(eventTypes.filter((t) => t.name === 'ext.ticket.closed').map((t) => t.version)).to.deep.equal([1, 2]);
    // Publishing takes the newest version the data matches (see the publishing tests).
    expect((await post(s, writer, { type: 'ext.ticket.closed', data: { ticket: 'T-1' } })).status).to.equal(201);
    expect((await post(s, writer, { type: 'ext.ticket.closed', data: { ticketId: 7 } })).status).to.equal(201);
    await expectError(await post(s, writer, { type: 'ext.ticket.closed', data: { ticketId: 'T-1' } }), 422, /v2/);
  });

  it('types are per project: the same name in another project is independent', async () => {
    const other = await newProject(s);
    const w2 = await other.token(['events:write']);
    expect(
      (await reg({ name: 'ext.ticket.closed', description: 'theirs', data: [{ name: 'x', type: 'boolean', required: true }] }, w2)).status,
    ).to.equal(201);
    expect((await post(s, w2, { type: 'ext.ticket.closed', data: { x: true } })).status).to.equal(201);
  });
});

describe('events: publishing (POST /events)', () => {
  let s: TestServer;
  let p: TestProject;
  let writer: string;
  let inbox: string;

  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
    writer = await p.token(['events:write', 'events:read', 'project:read']);
    inbox = await addInbox(s, p);
    await register(s, writer, {
      name: 'ext.deploy.finished',
      description: 'A deploy finished.',
      data: [
        { name: 'service', type: 'string', required: true },
        { name: 'ok', type: 'boolean' },
        { name: 'seconds', type: 'integer' },
        { name: 'hosts', type: 'string[]' },
        { name: 'log', type: 'string' },
      ],
    });
  });
  after(() => s.close());

  it('201 with id and cursor; the event is a CloudEvent with the service attributes', async () => {
    const res = await post(s, writer, {
      type: 'ext.deploy.finished',
      subject: 'api',
      data: { service: 'api', ok: true, seconds: 42, hosts: ['a', 'b'] },
    });
    expect(res.status).to.equal(201);
    const body = await json<{ id: string; cursor: string }>(res);
    expect(body.id).to.match(/^evt_[0-9A-Z]{26}$/);
    expect(body.cursor).to.be.a('string');
    const page = await getPage(`${s.base}/events?types=ext.*`, { token: writer });
    const e = page.events.find((x) => x.id === body.id)!;
    expect(e).to.deep.include({
      specversion: '1.0',
      type: 'ext.deploy.finished',
      source: `/postern/projects/${p.projectId}`,
      scope: p.projectId,
      class: 'ext',
      visibility: 'project',
      subject: 'api',
      data: { service: 'api', ok: true, seconds: 42, hosts: ['a', 'b'] },
    });
    expect(e.actor).to.match(/^tok_[0-9A-Z]{26}$/);
    expect(e.sequence).to.match(/^\d{20}$/);
    expect(new Date(e.time).toISOString()).to.equal(e.time);
    expect(e.dataschema).to.match(/^https:\/\/postern\.dev\/schemas\/events\//);
    expect(e).to.not.have.property('containerid');
  });

  it("an event naming an inbox is an inbox event in that inbox's stream", async () => {
    const res = await post(s, writer, { type: 'ext.deploy.finished', inbox, data: { service: 'mail' } });
    expect(res.status).to.equal(201);
    const { id } = await json<{ id: string }>(res);
    const page = await getPage(`${s.base}/events?inboxes=${inbox}`, { token: writer });
    const e = page.events.find((x) => x.id === id)!;
    expect(e.containerid).to.equal(inbox);
    expect(e.visibility).to.equal('inbox');
  });

  it('401 without a token; 403 without events:write; 403 for a web session', async () => {
    await expectError(await call(`${s.base}/events`, { method: 'POST', body: '{}' }), 401);
    await expectError(
      await post(s, await p.token(['events:read', 'project:read', 'audit:read']), { type: 'ext.deploy.finished', data: { service: 'x' } }),
      403,
      /events:write/,
    );
    await expectError(
      await call(`${s.app}/events`, { method: 'POST', session: await p.session(), body: JSON.stringify({ type: 'ext.deploy.finished' }) }),
      403,
    );
  });

  it('404 for an inbox the caller cannot use: unknown, malformed, not granted, other project, outside a narrowed token', async () => {
    const other = await newProject(s);
    const foreign = await addInbox(s, other);
    const notGranted = await addInbox(s, p, { memberId: await p.member() });
    const narrowed = await p.token(['events:write'], { inboxes: [inbox] });
    const mine = await addInbox(s, p);
    for (const [token, id] of [
      [writer, 'ibx_01M80W1F3RD7BV8C61QAP73X5Y'],
      [writer, 'ibx_nope'],
      [writer, notGranted],
      [writer, foreign],
      [narrowed, mine],
    ] as const) {
      await expectError(await post(s, token, { type: 'ext.deploy.finished', inbox: id, data: { service: 'x' } }), 404);
    }
  });

  it('422 for an unregistered type, a built-in type, or data that does not match', async () => {
    await expectError(await post(s, writer, { type: 'ext.nothing.happened' }), 422, /not registered/);
    await expectError(await post(s, writer, { type: 'message.received', data: { msgId: MSG(1) } }), 422);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: {} }), 422, /service/);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 1 } }), 422, /data\.service/);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x', extra: 1 } }), 422, /extra/);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x', hosts: [1] } }), 422);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x', seconds: 1.5 } }), 422);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: ['service'] }), 422);
    await expectError(await post(s, writer, { data: { service: 'x' } }), 422);
    await expectError(
      await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x' }, subject: 's'.repeat(257) }),
      422,
      /subject/,
    );
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x' }, unknown: true }), 422);
    await expectError(await post(s, writer, 'null'), 422);
    expect((await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x' }, subject: 's'.repeat(256) })).status).to.equal(201);
  });

  it('a new version does not break producers of an older one: each event is checked against the newest version it matches', async () => {
    await register(s, writer, {
      name: 'ext.order.shipped',
      description: 'v1',
      data: [{ name: 'orderId', type: 'string', required: true }],
    });
    await register(s, writer, {
      name: 'ext.order.shipped',
      version: 2,
      description: 'v2',
      data: [
        { name: 'order', type: 'string', required: true },
        { name: 'carrier', type: 'string', required: true },
      ],
    });
    await register(s, writer, {
      name: 'ext.order.shipped',
      version: 3,
      description: 'v3',
      data: [
        { name: 'order', type: 'string', required: true },
        { name: 'carrier', type: 'string' },
      ],
    });
    const schemaOf = async (data: unknown): Promise<string> => {
      const res = await post(s, writer, { type: 'ext.order.shipped', data });
      expect(res.status, await res.clone().text()).to.equal(201);
      const { id } = await json<{ id: string }>(res);
      const page = await getPage(`${s.base}/events?types=ext.order.shipped&limit=500`, { token: writer });
      return page.events.find((e) => e.id === id)!.dataschema!;
    };
    const base = `https://postern.dev/schemas/events/${p.projectId}/ext.order.shipped`;
    // A v1 producer keeps working, and its event says which version it was checked against.
    expect(await schemaOf({ orderId: 'o-1' })).to.equal(`${base}/v1.json`);
    // Data that matches v2 and v3 is recorded as the newest, v3.
    expect(await schemaOf({ order: 'o-2', carrier: 'ups' })).to.equal(`${base}/v3.json`);
    expect(await schemaOf({ order: 'o-3' })).to.equal(`${base}/v3.json`);
    // Matching no version is a 422 that names the newest, and stores nothing.
    const before = (await getPage(`${s.base}/events?types=ext.order.shipped&limit=500`, { token: writer })).events.length;
    await expectError(await post(s, writer, { type: 'ext.order.shipped', data: { orderId: 1 } }), 422, /ext\.order\.shipped v3: .*order/);
    await expectError(await post(s, writer, { type: 'ext.order.shipped', data: { order: 'x', orderId: 'y' } }), 422, /v3/);
    expect((await getPage(`${s.base}/events?types=ext.order.shipped&limit=500`, { token: writer })).events).to.have.length(before);
  });

  it('400 for a body that is not JSON; 415 for another content type', async () => {
    await expectError(await post(s, writer, '{"type": '), 400);
    await expectError(await post(s, writer, ''), 400);
    await expectError(
      await call(`${s.base}/events`, { method: 'POST', token: writer, body: 'type=x', headers: { 'content-type': 'text/plain' } }),
      415,
    );
  });

  it('413 for data over 4 KB measured on its serialized bytes; exactly 4 KB is accepted', async () => {
    // {"service":"x","log":"…"} is 24 bytes plus the log text.
    const fits = { service: 'x', log: 'a'.repeat(4096 - 24) };
    expect(Buffer.byteLength(JSON.stringify(fits))).to.equal(4096);
    expect((await post(s, writer, { type: 'ext.deploy.finished', data: fits })).status).to.equal(201);
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { ...fits, log: `${fits.log}a` } }), 413, /4096/);
    // Multi-byte characters count as their UTF-8 bytes: 1400 × 3 bytes.
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'x', log: '€'.repeat(1400) } }), 413);
    // Whitespace in the request does not count; the compact serialization does.
    const spaced = JSON.stringify({ type: 'ext.deploy.finished', data: fits }, null, 8);
    expect((await post(s, writer, spaced)).status).to.equal(201);
  });

  it('413 for an oversized body before it is read whole', async () => {
    const url = new URL(`${s.base}/events`);
    const started = Date.now();
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'POST',
          headers: { authorization: `Bearer ${writer}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      // A body that never ends: the answer must come from the limit, not from the end.
      req.write(`{"type":"ext.deploy.finished","data":{"service":"x","log":"${'a'.repeat(64 * 1024)}`);
    });
    expect(status).to.equal(413);
    // The body never ends, so any answer came from the limit; the bound only catches a hang.
    expect(Date.now() - started).to.be.below(10_000);
    // The same with a declared length: refused from the header alone.
    await expectError(
      await post(s, writer, JSON.stringify({ type: 'ext.deploy.finished', data: { service: 'x', log: 'a'.repeat(100_000) } })),
      413,
    );
  });

  it('a body cut off mid-way stores nothing and leaves the server serving', async () => {
    const url = new URL(`${s.base}/events`);
    const before = await s.postern.events.lastPosition();
    await new Promise<void>((resolve) => {
      const req = request({
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { authorization: `Bearer ${writer}`, 'content-type': 'application/json', 'content-length': '500' },
      });
      req.on('error', () => resolve());
      req.write('{"type":"ext.deploy.finished","data":{"service":"x"');
      setTimeout(() => req.destroy(), 50);
      req.on('close', () => resolve());
    });
    // The next request is served after the cut one was given up: only it is in the log.
    const ok = await post(s, writer, { type: 'ext.deploy.finished', data: { service: 'after-cut' } });
    expect(ok.status).to.equal(201);
    expect(await s.postern.events.lastPosition()).to.equal(before + 1);
  });

  it('Idempotency-Key: first 201, then 200 duplicate with the first event whatever the body holds (docs/api.md, "Events"); nothing stored twice', async () => {
    const body = { type: 'ext.deploy.finished', data: { service: 'idem', seconds: 1 } };
    const first = await post(s, writer, body, { 'idempotency-key': 'deploy-1' });
    expect(first.status).to.equal(201);
    const { id } = await json<{ id: string }>(first);
    // The same body with keys in another order is the same request.
    const again = await post(
      s,
      writer,
      { data: { seconds: 1, service: 'idem' }, type: 'ext.deploy.finished' },
      { 'idempotency-key': 'deploy-1' },
    );
    expect(again.status).to.equal(200);
    expect(await json(again)).to.deep.equal({ id, duplicate: true });
    // Other content under the same key: still the first event, and nothing stored.
    // Even a body that would be refused on its own (unregistered type, data not matching, a
    // field the schema does not know): the key is answered before the body is validated.
    const refusedAlone = [{ type: 'ext.never.registered' }, { ...body, data: { service: 7 } }, { ...body, colour: 'red' }];
    for (const other of [
      { ...body, data: { service: 'idem', seconds: 2 } },
      { ...body, subject: 'another' },
      { type: 'ext.deploy.finished', data: { service: 'elsewhere' } },
      ...refusedAlone,
    ]) {
      const res = await post(s, writer, other, { 'idempotency-key': 'deploy-1' });
      expect(res.status, JSON.stringify(other)).to.equal(200);
      expect(await json(res)).to.deep.equal({ id, duplicate: true });
    }
    // Another key is another event; a rejected request stores no key.
    await expectError(await post(s, writer, { type: 'ext.deploy.finished', data: {} }, { 'idempotency-key': 'deploy-2' }), 422);
    expect((await post(s, writer, body, { 'idempotency-key': 'deploy-2' })).status).to.equal(201);
    const page = await getPage(`${s.base}/events?types=ext.deploy.finished&limit=500`, { token: writer });
    expect(page.events.filter((e) => e.data?.service === 'idem')).to.have.length(2);
  });

  it('Idempotency-Key is per project', async () => {
    const other = await newProject(s);
    const w2 = await other.token(['events:write']);
    await register(s, w2, { name: 'ext.deploy.finished', description: 'x', data: [{ name: 'service', type: 'string' }] });
    const body = { type: 'ext.deploy.finished', data: { service: 'p2' } };
    expect((await post(s, writer, body, { 'idempotency-key': 'shared-key' })).status).to.equal(201);
    expect((await post(s, w2, body, { 'idempotency-key': 'shared-key' })).status).to.equal(201);
  });

  it('Idempotency-Key over 255 characters or empty is 400', async () => {
    const body = { type: 'ext.deploy.finished', data: { service: 'x' } };
    await expectError(await post(s, writer, body, { 'idempotency-key': 'k'.repeat(256) }), 400, /Idempotency-Key/);
    await expectError(await post(s, writer, body, { 'idempotency-key': '' }), 400);
    expect((await post(s, writer, body, { 'idempotency-key': 'k'.repeat(255) })).status).to.equal(201);
  });

  it('50 concurrent identical requests with one key store exactly one event', async () => {
    const body = { type: 'ext.deploy.finished', data: { service: 'race' } };
    const responses = await Promise.all(Array.from({ length: 50 }, () => post(s, writer, body, { 'idempotency-key': 'race-key' })));
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses.filter((x) => x === 201)).to.have.length(1);
    expect(statuses.filter((x) => x === 200)).to.have.length(49);
    const ids = new Set(await Promise.all(responses.map(async (r) => ((await r.json()) as { id: string }).id)));
    expect(ids.size).to.equal(1);
    const page = await getPage(`${s.base}/events?types=ext.deploy.finished&limit=500`, { token: writer });
    expect(page.events.filter((e) => e.data?.service === 'race')).to.have.length(1);
  });

  it('an expired key (over 24 hours) is free again', async () => {
    const body = { type: 'ext.deploy.finished', data: { service: 'old' } };
    const first = await json<{ id: string }>(await post(s, writer, body, { 'idempotency-key': 'old-key' }));
    await onStore(s.storeEnv, 'UPDATE event_idempotency SET created_at = created_at - 86400001 WHERE key = ?', 'old-key');
    const again = await post(s, writer, body, { 'idempotency-key': 'old-key' });
    expect(again.status).to.equal(201);
    expect((await json<{ id: string }>(again)).id).to.not.equal(first.id);
    expect(await s.postern.events.purgeIdempotency()).to.equal(0);
    // Expired keys are purged; live ones stay.
    await post(s, writer, { ...body, data: { service: 'older' } }, { 'idempotency-key': 'older-key' });
    await onStore(s.storeEnv, 'UPDATE event_idempotency SET created_at = created_at - 86400001 WHERE key = ?', 'older-key');
    expect(await s.postern.events.purgeIdempotency()).to.equal(1);
    expect((await post(s, writer, body, { 'idempotency-key': 'old-key' })).status).to.equal(200);
  });
});

describe('events: reading (GET /events) and the visibility matrix', () => {
  let s: TestServer;
  let p: TestProject;
  let A: string;
  let B: string;
  let C: string;
  let token: (scopes: string[], inboxes?: string[]) => Promise<string>;
  const ids: Record<string, string> = {};

  before(async () => {
    // One token posts 600 events to fill a page: more than a credential's default burst (docs/access.md, "Rate limits").
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0', POSTERN_RATE_REQUESTS: '0' });
    p = await newProject(s);
    A = await addInbox(s, p);
    B = await addInbox(s, p, { role: 'reader' });
    C = await addInbox(s, p, { memberId: await p.member() }); // in the project, not granted to our member
    token = (scopes, inboxes) => p.token(scopes, inboxes ? { inboxes } : {});
    const ev = s.postern.events;
    const actor = /^svc_(tok_[0-9A-Z]{26})_/.exec(await token(['events:write']))![1]!;
    ids.recvA = (
      await ev.record({
        type: 'message.received',
        projectId: p.projectId,
        inboxId: A,
        actor: SYSTEM_ACTOR,
        subject: MSG(1),
        data: { msgId: MSG(1), size: 10 },
      })
    ).eventId;
    ids.flagsA = (
      await ev.record({ type: 'message.flags', projectId: p.projectId, inboxId: A, actor, data: { msgId: MSG(1), flags: ['seen'] } })
    ).eventId;
    ids.recvB = (
      await ev.record({ type: 'message.received', projectId: p.projectId, inboxId: B, actor: SYSTEM_ACTOR, data: { msgId: MSG(2) } })
    ).eventId;
    ids.recvC = (
      await ev.record({ type: 'message.received', projectId: p.projectId, inboxId: C, actor: SYSTEM_ACTOR, data: { msgId: MSG(3) } })
    ).eventId;
    ids.sentA = (
      await ev.record({
        type: 'mail.delivery.accepted',
        projectId: p.projectId,
        inboxId: A,
        actor,
        data: { from: 'a@example.org', recipients: 2 },
      })
    ).eventId;
    ids.readA = (
      await ev.record({ type: 'access.content.read', projectId: p.projectId, inboxId: A, actor, data: { msgId: MSG(1), part: 'content' } })
    ).eventId;
    ids.readC = (
      await ev.record({ type: 'access.content.read', projectId: p.projectId, inboxId: C, actor, data: { msgId: MSG(3), part: 'source' } })
    ).eventId;
    const writer = await token(['events:write']);
    await register(s, writer, { name: 'ext.build.passed', description: 'x' });
    ids.extProject = (await json<{ id: string }>(await post(s, writer, { type: 'ext.build.passed' }))).id;
    ids.extA = (await json<{ id: string }>(await post(s, writer, { type: 'ext.build.passed', inbox: A }))).id;
    // Another project's events never show.
    const other = await newProject(s);
    const otherInbox = await addInbox(s, other);
    await ev.record({
      type: 'message.received',
      projectId: other.projectId,
      inboxId: otherInbox,
      actor: SYSTEM_ACTOR,
      data: { msgId: MSG(9) },
    });
  });
  after(() => s.close());

  const seen = async (query: string, auth: { token?: string; session?: string }, base = s.base) => {
    const page = await getPage(`${base}/events${query}`, auth);
    const name = Object.fromEntries(Object.entries(ids).map(([k, v]) => [v, k]));
    return page.events.map((e) => name[e.id] ?? `foreign:${e.type}`);
  };

  it('401 without a credential', async () => {
    await expectError(await call(`${s.base}/events`), 401);
  });

  it('403 without events:read, and for audit=true without audit:read (tokens and sessions)', async () => {
    await expectError(
      await call(`${s.base}/events`, { token: await token(['events:write', 'project:read', 'audit:read']) }),
      403,
      /events:read/,
    );
    await expectError(
      await call(`${s.base}/events?audit=true`, { token: await token(['events:read', 'project:read']) }),
      403,
      /audit:read/,
    );
    await expectError(await call(`${s.app}/events?audit=true&inboxes=${A}`, { session: await p.session() }), 403, /audit:read/);
  });

  it('400 when the web app does not name its inboxes', async () => {
    await expectError(await call(`${s.app}/events`, { session: await p.session() }), 400, /inboxes/);
  });

  it('404 for an inbox filter naming an inbox the caller cannot use', async () => {
    const t = await token(['events:read']);
    for (const id of [C, 'ibx_01M80W1F3RD7BV8C61QAP73X5Y', 'nope']) {
      await expectError(await call(`${s.base}/events?inboxes=${A},${id}`, { token: t }), 404);
    }
    await expectError(await call(`${s.base}/events?inboxes=${B}`, { token: await token(['events:read'], [A]) }), 404);
    await expectError(await call(`${s.app}/events?inboxes=${C}`, { session: await p.session() }), 404);
  });

  it('400 for a bad limit, cursor, types list or an unknown parameter', async () => {
    const t = await token(['events:read']);
    for (const q of [
      'limit=0',
      'limit=501',
      'limit=abc',
      'limit=1.5',
      'after=garbage',
      'after=evt_01M80W1F3RD7BV8C61QAP73X5Y',
      'types=Message.*',
      'types=message.**',
      'types=',
      'inbox=x',
      'audit=maybe',
      'limit=1&limit=2',
    ]) {
      await expectError(await call(`${s.base}/events?${q}`, { token: t }), 400);
    }
  });

  it('a page is JSON, never cached, with events and a cursor', async () => {
    const res = await call(`${s.base}/events`, { token: await token(['events:read']) });
    expect(res.status).to.equal(200);
    expect(res.headers.get('cache-control')).to.equal('no-store');
    const body = await json<{ events: unknown[]; cursor: string }>(res);
    expect(Object.keys(body)).to.deep.equal(['events', 'cursor']);
    expect(body.cursor).to.match(/^[A-Za-z0-9_-]{23}$/);
  });

  it('events:read alone: the inbox events of granted inboxes, oldest first', async () => {
    expect(await seen('', { token: await token(['events:read']) })).to.deep.equal(['recvA', 'flagsA', 'recvB', 'extA']);
  });

  it('+ project:read: project-level events too (sending, ext events without an inbox)', async () => {
    expect(await seen('', { token: await token(['events:read', 'project:read']) })).to.deep.equal([
      'recvA',
      'flagsA',
      'recvB',
      'sentA',
      'extProject',
      'extA',
    ]);
  });

  it('audit-only events need audit:read and audit=true, and only for inboxes the caller may use', async () => {
    const all = await token(['events:read', 'project:read', 'audit:read']);
    expect(await seen('', { token: all })).to.not.include('readA');
    expect(await seen('?audit=false', { token: all })).to.not.include('readA');
    expect(await seen('?audit=true', { token: all })).to.deep.equal(['recvA', 'flagsA', 'recvB', 'sentA', 'readA', 'extProject', 'extA']);
    expect(await seen('?audit=true', { token: await token(['events:read', 'audit:read']) })).to.deep.equal([
      'recvA',
      'flagsA',
      'recvB',
      'readA',
      'extA',
    ]);
  });

  it('a token narrowed to inbox A sees A and project-level events only', async () => {
    const t = await token(['events:read', 'project:read', 'audit:read'], [A]);
    expect(await seen('?audit=true', { token: t })).to.deep.equal(['recvA', 'flagsA', 'sentA', 'readA', 'extProject', 'extA']);
  });

  it("inboxes=…: only those inboxes' events, no project-level ones", async () => {
    const t = await token(['events:read', 'project:read', 'audit:read']);
    expect(await seen(`?inboxes=${A}`, { token: t })).to.deep.equal(['recvA', 'flagsA', 'sentA', 'extA']);
    expect(await seen(`?inboxes=${B}`, { token: t })).to.deep.equal(['recvB']);
    expect(await seen(`?inboxes=${A},${B}&audit=true`, { token: t })).to.deep.equal(['recvA', 'flagsA', 'recvB', 'sentA', 'readA', 'extA']);
    expect(await seen(`?inboxes=${B}`, { token: await token(['events:read']) })).to.deep.equal(['recvB']);
  });

  it("web sessions: the named inboxes' events, with read state but not who acted", async () => {
    const session = await p.session();
    expect(await seen(`?inboxes=${A},${B}`, { session }, s.app)).to.deep.equal(['recvA', 'flagsA', 'recvB', 'extA']);
    const page = await getPage(`${s.app}/events?inboxes=${A}`, { session });
    const flags = page.events.find((e) => e.type === 'message.flags')!;
    expect(flags.data).to.deep.equal({ msgId: MSG(1), flags: ['seen'] });
    for (const e of page.events) expect(e.actor).to.equal('');
    // Tokens see the actor.
    const tokenPage = await getPage(`${s.base}/events?inboxes=${A}`, { token: await token(['events:read']) });
    expect(tokenPage.events.find((e) => e.type === 'message.flags')!.actor).to.match(/^tok_/);
  });

  it('types filters by name and by prefix.*', async () => {
    const t = await token(['events:read', 'project:read', 'audit:read']);
    expect(await seen('?types=message.*', { token: t })).to.deep.equal(['recvA', 'flagsA', 'recvB']);
    expect(await seen('?types=message.flags,ext.*', { token: t })).to.deep.equal(['flagsA', 'extProject', 'extA']);
    expect(await seen('?types=mail.delivery.accepted&audit=true', { token: t })).to.deep.equal(['sentA']);
    expect(await seen('?types=access.*&audit=true', { token: t })).to.deep.equal(['readA']);
    expect(await seen('?types=nothing.*', { token: t })).to.deep.equal([]);
  });

  it('sequence is per stream and gap-free; time never goes back; the cursor pages', async () => {
    const t = await token(['events:read', 'project:read', 'audit:read']);
    const page = await getPage(`${s.base}/events?audit=true`, { token: t });
    const streamA = page.events.filter((e) => e.containerid === A).map((e) => Number(e.sequence));
    expect(streamA).to.deep.equal([1, 2, 3, 4, 5]);
    expect(page.events.filter((e) => e.containerid === B).map((e) => Number(e.sequence))).to.deep.equal([1]);
    expect(page.events.filter((e) => !e.containerid).map((e) => Number(e.sequence))).to.deep.equal([1]);
    const times = page.events.map((e) => Date.parse(e.time));
    expect(times).to.deep.equal([...times].sort((a, b) => a - b));
    // Pages of 2 visit the same events.
    const paged: WireEvent[] = [];
    let cursor = '';
    for (let i = 0; i < 10; i++) {
      const next = await getPage(`${s.base}/events?audit=true&limit=2${cursor ? `&after=${cursor}` : ''}`, { token: t });
      paged.push(...next.events);
      if (next.events.length === 0) break;
      cursor = next.cursor;
    }
    expect(paged.map((e) => e.id)).to.deep.equal(page.events.map((e) => e.id));
  });

  it('after accepts an event id; the cursor advances even when nothing matched', async () => {
    const t = await token(['events:read', 'project:read']);
    expect(await seen(`?after=${ids.recvB}`, { token: t })).to.deep.equal(['sentA', 'extProject', 'extA']);
    const empty = await getPage(`${s.base}/events?types=nothing.*`, { token: t });
    expect(empty.events).to.deep.equal([]);
    // Everything up to now was scanned: a new event is the only thing after the cursor.
    await s.postern.events.record({
      type: 'message.removed',
      projectId: p.projectId,
      inboxId: A,
      actor: SYSTEM_ACTOR,
      data: { msgId: MSG(1) },
    });
    const after = await getPage(`${s.base}/events?after=${empty.cursor}`, { token: t });
    expect(after.events.map((e) => e.type)).to.deep.equal(['message.removed']);
    // And a caught-up cursor stays put.
    const same = await getPage(`${s.base}/events?after=${after.cursor}`, { token: t });
    expect(same.events).to.deep.equal([]);
    expect(same.cursor).to.equal(after.cursor);
  });

  it('the default page is 100 and the maximum 500', async () => {
    const writer = await token(['events:write']);
    for (let i = 0; i < 30; i++) await Promise.all(Array.from({ length: 20 }, () => post(s, writer, { type: 'ext.build.passed' })));
    const t = await token(['events:read', 'project:read']);
    expect((await getPage(`${s.base}/events`, { token: t })).events).to.have.length(100);
    expect((await getPage(`${s.base}/events?limit=500`, { token: t })).events).to.have.length(500);
  });
});

describe('events: record() for the rest of Postern', () => {
  let s: TestServer;
  let p: TestProject;
  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(() => s.close());

  it('refuses unknown types, bad ids and data that does not match, storing nothing', async () => {
    const ev = s.postern.events;
    const inbox = await addInbox(s, p);
    const before = await ev.lastPosition();
    const bad: Array<Parameters<typeof ev.record>[0]> = [
      { type: 'message.exploded', projectId: p.projectId, actor: SYSTEM_ACTOR },
      { type: 'message.received', projectId: 'nope', actor: SYSTEM_ACTOR, data: { msgId: MSG(1) } },
      { type: 'message.received', projectId: p.projectId, inboxId: 'nope', actor: SYSTEM_ACTOR, data: { msgId: MSG(1) } },
      { type: 'message.received', projectId: p.projectId, inboxId: inbox, actor: 'someone', data: { msgId: MSG(1) } },
      { type: 'message.received', projectId: p.projectId, inboxId: inbox, actor: SYSTEM_ACTOR, data: { msgId: 'x' } },
      { type: 'message.flags', projectId: p.projectId, inboxId: inbox, actor: SYSTEM_ACTOR, data: { msgId: MSG(1), flags: ['bogus'] } },
      { type: 'access.content.read', projectId: p.projectId, inboxId: inbox, actor: SYSTEM_ACTOR, data: { msgId: MSG(1) } },
      {
        type: 'message.received',
        projectId: p.projectId,
        inboxId: inbox,
        actor: SYSTEM_ACTOR,
        subject: 'x'.repeat(257),
        data: { msgId: MSG(1) },
      },
    ];
    for (const input of bad) {
      const err = await ev.record(input).catch((e: unknown) => e);
      expect(err, JSON.stringify(input)).to.be.instanceOf(Error).and.have.property('name', 'EventLogError');
    }
    expect(await ev.lastPosition()).to.equal(before);
  });

  // That the log is append-only is the engines' to keep: test/store-contract/event-store.contract.ts.
  it('returns the stored event with its id, cursor and sequence', async () => {
    const inbox = await addInbox(s, p);
    const r = await s.postern.events.record({
      type: 'message.added',
      projectId: p.projectId,
      inboxId: inbox,
      actor: SYSTEM_ACTOR,
      data: { msgId: MSG(4), uid: 3 },
      correlationId: 'sync-1',
      causationId: 'evt_x',
    });
    expect(r.eventId).to.match(/^evt_/);
    const e = JSON.parse(r.json) as WireEvent & { correlationid: string; causationid: string };
    expect(e).to.deep.include({
      id: r.eventId,
      sequence: '00000000000000000001',
      containerid: inbox,
      correlationid: 'sync-1',
      causationid: 'evt_x',
      class: 'mail',
      source: '/postern/mail',
    });
  });
});

describe('events: the settle delay of paged reads', () => {
  const SETTLE_MS = 400;
  let s: TestServer;
  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: String(SETTLE_MS) });
  });
  after(() => s.close());

  it('paged reads return events only once they are older than the settle delay; the cursor stays before them', async () => {
    const p = await newProject(s);
    const inbox = await addInbox(s, p);
    const t = await p.token(['events:read']);
    const first = await getPage(`${s.base}/events`, { token: t });
    const recorded = Date.now();
    await s.postern.events.record({
      type: 'message.received',
      projectId: p.projectId,
      inboxId: inbox,
      actor: SYSTEM_ACTOR,
      data: { msgId: MSG(1) },
    });
    const fresh = await getPage(`${s.base}/events?after=${first.cursor}`, { token: t });
    // Whichever read returns it was answered past the delay: at once when the machine is quick
    // (then the cursor stayed before it), or the first read already when it was slow.
    const settled = fresh.events.length
      ? fresh
      : await until('the event settled', async () => {
          const page = await getPage(`${s.base}/events?after=${fresh.cursor}`, { token: t });
          return page.events.length ? page : null;
        });
    expect(Date.now() - recorded, 'returned before the settle delay').to.be.at.least(SETTLE_MS);
    expect(settled.events.map((e) => e.type)).to.deep.equal(['message.received']);
  });
});

describe('events: bad input of any shape is a 4xx, never a 500', () => {
  let s: TestServer;
  before(async () => {
    s = await startPostern({ POSTERN_EVENTS_SETTLE_MS: '0' });
  });
  after(() => s.close());

  it('garbage bodies, queries and headers on every event operation', async () => {
    const p = await newProject(s);
    const token = await p.token(['events:write', 'events:read', 'project:read', 'audit:read']);
    const session = await p.session();
    await register(s, token, { name: 'ext.fuzz.done', description: 'x', data: [{ name: 'a', type: 'string' }] });
    const bodies = [
      '',
      ' ',
      'null',
      'true',
      '1',
      '"x"',
      '[]',
      '{}',
      '{"type":null}',
      '{"type":1}',
      '{"type":"ext.fuzz.done","data":null}',
      '{"type":"ext.fuzz.done","data":{"a":{"b":1}}}',
      '{"type":"ext.fuzz.done","inbox":1}',
      '{"type":"ext.fuzz.done","subject":{}}',
      `{"type":"ext.fuzz.done","data":${'['.repeat(5000)}${']'.repeat(5000)}}`,
      '{"name":"ext.a.b","description":"x","data":[{"name":"a","type":"string","required":"yes"}]}',
      '{"name":"ext.a.b","description":"x","version":"2"}',
      '{"name":"ext.a.b","description":"x","data":{}}',
      '\u0000',
      '{"type":"ext.fuzz.done"',
      '{"__proto__":{"x":1}}',
    ];
    const statuses: number[] = [];
    for (const body of bodies) {
      for (const path of ['/events', '/event-types']) {
        const res = await call(`${s.base}${path}`, { method: 'POST', token, body, headers: { 'content-type': 'application/json' } });
        statuses.push(res.status);
        expect(res.status, `${path} ${body.slice(0, 60)}`).to.be.within(200, 499);
        await res.arrayBuffer();
      }
    }
    expect(statuses.filter((x) => x >= 400).length).to.be.above(30);
    const queries = [
      'after=%00',
      'after=AAAAAAAAAAAA',
      'after=' + 'A'.repeat(64),
      'after=evt_',
      'types=%2C%2C',
      'types=*',
      'types=a.*.b',
      'inboxes=%2C',
      'inboxes=' + 'ibx_x,'.repeat(200),
      'limit=-1',
      'limit=1e3',
      'limit=',
      'audit=',
      'audit=1',
      'after[]=x',
      'a=1&b=2',
    ];
    for (const q of queries) {
      for (const auth of [{ token }, { session }]) {
        const base = auth.token ? s.base : s.app;
        for (const accept of ['application/json', 'text/event-stream']) {
          const controller = new AbortController();
          const res = await call(`${base}/events?${q}`, { ...auth, headers: { accept }, signal: controller.signal });
          expect(res.status, `${q} ${accept} ${auth.token ? 'token' : 'session'}`).to.be.within(200, 499);
          controller.abort();
        }
      }
    }
    const bad = await call(`${s.base}/events`, { token, headers: { accept: 'text/event-stream', 'last-event-id': 'nope' } });
    expect(bad.status).to.equal(400);
    await bad.arrayBuffer();
  });
});
