// One small domain for the tests and benchmarks that need projects, members and tokens (and an
// event log) on a store without running a server: Admin with each inbox's epoch keys (no master
// key: none is made here), and the project event log on an in-memory bus, not started. Built from
// the ports, so an engine's adapters (or a whole Store) can be handed in as they are.
import type { Db } from '../../adapters/store/sqlite/db.ts';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { SqliteDirectoryStore } from '../../adapters/store/sqlite/directory.ts';
import { SqliteEventStore } from '../../adapters/store/sqlite/events.ts';
import { SqliteKeyStore } from '../../adapters/store/sqlite/keys.ts';
import { EpochKeyring } from '../../lib/crypto/epoch-keys.ts';
import type { EpochKeyStore } from '../../lib/crypto/ports.ts';
import { Admin } from '../../lib/directory/admin.ts';
import type { DirectoryStore } from '../../lib/directory/ports.ts';
import { EventLog } from '../../lib/events/log.ts';
import type { EventStore } from '../../lib/events/ports.ts';

export interface DomainPorts {
  directory: DirectoryStore;
  keys: EpochKeyStore;
  events: EventStore;
}

export interface MinimalDomain {
  admin: Admin;
  /** Not started: recording and reading need no start; a live feed does. */
  events: EventLog;
}

export function minimalDomain(ports: DomainPorts): MinimalDomain {
  return {
    admin: new Admin(ports.directory, { tokenTtlSeconds: 0, sessionTtlSeconds: 3600, keys: new EpochKeyring(ports.keys, null) }),
    events: new EventLog(ports.events, new MemoryBus(), { settleMs: 0 }),
  };
}

/** The ports minimalDomain needs, on one SQLite database. */
export function sqlitePorts(db: Db): DomainPorts {
  return { directory: new SqliteDirectoryStore(db), keys: new SqliteKeyStore(db), events: new SqliteEventStore(db) };
}
