// What every context of the serving Postern is built on: the keys, the access decision, the bus,
// the metrics, and the request-level limits the routes share (docs/architecture.md, "Start and
// stop"). Built first; started by the contexts that use it.
import cluster from 'node:cluster';
import type { Logger } from 'pino';
import { ClusterBus } from '../../adapters/bus/cluster.ts';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { RedisBus } from '../../adapters/bus/redis.ts';
import { Access } from '../auth/access.ts';
import type { Bus } from '../bus.ts';
import type { Config } from '../config.ts';
import { EpochKeyring } from '../crypto/epoch-keys.ts';
import { MasterKey } from '../crypto/master-key.ts';
import { StreamGuard } from '../http/stream-guard.ts';
import { StreamQuota } from '../http/stream-quota.ts';
import { Validator } from '../http/validate.ts';
import { NO_METRICS, type Recorders } from '../metrics.ts';
import { Metrics } from '../prometheus.ts';
import { CredentialRate } from '../rate.ts';
import type { Store } from '../store.ts';

export interface Core {
  config: Config;
  log: Logger;
  store: Store;
  masterKey: MasterKey;
  /** Each inbox's epoch keys (lib/crypto): what the read, ingress and send paths seal to and open with. */
  keys: EpochKeyring;
  access: Access;
  validator: Validator;
  /** Prometheus metrics when POSTERN_METRICS_LISTEN is set; null: none kept. */
  metrics: Metrics | null;
  /** The metrics' recorders, or recorders that do nothing. */
  recorders: Recorders;
  bus: Bus;
  /**
   * Told when the Redis bus reconnected (what was published meanwhile is lost): the event log's
   * live feed heals from the store and inbox streams end so their clients read again.
   */
  onBusReconnect(listener: () => void): void;
  /** Each token's and session's request budgets, in this process (docs/access.md, "Rate limits"). */
  rate: CredentialRate;
  /** Ends live streams whose credential or inbox access went away (one timer for all of them). */
  streamGuard: StreamGuard;
  /** Caps the live streams of one credential and of one project (both kinds of stream). */
  streamQuota: StreamQuota;
}

export function openCore(config: Config, store: Store, log: Logger): Core {
  const masterKey = MasterKey.parse(config.masterKey);
  const keys = new EpochKeyring(store.keys, masterKey);
  const access = new Access(store.directory);
  // Off (no POSTERN_METRICS_LISTEN): recorders that do nothing, and no registry at all.
  const metrics = config.metrics ? new Metrics({ keptReads: store.keptReadsServed() !== null }) : null;
  const recorders: Recorders = metrics ?? NO_METRICS;
  const reconnected = new Set<() => void>();
  // Redis joins instances (and the workers of each); without it, a clustered instance's workers
  // talk through their primary, and a lone process needs no bus beyond itself.
  const bus: Bus = config.redisUrl
    ? new RedisBus(config.redisUrl, {
        onReconnect: () => {
          for (const listener of reconnected) listener();
        },
        log: log.child({ part: 'bus' }),
      })
    : cluster.isWorker
      ? new ClusterBus()
      : new MemoryBus();
  return {
    config,
    log,
    store,
    masterKey,
    keys,
    access,
    validator: new Validator(),
    metrics,
    recorders,
    bus,
    onBusReconnect: (listener) => void reconnected.add(listener),
    rate: new CredentialRate(config.rate, recorders.rate),
    streamGuard: new StreamGuard(access, { intervalMs: config.stream.recheckMs, log: log.child({ part: 'stream-guard' }) }),
    streamQuota: new StreamQuota({ maxPerCredential: config.stream.maxPerCredential, maxPerProject: config.stream.maxPerProject }),
  };
}
