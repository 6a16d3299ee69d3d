// The directory's store contracts on every engine: SQLite (a temporary file, as Postern opens it)
// and PostgreSQL (a fresh database on the test environment's cluster).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { SqliteDirectoryStore } from '../../adapters/store/sqlite/directory.ts';
import { SqliteKeyBackupStore } from '../../adapters/store/sqlite/key-backups.ts';
import { SqliteKeyHandoverStore } from '../../adapters/store/sqlite/key-handovers.ts';
import { SqliteKeyStore } from '../../adapters/store/sqlite/keys.ts';
import { SqlitePasskeyStore } from '../../adapters/store/sqlite/passkeys.ts';
import { PgDirectoryStore } from '../../adapters/store/postgres/directory.ts';
import { PgKeyBackupStore } from '../../adapters/store/postgres/key-backups.ts';
import { PgKeyHandoverStore } from '../../adapters/store/postgres/key-handovers.ts';
import { PgKeyStore } from '../../adapters/store/postgres/keys.ts';
import { PgPasskeyStore } from '../../adapters/store/postgres/passkeys.ts';
import { directoryContract, keyHandoversContract, keysContract, passkeysContract, type DirectoryEngine } from './directory.contract.ts';
import { freshDatabase } from './postgres.ts';

async function sqlite(): Promise<DirectoryEngine> {
  const dir = mkdtempSync(join(tmpdir(), 'postern-contract-'));
  const db = openDb(join(dir, 'postern.db'));
  return {
    directory: new SqliteDirectoryStore(db),
    keys: new SqliteKeyStore(db),
    keyBackups: new SqliteKeyBackupStore(db),
    keyHandovers: new SqliteKeyHandoverStore(db),
    passkeys: new SqlitePasskeyStore(db),
    close: async () => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function postgres(): Promise<DirectoryEngine> {
  const fresh = await freshDatabase();
  return {
    directory: new PgDirectoryStore(fresh.pool),
    keys: new PgKeyStore(fresh.pool),
    keyBackups: new PgKeyBackupStore(fresh.pool),
    keyHandovers: new PgKeyHandoverStore(fresh.pool),
    passkeys: new PgPasskeyStore(fresh.pool),
    close: () => fresh.drop(),
  };
}

directoryContract('SQLite', { caseFoldedUniqueness: false }, sqlite);
directoryContract('PostgreSQL', { caseFoldedUniqueness: true }, postgres);
keysContract('SQLite', sqlite);
keysContract('PostgreSQL', postgres);
passkeysContract('SQLite', sqlite);
passkeysContract('PostgreSQL', postgres);
keyHandoversContract('SQLite', sqlite);
keyHandoversContract('PostgreSQL', postgres);
