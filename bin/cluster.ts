// `postern serve` with POSTERN_WORKERS > 1: this process is the primary. It forks the workers
// (each a whole Postern on the shared port and store), relays the live bus between them when
// there is no Redis, replaces a worker that dies, and on SIGINT/SIGTERM stops them all in order:
// each worker shuts down as a lone process does (POSTERN_SHUTDOWN_GRACE_MS for its requests).
// One Node process serves on one core; the workers are how one instance uses the machine's others.
import cluster, { type Worker } from 'node:cluster';
import { relayClusterBus } from '../adapters/bus/cluster.ts';
import { listenMetrics, type MetricsServer } from '../lib/http/metrics-server.ts';
import { clusterMetrics } from '../lib/prometheus.ts';
import { untilSignal } from './signals.ts';

/** What a worker tells the primary once it listens. */
export interface ListeningMessage {
  postern: 'listening';
  url: string;
}

export function isListeningMessage(value: unknown): value is ListeningMessage {
  return typeof value === 'object' && value !== null && (value as ListeningMessage).postern === 'listening';
}

/** A stopping worker is killed this long after its shutdown grace (its close: IMAP, the store). */
const CLOSE_MS = 10_000;
/** A worker that dies sooner than this after starting is restarted with a growing delay. */
const STABLE_MS = 10_000;
const MAX_RESTART_DELAY_MS = 30_000;

const note = (obj: object) => process.stderr.write(`${JSON.stringify({ cluster: 'primary', ...obj })}\n`);

/**
 * Runs the workers until a signal. Resolves with the exit code: 0 after a clean stop, 1 when the
 * workers could not start (a bad port, an unreadable store: restarting would not help).
 */
export async function runPrimary(
  workers: number,
  shutdownGraceMs: number,
  metricsListen: { host: string; port: number } | null = null,
): Promise<number> {
  // The kernel hands connections out, not the primary: with round-robin, a connection handed to a
  // worker that dies before taking it stays open in the primary, unanswered, for good (Node's
  // RoundRobinHandle only closes it on the worker's reply). One hung client per worker killed.
  cluster.schedulingPolicy = cluster.SCHED_NONE;
  // The workers run this same program with the same flags (the TypeScript loader among them).
  cluster.setupPrimary({ serialization: 'advanced' });
  // POSTERN_METRICS_LISTEN: served here, every worker's registry asked for and aggregated per
  // scrape. Bound before any worker starts: an address in use stops the start, not a worker.
  let metrics: MetricsServer | null = null;
  if (metricsListen) {
    try {
      metrics = await listenMetrics(metricsListen, clusterMetrics(), (err) =>
        note({ event: "gathering the workers' metrics failed", error: (err as Error).message }),
      );
    } catch (err) {
      process.stdout.write(
        `${JSON.stringify({ error: `POSTERN_METRICS_LISTEN: cannot listen on ${metricsListen.host}:${metricsListen.port}: ${(err as Error).message}` })}\n`,
      );
      return 1;
    }
  }
  const stopRelay = relayClusterBus();
  let stopping = false;
  let isReady = false;
  // Doubled before the first early restart: that one waits 1 s.
  let restartDelay = 500;
  const restarts = new Set<NodeJS.Timeout>();
  const started = new Map<Worker, number>();

  let resolveReady!: (url: string) => void;
  let rejectReady!: (err: Error) => void;
  const ready = new Promise<string>((resolve, reject) => {
    resolveReady = resolve;
    rejectReady = reject;
  });
  let listening = 0;

  const fork = (): void => {
    const worker = cluster.fork();
    started.set(worker, Date.now());
    // A message sent to a worker that just died (its channel closing) fails with an 'error' on it;
    // unheard, that would throw in the primary and take every other worker down with it. Its
    // 'exit' below replaces it.
    worker.on('error', (err) => note({ event: 'worker channel error', pid: worker.process.pid, error: err.message }));
    worker.on('message', (m: unknown) => {
      if (!isListeningMessage(m)) return;
      if (++listening === workers && !isReady) {
        isReady = true;
        resolveReady(m.url);
      }
    });
    worker.on('exit', (code, signal) => {
      const lived = Date.now() - (started.get(worker) ?? 0);
      started.delete(worker);
      if (stopping) return;
      if (!isReady) {
        rejectReady(new Error(`worker ${worker.process.pid} exited before listening (code ${code ?? signal})`));
        return;
      }
      restartDelay = lived < STABLE_MS ? Math.min(restartDelay * 2, MAX_RESTART_DELAY_MS) : 1000;
      note({ event: 'worker exited; restarting', pid: worker.process.pid, code, signal, inMs: restartDelay });
      // Not unref'd: with every worker dead, this timer is what keeps the primary alive to restart them.
      const timer = setTimeout(() => {
        restarts.delete(timer);
        if (!stopping) fork();
      }, restartDelay);
      restarts.add(timer);
    });
  };

  const stopAll = async (): Promise<void> => {
    stopping = true;
    for (const timer of restarts) clearTimeout(timer);
    const live = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead());
    await Promise.all(
      live.map(
        (w) =>
          new Promise<void>((resolve) => {
            const kill = setTimeout(() => w.process.kill('SIGKILL'), shutdownGraceMs + CLOSE_MS);
            w.once('exit', () => {
              clearTimeout(kill);
              resolve();
            });
            w.process.kill('SIGTERM');
          }),
      ),
    );
    stopRelay();
    await metrics?.close();
  };

  for (let i = 0; i < workers; i++) fork();
  const signal = untilSignal();
  const outcome = await Promise.race([
    ready.then(
      (u) => ({ url: u }),
      (err: Error) => ({ err }),
    ),
    signal.then(() => null),
  ]);
  if (outcome && 'err' in outcome) {
    note({ error: outcome.err.message });
    await stopAll();
    return 1;
  }
  if (outcome) {
    process.stdout.write(
      `${JSON.stringify({ listening: outcome.url, baseUrl: `${outcome.url}/v1`, appUrl: `${outcome.url}/api/v1`, workers, ...(metrics ? { metrics: `${metrics.url}/metrics` } : {}) })}\n`,
    );
    await signal;
  }
  await stopAll();
  return 0;
}
