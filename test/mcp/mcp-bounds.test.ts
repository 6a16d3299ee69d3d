// The bounds of one POST /v1/mcp request (lib/mcp/gate.ts, docs/mcp.md "Bounds"): a batch's
// size, its calls a few at a time within one time budget, none started after the client left,
// and the process answering others meanwhile. Calls are watched, and made slow, through
// McpTools.charge, which every tool call passes once as it starts.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { CallCharge } from '../../lib/mcp/server.ts';
import { call, newProject, startPostern, type TestInbox, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';

const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' };
const BATCH_MAX = 10;
const CONCURRENCY = 2;
const BUDGET_MS = 1500;
const RATE_BURST = 3;

type Answer = { id: number; result?: { isError?: boolean }; error?: { code: number; message: string } };

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('MCP: the bounds of one request', function () {
  this.timeout(60_000);
  let s: TestServer;
  let token: string;
  let inbox: TestInbox;
  let logFile: string;
  let charge: CallCharge | null;

  before(async () => {
    logFile = join(mkdtempSync(join(tmpdir(), 'postern-mcp-bounds-')), 'postern.log');
    s = await startPostern(
      {
        POSTERN_MCP_BATCH_MAX: String(BATCH_MAX),
        POSTERN_MCP_BATCH_CONCURRENCY: String(CONCURRENCY),
        POSTERN_MCP_BATCH_BUDGET_MS: String(BUDGET_MS),
        // A few tool calls per token, refilled one every 50 s: nothing refills while the test runs.
        POSTERN_RATE_EXPENSIVE: '0.02',
        POSTERN_RATE_EXPENSIVE_BURST: String(RATE_BURST),
        POSTERN_LOG_LEVEL: 'info',
      },
      { logFile },
    );
    const p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['messages:read']);
    charge = s.postern.mcp.tools.charge;
    // The other tests watch calls through the charge in the budget's place.
    s.postern.mcp.tools.charge = null;
  });
  afterEach(() => {
    s.postern.mcp.tools.charge = null;
  });
  after(async () => {
    await s?.close();
  });

  const calls = (n: number, name = 'list_inboxes', args: Record<string, unknown> = {}) =>
    Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i + 1, method: 'tools/call', params: { name, arguments: args } }));

  async function batch(body: unknown, init: RequestInit & { token?: string } = {}): Promise<{ status: number; body: unknown }> {
    const res = await call(`${s.base}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, ...(init.headers as Record<string, string>) },
      body: JSON.stringify(body),
      token: init.token ?? token,
      ...(init.signal ? { signal: init.signal } : {}),
    });
    return { status: res.status, body: JSON.parse(await res.text()) as unknown };
  }

  it(`refuses a batch of more than POSTERN_MCP_BATCH_MAX messages with a 400 that says so`, async () => {
    let started = 0;
    s.postern.mcp.tools.charge = () => void started++;
    const over = await batch(calls(BATCH_MAX + 1));
    expect(over.status).to.equal(400);
    expect(over.body).to.deep.equal({
      error: `a batch may hold at most ${BATCH_MAX} messages (POSTERN_MCP_BATCH_MAX); this one holds ${BATCH_MAX + 1}: send it as several requests`,
    });
    expect(started).to.equal(0);
    const fits = await batch(calls(BATCH_MAX));
    expect(fits.status).to.equal(200);
    expect((fits.body as Answer[]).map((a) => a.id)).to.have.members(calls(BATCH_MAX).map((c) => c.id));
    expect(started).to.equal(BATCH_MAX);
  });

  it("charges each call of a batch to the credential's expensive budget as it starts: past it, a JSON-RPC error; a single call, a 429", async () => {
    s.postern.mcp.tools.charge = charge;
    const p = await newProject(s);
    await p.inbox();
    const spender = await p.token(['messages:read']);
    const answers = (await batch(calls(RATE_BURST + 2), { token: spender })).body as Answer[];
    const refused = answers.filter((a) => a.error);
    expect(answers.filter((a) => a.result && !a.result.isError)).to.have.length(RATE_BURST);
    expect(refused).to.have.length(2);
    for (const a of refused)
      expect(a.error!.message).to.match(/too many searches, message downloads and tool calls for this credential; try again in \d+ s/);
    // tools/list is not a tool call; a single call is refused as a request.
    expect((await batch({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { token: spender })).status).to.equal(200);
    const single = await batch(calls(1)[0], { token: spender });
    expect(single.status).to.equal(429);
    expect(Object.keys(single.body as object)).to.deep.equal(['error']);
    expect((single.body as { error: string }).error).to.match(/too many searches/);
  });

  it("runs a batch's calls at most POSTERN_MCP_BATCH_CONCURRENCY at a time", async () => {
    let running = 0;
    let most = 0;
    s.postern.mcp.tools.charge = async () => {
      most = Math.max(most, ++running);
      await sleep(50);
      running--;
    };
    const answers = (await batch(calls(8))).body as Answer[];
    expect(answers).to.have.length(8);
    for (const a of answers) expect(a.result?.isError, JSON.stringify(a)).to.not.equal(true);
    expect(most).to.equal(CONCURRENCY);
  });

  it('answers the calls not started within POSTERN_MCP_BATCH_BUDGET_MS with an error saying so', async () => {
    // Each call takes 60% of the budget: the first two run, the next two start before it is spent
    // (unless the machine is slow), the last cannot.
    s.postern.mcp.tools.charge = () => sleep(BUDGET_MS * 0.6);
    const answers = (await batch(calls(5))).body as Answer[];
    const byId = new Map(answers.map((a) => [a.id, a]));
    expect(byId.get(1)!.result).to.be.an('object');
    expect(byId.get(2)!.result).to.be.an('object');
    const refused = answers.filter((a) => a.error);
    expect(refused.map((a) => a.id)).to.include(5);
    for (const a of refused) {
      expect(a.error).to.deep.equal({
        code: -32001,
        message: `MCP error -32001: not started: this request's calls used its time budget of ${BUDGET_MS} ms (POSTERN_MCP_BATCH_BUDGET_MS); send this call again in a later request`,
      });
    }
  });

  it("starts no more of a batch's calls once its client has disconnected", async () => {
    let started = 0;
    let finished = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    s.postern.mcp.tools.charge = async () => {
      started++;
      await held;
      finished++;
    };
    const requestId = `mcp-gone-${randomBytes(4).toString('hex')}`;
    const abort = new AbortController();
    const sent = batch(calls(8), { signal: abort.signal, headers: { 'x-request-id': requestId } }).catch((err: unknown) => err);
    await until('the first calls started', async () => started >= CONCURRENCY);
    abort.abort();
    expect(await sent).to.be.instanceOf(Error);
    // The request's line is logged once the server has seen its connection close.
    await until('the closed request logged', async () =>
      readFileSync(logFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .some((l) => (JSON.parse(l) as { msg: string; requestId?: string }).requestId === requestId),
    );
    release();
    await until('the calls under way finished', async () => finished === CONCURRENCY);
    // A round trip later, the places they left would have gone to the next calls.
    expect((await call(`${s.url}/healthz`)).status).to.equal(200);
    expect(started).to.equal(CONCURRENCY);
  });

  it('keeps answering /healthz while a batch of slow searches runs', async () => {
    // Each call holds the event loop for a while, as an expensive index search does.
    const burnMs = 100;
    s.postern.mcp.tools.charge = () => {
      const until = performance.now() + burnMs;
      while (performance.now() < until);
    };
    // The shortest prefixes, as many as a search takes (docs/search.md, 12): the costliest query there is.
    const prefixes = (first: number) => Array.from({ length: 3 }, (_, i) => `${String.fromCharCode(97 + first + i)}e`).join(' ');
    const worst = { inboxId: inbox.id, from: prefixes(0), to: prefixes(3), cc: prefixes(6), subject: prefixes(9) };
    const began = performance.now();
    let done = false;
    const sent = batch(calls(BATCH_MAX, 'search_messages', worst)).finally(() => (done = true));
    const waits: number[] = [];
    while (!done) {
      const t = performance.now();
      expect((await call(`${s.url}/healthz`)).status).to.equal(200);
      waits.push(performance.now() - t);
    }
    const answers = (await sent).body as Answer[];
    const took = performance.now() - began;
    expect(answers).to.have.length(BATCH_MAX);
    for (const a of answers) expect(a.result?.isError, JSON.stringify(a)).to.not.equal(true);
    expect(took).to.be.at.least(BATCH_MAX * burnMs);
    // A wait is at most the calls that start together, never the batch.
    expect(Math.max(...waits), `healthz waits ${waits.map(Math.round).join(', ')} ms during ${Math.round(took)} ms`).to.be.below(took / 2);
  });
});
