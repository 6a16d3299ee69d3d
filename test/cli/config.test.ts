// Configuration: a setting that is set but unusable, or missing while `postern serve` needs it,
// stops start-up with a message naming it, instead of a service that answers 503 or 500.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { ROOT } from '../../lib/paths.ts';
import { envVars, mailEnv } from '../helpers/harness.ts';
import { spawnListening, stopProcess } from '../helpers/processes.ts';

const BIN = join(ROOT, 'bin', 'postern');
const PASSWORD = { POSTERN_IMAP_MASTER_PASSWORD: 'secret' };

function refusal(env: Record<string, string>, serve = true): string {
  try {
    loadConfig(env, { serve });
  } catch (err) {
    expect(err).to.be.instanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(env)}`);
}

describe('configuration', () => {
  it('serving needs the IMAP master password; the staff commands do not', () => {
    expect(refusal({})).to.match(/^POSTERN_IMAP_MASTER_PASSWORD is not set: postern serve needs/);
    expect(refusal({ POSTERN_IMAP_MASTER_PASSWORD: '' })).to.match(/^POSTERN_IMAP_MASTER_PASSWORD is not set/);
    expect(loadConfig(PASSWORD, { serve: true }).imap.masterPassword).to.equal('secret');
    expect(loadConfig({}).imap.masterPassword).to.equal('');
  });

  it('POSTERN_WATCH=auto picks push with a hint listener, else NOTIFY per inbox, and says why', () => {
    const auto = loadConfig({});
    expect(auto.watch.mode).to.equal('notify');
    expect(auto.watch.reason).to.match(/POSTERN_WATCH=auto and POSTERN_HINT_LISTEN is not set: one NOTIFY connection per inbox/);
    const push = loadConfig({ POSTERN_HINT_LISTEN: '127.0.0.1:8788', POSTERN_HINT_SECRET: 'a-secret-of-16-chars' });
    expect(push.watch.mode).to.equal('push');
    expect(push.watch.reason).to.match(/POSTERN_WATCH=auto and POSTERN_HINT_LISTEN is set/);
    expect(
      loadConfig({ POSTERN_WATCH: 'notify', POSTERN_HINT_LISTEN: '127.0.0.1:8788', POSTERN_HINT_SECRET: 'a-secret-of-16-chars' }).watch,
    ).to.deep.include({ mode: 'notify', reason: 'POSTERN_WATCH=notify' });
    expect(auto.watch).to.deep.include({ catalogPollMs: 500, fillWaitMs: 10_000 });
  });

  it('POSTERN_METRICS_LISTEN: unset keeps no metrics; host:port (IPv6 in brackets) is where they are served', () => {
    expect(loadConfig({}).metrics).to.equal(null);
    expect(loadConfig({ POSTERN_METRICS_LISTEN: '10.0.0.5:9464' }).metrics).to.deep.equal({ host: '10.0.0.5', port: 9464 });
    expect(loadConfig({ POSTERN_METRICS_LISTEN: '[::1]:9464' }).metrics).to.deep.equal({ host: '::1', port: 9464 });
  });

  it('a setting that is set but unusable is refused by name', () => {
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ REDIS_URL: 'localhost:6379' }, /^REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/],
      [{ REDIS_URL: 'http://127.0.0.1:6379' }, /^REDIS_URL must be/],
      [{ POSTERN_HOST: '' }, /^POSTERN_HOST must not be empty/],
      [{ POSTERN_DB: ' ' }, /^POSTERN_DB must not be empty/],
      [{ POSTERN_IMAP_HOST: '' }, /^POSTERN_IMAP_HOST must not be empty/],
      [{ POSTERN_IMAP_MASTER_USER: '' }, /^POSTERN_IMAP_MASTER_USER must not be empty/],
      [{ POSTERN_IMAP_MASTER_SEPARATOR: '' }, /^POSTERN_IMAP_MASTER_SEPARATOR must not be empty/],
      [{ POSTERN_PORT: '' }, /^POSTERN_PORT must be a whole number/],
      [{ POSTERN_WORKERS: 'many' }, /^POSTERN_WORKERS must be a whole number/],
      [{ POSTERN_TRUST_PROXY: 'maybe' }, /^POSTERN_TRUST_PROXY must be true or false/],
      [{ POSTERN_LOG_LEVEL: 'loud' }, /^POSTERN_LOG_LEVEL must be a pino level/],
      [{ POSTERN_BODY_IDLE_TIMEOUT_MS: '0' }, /^POSTERN_BODY_IDLE_TIMEOUT_MS must be/],
      [{ POSTERN_METRICS_LISTEN: '9464' }, /^POSTERN_METRICS_LISTEN must be host:port, got "9464"/],
      [{ POSTERN_METRICS_LISTEN: '127.0.0.1:99999' }, /^POSTERN_METRICS_LISTEN must be host:port/],
      [{ POSTERN_RATE_REQUESTS: '-1' }, /^POSTERN_RATE_REQUESTS must be a number from 0/],
      [{ POSTERN_RATE_EXPENSIVE: '.5' }, /^POSTERN_RATE_EXPENSIVE must be a number from 0/],
      [{ POSTERN_RATE_EXPENSIVE: '1e3' }, /^POSTERN_RATE_EXPENSIVE must be a number from 0/],
      [{ POSTERN_RATE_BURST: '0' }, /^POSTERN_RATE_BURST must be a whole number from 1/],
      [{ POSTERN_RATE_EXPENSIVE_BURST: '2.5' }, /^POSTERN_RATE_EXPENSIVE_BURST must be a whole number/],
    ];
    for (const [env, message] of cases) expect(refusal({ ...PASSWORD, ...env }), JSON.stringify(env)).to.match(message);
  });

  it('a Redis URL is not echoed in the refusal: it may carry a password', () => {
    expect(refusal({ ...PASSWORD, REDIS_URL: 'http://:hunter2@redis.internal' })).to.not.include('hunter2');
  });

  it('valid values are taken as given', () => {
    const config = loadConfig({ ...PASSWORD, REDIS_URL: 'rediss://:pw@redis.internal:6380/2', POSTERN_HOST: '0.0.0.0' }, { serve: true });
    expect(config.redisUrl).to.equal('rediss://:pw@redis.internal:6380/2');
    expect(config.http.host).to.equal('0.0.0.0');
    expect(loadConfig(PASSWORD).redisUrl).to.equal(null);
    // A stalled body is cut long before the whole request's deadline (nginx's client_body_timeout).
    expect(loadConfig(PASSWORD).http).to.deep.include({ bodyIdleTimeoutMs: 30_000, requestTimeoutMs: 300_000 });
    expect(loadConfig({ ...PASSWORD, POSTERN_BODY_IDLE_TIMEOUT_MS: '1500' }).http.bodyIdleTimeoutMs).to.equal(1500);
    // Request budgets: generous for every request, tighter for searches, downloads and tool calls.
    // A refusal is answered a second later (at most its Retry-After): a closed loop of retries then asks once a second.
    expect(loadConfig(PASSWORD).rate).to.deep.equal({
      requests: { perSecond: 100, burst: 200 },
      expensive: { perSecond: 10, burst: 40 },
      refusalDelayMs: 1000,
      // A credential's share of each turn of the event loop: 4 requests started, the rest in later turns.
      perTurn: 4,
    });
    expect(loadConfig({ ...PASSWORD, POSTERN_RATE_REFUSAL_DELAY_MS: '0' }).rate.refusalDelayMs).to.equal(0);
    expect(loadConfig({ ...PASSWORD, POSTERN_RATE_PER_TURN: '0' }).rate.perTurn).to.equal(0);
    expect(loadConfig({ ...PASSWORD, POSTERN_RATE_EXPENSIVE: '0.5', POSTERN_RATE_REQUESTS: '0' }).rate).to.deep.include({
      requests: { perSecond: 0, burst: 200 },
      expensive: { perSecond: 0.5, burst: 40 },
    });
  });

  describe('bin/postern serve', function () {
    this.timeout(30_000);

    /** Starts serve; resolves with its failure message, or fails the test (after stopping it) if it serves. */
    async function refusedStart(env: Record<string, string>): Promise<string> {
      let started: Awaited<ReturnType<typeof spawnListening>>;
      try {
        started = await spawnListening(BIN, ['serve'], env);
      } catch (err) {
        return (err as Error).message;
      }
      await stopProcess(started.child);
      throw new Error(`postern serve started at ${started.url} with ${JSON.stringify(env)}`);
    }

    it('refuses to start without the IMAP master password, saying why', async () => {
      const env = envVars(mailEnv(), { POSTERN_DB: join(tmpdir(), 'postern-never-created.db'), POSTERN_IMAP_MASTER_PASSWORD: '' });
      const message = await refusedStart(env);
      expect(message).to.match(/exited with 1: \{"error":"POSTERN_IMAP_MASTER_PASSWORD is not set: postern serve needs/);
    });

    it('refuses to start with a setting that is set but unusable', async () => {
      const env = envVars(mailEnv(), { POSTERN_DB: join(tmpdir(), 'postern-never-created.db'), REDIS_URL: '127.0.0.1:6379' });
      expect(await refusedStart(env)).to.match(/exited with 1: \{"error":"REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/);
    });
  });
});
