// The app shell: enrollment (from an invite link), passkey sign-in, and once signed in the
// member's inboxes, passkeys and sessions, and sign-out. Other screens register hash routes
// (web/routes.ts) and are imported here for that side effect.
import type { InboxList, PasskeyList, SessionList, SignedIn } from '../schemas/wire.ts';
import { api, ApiError, currentSession, forgetSession, keepSession, SIGNED_OUT } from './api.ts';
import { devicesSections } from './devices.ts';
import { forgetKey, KeyHandedOver, openKey, setPassphrase, unlockedKey, type AskPassphrase } from './keys.ts';
import { handoverSection, receiveKeyPage } from './handover-screens.ts';
import { enroll, signIn, type Unlocking } from './passkey.ts';
import { needsUnlock, unlockPage, unlockRoute } from './unlock.ts';
import { matchRoute, navigate } from './routes.ts';
import { modeWords } from './mail/labels.ts';
import { inboxHash } from './mail/list.ts';
import './compose/compose.ts';
import './compose/outbox-screen.ts';
import './activity.ts';
import { button, h, report, show } from './ui.ts';
// Screens that register their own routes.
import { LAST_INBOX } from './mail/inbox.ts';
import './mail/message.ts';
import './mail/search.ts';

function enrollPage(invite: string): void {
  const name = h('input', { id: 'passkey-name', name: 'name', autocomplete: 'off', value: 'This device', maxlength: '100' });
  show(
    h('h1', {}, 'Set up your passkey'),
    h('p', {}, 'Your organisation invited you to Postern. Create a passkey on this device to sign in: no password needed.'),
    h('label', { for: 'passkey-name' }, 'Name for this passkey'),
    name,
    h(
      'div',
      { class: 'actions' },
      button(
        'Create passkey',
        async () => {
          const { signedIn, unlocking } = await enroll(invite, name.value);
          // The invite is spent: it must not stay in the address bar or the history.
          history.replaceState(null, '', location.pathname);
          await afterSignIn(signedIn, unlocking);
        },
        { id: 'enroll' },
      ),
    ),
  );
}

function signInPage(): void {
  show(
    h('h1', {}, 'Sign in to Postern'),
    h('p', {}, 'Use the passkey you set up from your invitation.'),
    h(
      'div',
      { class: 'actions' },
      button(
        'Sign in with a passkey',
        async () => {
          const { signedIn, unlocking } = await signIn();
          await afterSignIn(signedIn, unlocking);
        },
        { id: 'sign-in' },
      ),
    ),
  );
}

/**
 * A passphrase form that settles once the member submits it; when unlocking, or when only another
 * device can (`device`), also the way to get the key from a signed-in device (handover-screens.ts),
 * which rejects with KeyHandedOver once the key is open.
 */
const askPassphrase: AskPassphrase = (mode, error) =>
  new Promise((resolve, reject) => {
    const input = h('input', {
      id: 'passphrase',
      type: 'password',
      autocomplete: mode === 'create' ? 'new-password' : 'current-password',
      minlength: mode === 'create' ? '12' : '1',
      required: '',
    });
    const form =
      mode === 'device'
        ? null
        : h(
            'form',
            {},
            h('label', { for: 'passphrase' }, mode === 'create' ? 'Choose a passphrase (12 characters or more)' : 'Passphrase'),
            input,
            h('button', { type: 'submit', id: 'passphrase-submit' }, mode === 'create' ? 'Protect my key' : 'Unlock'),
          );
    form?.addEventListener('submit', (e) => {
      e.preventDefault();
      show(h('h1', {}, 'Working on your key…'), h('p', { class: 'muted' }, 'Deriving the key from your passphrase takes a second or two.'));
      resolve(input.value);
    });
    const again = (problem?: string) => resolve(askPassphrase(mode, problem ?? error));
    const fromDevice =
      mode === 'create'
        ? null
        : h(
            'div',
            { class: 'actions' },
            button(
              'Approve from another device',
              async () => {
                let gaveUp = false;
                try {
                  await receiveKeyPage(() => {
                    gaveUp = true;
                    again();
                  });
                } catch (err) {
                  if (!gaveUp) again(err instanceof Error ? err.message : String(err));
                  return;
                }
                if (!gaveUp) reject(new KeyHandedOver());
              },
              { class: mode === 'device' ? '' : 'secondary', id: 'handover-start' },
            ),
            mode === 'device'
              ? button('Not now', () => reject(new Error('Your encrypted mail stays locked on this device.')), {
                  class: 'secondary',
                  id: 'handover-later',
                })
              : null,
          );
    show(
      h('h1', {}, mode === 'create' ? 'Protect your key' : 'Unlock your key'),
      h(
        'p',
        {},
        mode === 'create'
          ? 'This passkey cannot protect your encryption key by itself on this device. Choose a passphrase: the server never sees it, and nobody can recover it for you.'
          : mode === 'device'
            ? 'This passkey cannot unlock your encryption key on this device. Approve this device from one where your encrypted mail is open.'
            : 'Enter the passphrase you chose to unlock your encryption key on this device, or approve this device from one where your encrypted mail is open.',
      ),
      error ? h('p', { class: 'error', role: 'alert' }, error) : null,
      form,
      fromDevice,
    );
  });

