// What staff commands (`postern admin …`) work with: the domain on the configured store, nothing
// that serves. Wired here, beside the entry point, not in lib/server.ts, so a staff command loads
// only what it uses: the mail server's client and the WebAuthn library are loaded by the commands
// that need them (docs/operations.md, "The postern command").
import type { Config } from '../lib/config.ts';
import { EpochKeyring } from '../lib/crypto/epoch-keys.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import { UserKeys } from '../lib/crypto/user-keys.ts';
import { Admin, type MailUsers } from '../lib/directory/admin.ts';
import { EventLog } from '../lib/events/log.ts';
import type { Passkeys } from '../lib/auth/passkeys.ts';
import type { Store } from '../lib/store.ts';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { openStore } from '../adapters/store/open.ts';

export interface Staff {
  admin: Admin;
  userKeys: UserKeys;
  store: Store;
  config: Config;
  /** Built on first use (member invite, the demo's seed). */
  passkeys(): Promise<Passkeys>;
  events: EventLog;
  close: () => Promise<void>;
}

/** Opens the configured store and builds what staff commands use on it. */
export async function openStaff(config: Config): Promise<Staff> {
  // The same POSTERN_MASTER_KEY as `serve`: only commands that make or open keys need it, and
  // they fail with the reason when it is missing or wrong (EpochKeyring throws MasterKeyError).
  let master: MasterKey | null = null;
  if (config.masterKey) master = MasterKey.parse(config.masterKey);
  const store = await openStore(config, { applicationName: 'postern admin' });
  const { directory, mailIndex } = store;
  const keys = new EpochKeyring(store.keys, master);
  // `inbox add` refuses an IMAP user the mail server does not have.
  const mailUsers: MailUsers = {
    async exists(user) {
      const { ImapMailUsers } = await import('../adapters/imap/users.ts');
      return new ImapMailUsers(config.imap).exists(user);
    },
  };
  const admin = new Admin(directory, {
    tokenTtlSeconds: config.tokenTtlSeconds,
    sessionTtlSeconds: config.sessionTtlSeconds,
    keys,
    // A running `postern serve` sees the removal within POSTERN_WATCH_CATALOG_POLL_MS (the
    // store's inbox list version) and stops watching it; a pass of it running there meanwhile
    // has its writes refused (the index's tombstone), so the index stays dropped.
    onInboxRemoved: (id) => mailIndex.dropInbox(id),
    mailUsers,
  });
  let passkeys: Promise<Passkeys> | null = null;
  const makePasskeys = async (): Promise<Passkeys> => {
    const { Passkeys } = await import('../lib/auth/passkeys.ts');
    return new Passkeys(store.passkeys, directory, {
      origin: config.app.origin,
      rpName: 'Postern',
      sessionTtlSeconds: config.sessionTtlSeconds,
      inviteTtlSeconds: config.app.inviteTtlSeconds,
    });
  };
  // What staff commands record goes to the store; a running server's readers find it there.
  const events = new EventLog(store.events, new MemoryBus(), { settleMs: config.events.settleMs });
  return {
    admin,
    userKeys: new UserKeys(store.keys, keys),
    store,
    config,
    passkeys: () => (passkeys ??= makePasskeys()),
    events,
    close: () => store.close(),
  };
}
