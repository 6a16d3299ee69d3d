// Passkeys, built one way for `postern serve` and for staff commands (member invite, the demo's
// seed), always with the event log their ceremonies record to. A module of its own so a staff
// command that does not use them does not load the WebAuthn library.
import { Passkeys } from '../auth/passkeys.ts';
import type { Config } from '../config.ts';
import type { EventLog } from '../events/log.ts';
import type { Store } from '../store.ts';

export function openPasskeys(config: Config, store: Store, events: EventLog): Passkeys {
  return new Passkeys(store.passkeys, store.directory, {
    origin: config.app.origin,
    rpName: 'Postern',
    sessionTtlSeconds: config.sessionTtlSeconds,
    inviteTtlSeconds: config.app.inviteTtlSeconds,
    reauthMaxAgeSeconds: config.app.reauthMaxAgeSeconds,
    events,
  });
}