async function afterSignIn(signedIn: SignedIn, unlocking: Unlocking): Promise<void> {
  keepSession(signedIn);
  show(h('h1', {}, 'Opening your key…'));
  try {
    await openKey(signedIn.email, unlocking, askPassphrase);
  } catch (err) {
    await home();
    if (err instanceof KeyHandedOver) return;
    report(err);
    return;
  }
  // Sign-in lands in the inbox used last on this browser, when it is still the member's.
  const last = localStorage.getItem(LAST_INBOX);
  const { inboxes } = last ? await api<InboxList>('GET', '/inboxes') : { inboxes: [] };
  if (last && inboxes.some((i) => i.inboxId === last)) return navigate(inboxHash(last));
  await home();
}

/** What opens the key, in plain words (the app's names for them are no words for people). */
function unlocksWith(methods: string[]): string {
  const words = methods.map((m) =>
    m === 'prf' ? 'this passkey (and its synced copies)' : m === 'passphrase' ? 'your passphrase' : 'another way',
  );
  return `It unlocks with ${words.join(' or ')}.`;
}

async function home(): Promise<void> {
  const session = currentSession();
  if (!session) return signInPage();
  let inboxes, passkeys, sessions;
  try {
    [inboxes, passkeys, sessions] = await Promise.all([
      api<InboxList>('GET', '/inboxes'),
      api<PasskeyList>('GET', '/auth/passkeys'),
      api<SessionList>('GET', '/auth/sessions'),
    ]);
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return signInPage();
    throw err;
  }
  const key = unlockedKey();
  const handovers = await handoverSection(home);
  const passphrase = h('input', { id: 'new-passphrase', type: 'password', autocomplete: 'new-password', minlength: '12' });
  show(
    h('h1', {}, 'Your inboxes'),
    h('p', { class: 'muted' }, `Signed in as ${session.email}`),
    h(
      'ul',
      { class: 'list', id: 'inboxes' },
      ...inboxes.inboxes.map((i) =>
        h(
          'li',
          { 'data-inbox': i.inboxId },
          h('a', { href: `#/inbox/${i.inboxId}` }, i.label ?? i.inboxId),
          h('span', { class: 'muted' }, [modeWords(i.mode)?.name, i.role].filter(Boolean).join(' · ')),
        ),
      ),
    ),
    inboxes.inboxes.length === 0 ? h('p', {}, 'No inbox has been shared with you yet.') : null,
    h('h2', {}, 'Encryption key'),
    key
      ? h(
          'p',
          { id: 'key-status' },
          'Unlocked. Fingerprint ',
          h('code', { id: 'key-fingerprint' }, key.fingerprint),
          `. ${unlocksWith(key.methods)} Your public key (what others encrypt mail to you with): ${key.publicKeyStatus}.`,
        )
      : h('p', { id: 'key-status' }, 'Locked on this page. ', h('a', { href: '#/unlock', id: 'unlock-link' }, 'Unlock it')),
    key && !key.methods.includes('passphrase')
      ? h(
          'form',
          { id: 'passphrase-form' },
          h('label', { for: 'new-passphrase' }, 'Add a passphrase, to unlock on devices whose passkey cannot'),
          passphrase,
          h('button', { type: 'submit' }, 'Add passphrase'),
        )
      : null,
    ...handovers,
    ...devicesSections(passkeys, sessions, home),
    h(
      'div',
      { class: 'actions' },
      button(
        'Sign out',
        async () => {
          await api('POST', '/auth/sign-out').catch(() => undefined);
          forgetSession();
          forgetKey();
          signInPage();
        },
        { id: 'sign-out' },
      ),
    ),
  );
  document.getElementById('passphrase-form')?.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await setPassphrase(passphrase.value);
      await home();
    } catch (err) {
      report(err);
    }
  });
}

/** The invite of an enrollment link, or null; a mangled link is the member's to fix, not a crash. */
function inviteOf(hash: string): string | null {
  const raw = /^#enroll=(.+)$/.exec(hash)?.[1];
  if (!raw) return null;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

function route(): void {
  // The inbox screen counts unread mail in the tab's title; the message screen keeps its inbox's.
  if (!location.hash.startsWith('#/inbox/')) document.title = 'Postern';
  const invite = inviteOf(location.hash);
  if (invite) return enrollPage(invite);
  // A reload keeps the session but not the key: one passkey prompt, then the screen asked for.
  if (needsUnlock() && location.hash !== '#/unlock') return void unlockPage(askPassphrase, route).catch(report);
  const screen = currentSession() ? matchRoute(location.hash) : null;
  if (screen) {
    void Promise.resolve(screen.handler(screen.match)).catch(report);
    return;
  }
  void home().catch(report);
}

unlockRoute(askPassphrase);
window.addEventListener('hashchange', route);
// The session ended (here or refused by the server): whatever screen was up, with its decrypted
// mail, goes; the sign-in page replaces it. Not the enrollment page: an old session expiring
// under it (the same tab) must not end the ceremony in progress.
window.addEventListener(SIGNED_OUT, () => {
  if (!inviteOf(location.hash)) signInPage();
});
route();
