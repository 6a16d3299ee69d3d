// The auth context: staff operations (Admin), the members' keys and key backups, on the store and
// the event log. The same for `postern serve` and staff commands (bin/staff.ts); what differs is
// only what an inbox added or removed sets going. Passkeys are lib/wiring/passkeys.ts: the
// WebAuthn library is loaded only where they are used (docs/operations.md, "The postern command").
import type { Config } from '../config.ts';
import type { EpochKeyring } from '../crypto/epoch-keys.ts';
import { KeyBackups } from '../crypto/key-backups.ts';
import { MemberKeys } from '../crypto/member-keys.ts';
import { Admin, type AdminOptions } from '../directory/admin.ts';
import type { MailUsers } from '../directory/ports.ts';
import type { Store } from '../store.ts';

export interface AuthContextOptions {
  config: Config;
  store: Store;
  keys: EpochKeyring;
  /** What adding or removing an inbox sets going: the serving process watches it; staff drop its index. */
  onInboxAdded?: AdminOptions['onInboxAdded'];
  onInboxRemoved: NonNullable<AdminOptions['onInboxRemoved']>;
  /** Staff commands: `inbox add` refuses an IMAP user the mail server does not have. */
  mailUsers?: MailUsers;
}

export interface AuthContext {
  admin: Admin;
  memberKeys: MemberKeys;
  keyBackups: KeyBackups;
}

export function authContext(o: AuthContextOptions): AuthContext {
  const admin = new Admin(o.store.directory, {
    tokenTtlSeconds: o.config.tokenTtlSeconds,
    sessionTtlSeconds: o.config.sessionTtlSeconds,
    keys: o.keys,
    ...(o.onInboxAdded ? { onInboxAdded: o.onInboxAdded } : {}),
    onInboxRemoved: o.onInboxRemoved,
    ...(o.mailUsers ? { mailUsers: o.mailUsers } : {}),
  });
  return { admin, memberKeys: new MemberKeys(o.store.keys, o.keys), keyBackups: new KeyBackups(o.store.keyBackups) };
}
