// Every request is logged once, with its request id (the caller's X-Request-Id when short and of
// safe characters, else a new one, returned either way) and the id of the credential it
// authenticated with; never the credential itself.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { call, newProject, startPostern, type TestServer } from '../helpers/harness.ts';

interface RequestLine {
  msg: string;
  level: number;
  requestId: string;
  method: string;
  path: string;
  status: number;
  credentialId: string | null;
}

describe('request log', function () {
  let s: TestServer;
  let logDir: string;
  let logFile: string;

  before(async () => {
    logDir = mkdtempSync(join(tmpdir(), 'postern-request-log-'));
    logFile = join(logDir, 'postern.log');
    s = await startPostern({ POSTERN_LOG_LEVEL: 'info' }, { logFile });
  });
  after(async () => {
    await s?.close();
    rmSync(logDir, { recursive: true, force: true });
  });

  /** The log's line for the request with this id (the log is written synchronously). */
  const logged = (requestId: string): RequestLine => {
    const lines = readFileSync(logFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as RequestLine)
      .filter((l) => l.msg === 'request' && l.requestId === requestId);
    expect(lines, `log lines of request ${requestId}`).to.have.length(1);
    return lines[0]!;
  };

  it("returns a request id: the caller's when at most 64 of A-Z a-z 0-9 . _ : -, a new one otherwise", async () => {
    const given = 'gw-7.trace:0af7651916cd43dd';
    const honoured = await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': given } });
    expect(honoured.headers.get('x-request-id')).to.equal(given);
    const longest = 'r'.repeat(64);
    expect((await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': longest } })).headers.get('x-request-id')).to.equal(longest);
    const uuid = '7d444840-9dc0-11d1-b245-5ffdce74fad2';
    expect((await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': uuid } })).headers.get('x-request-id')).to.equal(uuid);

    const minted = (await fetch(`${s.url}/healthz`)).headers.get('x-request-id');
    expect(minted).to.match(/^[0-9a-f-]{36}$/);
    // Too long, blanks, a slash, quotes and braces (log and header injection), a tab, non-ASCII.
    for (const bad of ['r'.repeat(65), 'trace 1', 'trace/1', '"},{"admin":true', '<script>', 'tab\there', 'caf\u00e9']) {
      const res = await fetch(`${s.url}/healthz`, { headers: { 'x-request-id': Buffer.from(bad).toString('latin1') } });
      const id = res.headers.get('x-request-id');
      expect(id, JSON.stringify(bad)).to.match(/^[0-9a-f-]{36}$/);
      expect(logged(id!).path).to.equal('/healthz');
    }
    expect(logged(given)).to.include({ method: 'GET', path: '/healthz', status: 200, credentialId: null, level: 30 });
  });

  it('logs the token or session a request authenticated with by its id, never the secret', async () => {
    const p = await newProject(s);
    const token = await p.token(['messages:read']);
    const session = await p.session();
    // svc_<token id>_<secret> and ses_<ulid>_<secret> (the session's id is its first two parts).
    const tokenId = token.split('_').slice(1, 3).join('_');
    const sessionId = session.split('_').slice(0, 2).join('_');
    expect(tokenId).to.match(/^tok_/);
    expect(sessionId).to.match(/^ses_/);

    const byToken = await call(`${s.base}/inboxes?limit=5`, { token, headers: { 'x-request-id': 'with-a-token' } });
    expect(byToken.status).to.equal(200);
    expect(byToken.headers.get('x-request-id')).to.equal('with-a-token');
    expect(logged('with-a-token')).to.include({ path: '/v1/inboxes', status: 200, credentialId: tokenId });

    const bySession = await call(`${s.app}/inboxes`, { session, headers: { 'x-request-id': 'with-a-session' } });
    expect(bySession.status).to.equal(200);
    expect(logged('with-a-session')).to.include({ path: '/api/v1/inboxes', status: 200, credentialId: sessionId });

    // Refused: no credential id to name, and what was presented is not written down.
    const forged = `${token.slice(0, -4)}AAAA`;
    const refused = await call(`${s.base}/inboxes`, { token: forged, headers: { 'x-request-id': 'forged' } });
    expect(refused.status).to.equal(401);
    expect(logged('forged')).to.include({ status: 401, credentialId: null });

    const log = readFileSync(logFile, 'utf8');
    for (const secret of [
      token.slice(`svc_${tokenId}_`.length),
      session.slice(`${sessionId}_`.length),
      forged.slice(`svc_${tokenId}_`.length),
    ]) {
      expect(secret).to.have.length(43);
      expect(log.includes(secret), 'a credential secret in the log').to.equal(false);
    }
  });
});
