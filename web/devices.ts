// The home screen's passkeys and sessions: each session named by its device (browser and system,
// as the server made it from the User-Agent that signed in) and its last use, each one can be
// ended; passkeys with when they were added and last used. Adding a passkey while the key is
// unlocked here wraps the key for it at once (keys.ts), so it unlocks without the passphrase.
import type { Passkey, PasskeyList, Session, SessionList } from '../schemas/wire.ts';
import { api } from './api.ts';
import { dateTexts, timeElement } from './dates.ts';
import { addUnlockingPasskey } from './keys.ts';
import { addPasskey } from './passkey.ts';
import { button, h, type Child } from './ui.ts';

const spoken = (iso: string | null) => (iso ? (dateTexts(iso)?.full ?? iso) : 'never');

function sessionRow(s: Session, refresh: () => Promise<void>): HTMLLIElement {
  const device = s.device ?? 'Unknown device';
  return h(
    'li',
    { 'data-session': s.id },
    h(
      'span',
      {},
      h('strong', { class: 'session-device' }, device),
      s.current ? ' · this device' : '',
      h('br'),
      h(
        'span',
        { class: 'muted' },
        'Last used ',
        s.current ? 'now' : timeElement(s.lastUsedAt ?? s.createdAt),
        ' · signed in ',
        timeElement(s.createdAt),
      ),
    ),
    s.current
      ? null
      : button(
          'End',
          async () => {
            await api('DELETE', `/auth/sessions/${s.id}`);
            await refresh();
          },
          { class: 'secondary', 'aria-label': `End the session on ${device}, last used ${spoken(s.lastUsedAt ?? s.createdAt)}` },
        ),
  );
}

function passkeyRow(p: Passkey, refresh: () => Promise<void>): HTMLLIElement {
  return h(
    'li',
    { 'data-passkey': p.id },
    h(
      'span',
      {},
      p.name,
      p.disabled ? ' (disabled: possible clone)' : '',
      h('br'),
      h(
        'span',
        { class: 'muted' },
        'Added ',
        timeElement(p.createdAt),
        ...(p.lastUsedAt ? [' · last used ', timeElement(p.lastUsedAt)] : []),
      ),
    ),
    button(
      'Remove',
      async () => {
        if (!confirm(`Remove the passkey "${p.name}"? The sessions it opened end too.`)) return;
        await api('DELETE', `/auth/passkeys/${p.id}`);
        await refresh();
      },
      { class: 'secondary', 'aria-label': `Remove passkey ${p.name}` },
    ),
  );
}

/** The passkeys and sessions sections of the home screen; `refresh` draws the screen again. */
export function devicesSections(passkeys: PasskeyList, sessions: SessionList, refresh: () => Promise<void>): Child[] {
  const status = h('p', { class: 'muted', id: 'passkey-status', role: 'status' });
  return [
    h('h2', {}, 'Passkeys'),
    h('ul', { class: 'list', id: 'passkeys' }, ...passkeys.passkeys.map((p) => passkeyRow(p, refresh))),
    h(
      'div',
      { class: 'actions' },
      button(
        'Add a passkey',
        async () => {
          const unlocking = await addPasskey('Another passkey');
          // The new passkey opens the key from now on when it can; said before the screen redraws.
          const unlocks = await addUnlockingPasskey(unlocking);
          await refresh();
          const after = document.getElementById('passkey-status');
          if (after) after.textContent = unlocks ? 'Passkey added. It also unlocks your encrypted mail.' : 'Passkey added.';
        },
        { class: 'secondary', id: 'add-passkey' },
      ),
    ),
    status,
    h('h2', {}, 'Where you are signed in'),
    h('ul', { class: 'list', id: 'sessions' }, ...sessions.sessions.map((s) => sessionRow(s, refresh))),
  ];
}
