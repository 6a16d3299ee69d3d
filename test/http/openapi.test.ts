// The OpenAPI document is the contract: it lists exactly the operations served, every reference
// in it resolves, and real responses match the schemas it points to.
import { expect } from 'chai';
import { call, newProject, startPostern, type TestProject, type TestServer } from '../helpers/harness.ts';
import { append, json, mailApp } from '../helpers/mail-fixtures.ts';

const MAIL = 'https://postern.dev/schemas/mail.json#/$defs/';
const COMMON = 'https://postern.dev/schemas/common.json#/$defs/';
const EVENTS = 'https://postern.dev/schemas/events.json#/$defs/';

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, unknown>>;
  components: { schemas: Record<string, unknown> };
};

function refs(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) node.forEach((n) => refs(n, out));
  else if (node && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') out.push(v);
      else refs(v, out);
    }
  }
  return out;
}

describe('OpenAPI document', () => {
  let s: TestServer;
  let p: TestProject;
  let doc: Doc;

  before(async () => {
    s = await startPostern();
    p = await newProject(s);
    const res = await fetch(`${s.base}/openapi.json`);
    expect(res.status).to.equal(200);
    doc = (await res.json()) as Doc;
  });
  after(() => s.close());

  it('is served without credentials on both base addresses, identically', async () => {
    expect(doc.openapi).to.equal('3.1.0');
    const res = await fetch(`${s.base}/openapi.json`);
    expect(res.headers.get('cache-control')).to.equal('private, max-age=300');
    const again = await fetch(`${s.app}/openapi.json`);
    expect(again.status).to.equal(200);
    expect(await again.json()).to.deep.equal(doc);
  });

  it('lists exactly the operations that are served', () => {
    const served = s.postern.operations.map((o) => `${o.method} ${o.path}`).sort();
    const documented = Object.entries(doc.paths)
      .flatMap(([path, ops]) =>
        Object.keys(ops)
          .filter((k) => k !== 'parameters' && k !== 'servers')
          .map((m) => `${m} ${path}`),
      )
      .sort();
    expect(documented).to.deep.equal(served);
  });

  it('every reference resolves to a component', () => {
    const names = new Set(Object.keys(doc.components.schemas));
    for (const ref of refs(doc)) {
      expect(ref).to.match(/^#\/components\/(schemas|securitySchemes)\//);
      if (ref.startsWith('#/components/schemas/')) expect(names.has(ref.slice('#/components/schemas/'.length)), ref).to.equal(true);
    }
  });

  it('real responses match the documented schemas', async () => {
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'flags:write', 'events:read', 'events:write']);
    const client = await mailApp(inbox);
    try {
      await append(client, 'INBOX', { subject: 'Contract check', flags: ['\\Seen', '$label1'] });
    } finally {
      await client.logout();
    }
    const v = s.postern.validator;
    const get = async (path: string) => {
      const res = await call(`${s.base}${path}`, { token });
      expect(res.status, path).to.equal(200);
      return json<Record<string, unknown>>(res);
    };
    v.body(`${COMMON}InboxList`, await get('/inboxes'));
    const labels = await get(`/inboxes/${inbox.id}/labels`);
    v.body(`${MAIL}LabelList`, labels);
    const inboxLabel = (labels.labels as Array<{ id: string; name: string }>).find((l) => l.name === 'INBOX')!;
    const page = await get(`/inboxes/${inbox.id}/labels/${inboxLabel.id}/messages`);
    v.body(`${MAIL}MessageList`, page);
    const first = (page.messages as Array<{ id: string }>)[0]!;
    v.body(`${MAIL}MessageDetail`, await get(`/inboxes/${inbox.id}/messages/${first.id}`));
    const flagged = await call(`${s.base}/inboxes/${inbox.id}/messages/${first.id}/flags`, {
      method: 'POST',
      token,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ add: ['flagged'] }),
    });
    v.body(`${MAIL}FlagsResponse`, await json(flagged));
    v.body(`${EVENTS}EventTypeList`, await get('/event-types'));
    v.body(`${EVENTS}EventPage`, await get(`/events?inboxes=${inbox.id}`));
  });
});
