// GET /healthz (liveness: the process answers) and GET /readyz (readiness: the store, an IMAP
// master login and SMTP submission answer), against the real mail environment; and Readiness's
// own rules (parallel checks, deadline, cache, draining) without it.
import { expect } from 'chai';
import { ImapLoginCheck } from '../../adapters/imap/health.ts';
import { loadConfig } from '../../lib/config.ts';
import { Readiness } from '../../lib/health.ts';
import { unavailable } from '../../lib/errors.ts';
import { envVars, mailEnv, newProject, startPostern, unique, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { freePort } from '../helpers/processes.ts';
import { startDovecot, stopDovecot } from '../helpers/send-fixtures.ts';

interface ReadyBody {
  status: string;
  draining?: boolean;
  checks: Record<string, string>;
}

async function ready(s: TestServer): Promise<{ status: number; body: ReadyBody }> {
  const res = await fetch(`${s.url}/readyz`);
  return { status: res.status, body: (await res.json()) as ReadyBody };
}

describe('health and readiness', function () {
  this.timeout(60_000);
  let s: TestServer;
  before(async () => {
    s = await startPostern();
    // An inbox, so the IMAP check is a real master login (with none it is the greeting alone).
    await (await newProject(s)).inbox();
  });
  after(() => s.close());

  it('GET /readyz is 200 when the store, the IMAP master login and SMTP submission answer', async () => {
    expect(await ready(s)).to.deep.equal({ status: 200, body: { status: 'ready', checks: { store: 'ok', imap: 'ok', smtp: 'ok' } } });
  });

  it('/readyz turns 503 naming IMAP with Dovecot stopped, and 200 when it returns; /healthz stays 200', async () => {
    await stopDovecot();
    try {
      const down = await until('/readyz to say IMAP is down', async () => {
        const r = await ready(s);
        return r.status === 503 ? r : null;
      });
      expect(down.body.status).to.equal('unavailable');
      expect(down.body.checks.store).to.equal('ok');
      expect(down.body.checks.smtp).to.equal('ok');
      expect(down.body.checks.imap).to.not.equal('ok');
      // Liveness asks nothing of Dovecot: the process is fine, restarting it would not help.
      const live = await fetch(`${s.url}/healthz`);
      expect(live.status).to.equal(200);
      expect(await live.json()).to.deep.equal({ status: 'ok' });
    } finally {
      // The environment is shared by the whole run: Dovecot answers again before this test ends.
      await startDovecot();
    }
    const back = await until(
      '/readyz to be 200 again',
      async () => {
        const r = await ready(s);
        return r.status === 200 ? r : null;
      },
      30_000,
    );
    expect(back.body.checks).to.deep.equal({ store: 'ok', imap: 'ok', smtp: 'ok' });
  });

  it('/readyz names SMTP when submission does not answer', async () => {
    const other = await startPostern({ POSTERN_SMTP_PORT: String(await freePort()) });
    try {
      const r = await ready(other);
      expect(r.status).to.equal(503);
      expect(r.body.checks.store).to.equal('ok');
      expect(r.body.checks.imap).to.equal('ok');
      expect(r.body.checks.smtp).to.match(/^SMTP submission did not answer: ECONNREFUSED$/);
    } finally {
      await other.close();
    }
  });

  it('the IMAP check logs in as another user when the one tried is gone from Dovecot', async () => {
    const p = await newProject(s);
    const real = (await p.inbox()).imapUser;
    // Postern may hold an inbox whose user Dovecot no longer has: a master login as it is refused.
    const gone = `${unique('gone')}@${mailEnv().domain}`;
    const asked: Array<string | undefined> = [];
    const check = new ImapLoginCheck(
      loadConfig(envVars(mailEnv())).imap,
      async (not) => {
        asked.push(not);
        return [gone, real].find((u) => u !== not) ?? null;
      },
      2000,
    );
    await check.check();
    expect(asked).to.deep.equal([undefined, gone]);
    // The user that worked is remembered: no lookup the next time.
    await check.check();
    expect(asked).to.have.length(2);
  });

  it('/readyz says the master login is refused with a wrong master password, naming no user', async () => {
    const other = await startPostern({
      POSTERN_IMAP_MASTER_PASSWORD: 'not-the-master-password',
      POSTERN_WATCH: 'off',
      POSTERN_WATCH_SWEEP_MS: '0',
    });
    try {
      const p = await other.postern.admin.createProject(unique('project'));
      const user = `${unique('box')}@example.org`;
      await other.postern.admin.addInbox({ projectId: p.id, imapUser: user, addresses: [user] });
      const r = await ready(other);
      expect(r.status).to.equal(503);
      expect(r.body.checks.imap).to.equal('the master login was refused');
      expect(JSON.stringify(r.body)).to.not.include(user);
    } finally {
      await other.close();
    }
  });
});

describe('Readiness', () => {
  it('runs the checks in parallel, each within the deadline, and reports each', async () => {
    let running = 0;
    let most = 0;
    const slow = (ms: number) => async () => {
      most = Math.max(most, ++running);
      await new Promise((r) => setTimeout(r, ms));
      running--;
    };
    const r = new Readiness(
      {
        a: slow(20),
        b: slow(20),
        hung: () => new Promise(() => undefined),
        bad: async () => Promise.reject(unavailable('down for maintenance')),
        bug: async () => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:5432'), { code: 'ECONNREFUSED' })),
      },
      { timeoutMs: 200, cacheMs: 0 },
    );
    const report = await r.report();
    expect(most).to.equal(2);
    expect(report).to.deep.equal({
      ready: false,
      draining: false,
      // A DomainError's message is said; anything else only by its code (no address leaks out).
      checks: { a: 'ok', b: 'ok', hung: 'no answer within 200 ms', bad: 'down for maintenance', bug: 'failed (ECONNREFUSED)' },
    });
  });

  it('reuses a report for cacheMs, shares one under way, and says not ready once draining', async () => {
    let runs = 0;
    const r = new Readiness({ x: async () => void runs++ }, { timeoutMs: 1000, cacheMs: 60_000 });
    const [one, two] = await Promise.all([r.report(), r.report()]);
    await r.report();
    expect(runs).to.equal(1);
    expect(one).to.equal(two);
    expect(one.ready).to.equal(true);
    r.drain();
    expect(await r.report()).to.deep.equal({ ready: false, draining: true, checks: {} });
    expect(runs).to.equal(1);
  });
});
