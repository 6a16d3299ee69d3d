// A reload, or a tab opened from this one, keeps the session (the tab's sessionStorage) but not the
// key: the unlocked key lives in the page's memory only and is never stored in the browser. This
// screen opens it again with one passkey prompt (the PRF output of a passkey the key is wrapped
// for), or the passphrase where no passkey can, before the screen asked for is shown; never a
// sign-out. "Not now" goes on with the key locked (a Standard inbox needs no key); the home screen
// then offers to unlock. docs/app.md, "A reload: one passkey prompt, never a sign-out".
import { currentSession, SIGNED_OUT } from './api.ts';
import { howToUnlock, KeyHandedOver, unlockAgain, unlockedKey, type AskPassphrase } from './keys.ts';
import { cancelPrompt } from './passkey.ts';
import { addRoute, navigate } from './routes.ts';
import { button, h, report, show } from './ui.ts';

/** The member chose to go on locked: not asked again on this page until they ask. */
let later = false;
window.addEventListener(SIGNED_OUT, () => {
  later = false;
});

/** True when this tab is signed in but the key is locked and the member has not said "Not now". */
export function needsUnlock(): boolean {
  return !later && currentSession() !== null && unlockedKey() === null;
}

/** Unlocks the key, then `then()`; starts the passkey prompt at once (at most one). */
export async function unlockPage(ask: AskPassphrase, then: () => void): Promise<void> {
  show(h('h1', {}, 'Welcome back'), h('p', { class: 'muted' }, 'Opening your encrypted mail…'));
  const how = await howToUnlock();
  if (!how) {
    later = true;
    return then();
  }
  // Settled once: by an unlock, or by "Not now" (which withdraws the prompt still open).
  let done = false;
  const attempt = async (usePassphrase: boolean) => {
    try {
      await unlockAgain(ask, usePassphrase);
    } catch (err) {
      if (done) return;
      // The passphrase screen's "Approve from another device" unlocked it instead.
      if (err instanceof KeyHandedOver) {
        done = true;
        return then();
      }
      screen();
      report(err);
      return;
    }
    if (done) return;
    done = true;
    then();
  };
  const screen = () =>
    show(
      h('h1', {}, 'Welcome back'),
      h(
        'p',
        {},
        how.passkey
          ? 'Confirm with your passkey to open your encrypted mail on this page. You stay signed in.'
          : 'Enter your passphrase to open your encrypted mail on this page. You stay signed in.',
      ),
      h(
        'div',
        { class: 'actions' },
        how.passkey ? button('Unlock with your passkey', () => attempt(false), { id: 'unlock-passkey' }) : null,
        how.passphrase
          ? button(how.passkey ? 'Use your passphrase' : 'Enter your passphrase', () => attempt(true), {
              class: how.passkey ? 'secondary' : '',
              id: 'unlock-passphrase',
            })
          : null,
        button(
          'Not now',
          () => {
            done = true;
            later = true;
            cancelPrompt();
            then();
          },
          { class: 'secondary', id: 'unlock-later' },
        ),
      ),
    );
  screen();
  // The prompt straight away: the member reloaded to carry on, not to press a button. A browser
  // that wants a gesture first refuses it, and the button above is there.
  await attempt(!how.passkey);
}

/** `#/unlock`: from the home screen after "Not now". */
export function unlockRoute(ask: AskPassphrase): void {
  addRoute(/^#\/unlock$/, () => {
    later = false;
    return unlockPage(ask, () => navigate('#'));
  });
}
