// What staff commands (`postern admin …`) work with: the domain on the configured store, nothing
// that serves. Built by the same context modules as `postern serve` (lib/wiring/), so nothing is
// built two ways; only the parts staff use, so a staff command loads only what it uses: the mail
// server's client and the WebAuthn library are loaded by the commands that need them
// (docs/operations.md, "The postern command").
import type { Config } from '../lib/config.ts';
import { EpochKeyring } from '../lib/crypto/epoch-keys.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import type { MemberKeys } from '../lib/crypto/member-keys.ts';
import type { Admin } from '../lib/directory/admin.ts';
import type { MailUsers } from '../lib/directory/ports.ts';
import type { EventLog } from '../lib/events/log.ts';
import type { Passkeys } from '../lib/auth/passkeys.ts';
import type { Store } from '../lib/store.ts';
import { authContext } from '../lib/wiring/auth.ts';
import { eventsContext } from '../lib/wiring/events.ts';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { openStore } from '../adapters/store/open.ts';

export interface Staff {
  admin: Admin;
  memberKeys: MemberKeys;
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
  const keys = new EpochKeyring(store.keys, master);
  // `inbox add` refuses an IMAP user the mail server does not have.
  const mailUsers: MailUsers = {
    async exists(user) {
      const { ImapMailUsers } = await import('../adapters/imap/users.ts');
      return new ImapMailUsers(config.imap).exists(user);
    },
  };
  // What staff commands record goes to the store; a running server's readers find it there.
  const { events } = eventsContext({ config, store, bus: new MemoryBus() });
  const { admin, memberKeys } = authContext({
    config,
    store,
    keys,
    // A running `postern serve` sees the removal within POSTERN_WATCH_CATALOG_POLL_MS (the
    // store's inbox list version) and stops watching it; a pass of it running there meanwhile
    // has its writes refused (the index's tombstone), so the index stays dropped.
    onInboxRemoved: (id) => store.mailIndex.dropInbox(id),
    mailUsers,
  });
  let passkeys: Promise<Passkeys> | null = null;
  return {
    admin,
    memberKeys,
    store,
    config,
    passkeys: () => (passkeys ??= import('../lib/wiring/passkeys.ts').then(({ openPasskeys }) => openPasskeys(config, store, events))),
    events,
    close: () => store.close(),
  };
}
