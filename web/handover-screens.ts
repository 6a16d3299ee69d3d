// The two screens of handing the key to a new device (docs/app.md, "A new device: approved from a
// signed-in one"): the new device asks and shows its short code until a signed-in device approves;
// the signed-in device lists the waiting requests with their codes, and approves one after a
// passkey confirmation by sealing the data key to it (web/handover.ts).
import type { KeyHandover, KeyHandoverList } from '../schemas/wire.ts';
import { api } from './api.ts';
import { openFrom, requestKeys, sealTo, shortCode } from './handover.ts';
import { adoptKey, handoverSecret, unlockedKey } from './keys.ts';
import { confirmHere } from './passkey.ts';
import { button, h, show, type Child } from './ui.ts';

const POLL_MS = 2000;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The new device: asks, shows the code, waits for the approval, opens the key. Resolves once the
 * key is unlocked here; `back` (the member gave up) ends the request and returns to the screen before.
 */
export async function receiveKeyPage(back: () => void): Promise<void> {
  const keys = await requestKeys();
  const request = await api<KeyHandover>('POST', '/me/key-handovers', { publicKey: keys.publicKey });
  let cancelled = false;
  const end = () => api('DELETE', `/me/key-handovers/${request.id}`).catch(() => undefined);
  show(
    h('h1', {}, 'Approve from another device'),
    h(
      'p',
      {},
      'On a device where you are signed in and your encrypted mail is open, go to the home screen and approve this device. Check that it shows the same code:',
    ),
    h('p', { class: 'handover-code', id: 'handover-code' }, await shortCode(keys.publicKey)),
    h('p', { class: 'muted', role: 'status', id: 'handover-status' }, 'Waiting for your approval…'),
    h(
      'div',
      { class: 'actions' },
      button(
        'Cancel',
        async () => {
          cancelled = true;
          await end();
          back();
        },
        { class: 'secondary', id: 'handover-cancel' },
      ),
    ),
  );
  const expires = Date.parse(request.expiresAt);
  while (!cancelled) {
    await sleep(POLL_MS);
    if (cancelled) return;
    let now: KeyHandover;
    try {
      now = await api<KeyHandover>('GET', `/me/key-handovers/${request.id}`);
    } catch (err) {
      if (Date.now() > expires) throw new Error('The request expired: ask again.');
      throw err;
    }
    if (now.status !== 'approved' || !now.approverKey || !now.sealed) continue;
    const secret = await openFrom(keys, now.approverKey, now.sealed);
    await adoptKey(secret);
    await end();
    return;
  }
}

function requestRow(r: KeyHandover, code: string, refresh: () => Promise<void>): HTMLLIElement {
  const device = r.device ?? 'Unknown device';
  return h(
    'li',
    { 'data-handover': r.id },
    h('span', {}, h('strong', {}, device), h('br'), h('span', { class: 'muted' }, 'Code ', h('span', { class: 'handover-code' }, code))),
    h(
      'span',
      { class: 'actions' },
      button(
        'Approve',
        async () => {
          const secret = handoverSecret();
          if (!secret) throw new Error('Unlock your encrypted mail here first.');
          await confirmHere();
          const sealed = await sealTo(r.requesterKey, secret);
          secret.fill(0);
          await api('POST', `/me/key-handovers/${r.id}/approve`, sealed);
          await refresh();
        },
        { 'aria-label': `Approve ${device}, code ${code}` },
      ),
      button(
        'Refuse',
        async () => {
          await api('DELETE', `/me/key-handovers/${r.id}`);
          await refresh();
        },
        { class: 'secondary', 'aria-label': `Refuse ${device}, code ${code}` },
      ),
    ),
  );
}

/** The home screen's waiting requests, when the key is unlocked here and there are any. */
export async function handoverSection(refresh: () => Promise<void>): Promise<Child[]> {
  if (!unlockedKey()) return [];
  const { handovers } = await api<KeyHandoverList>('GET', '/me/key-handovers');
  const waiting = handovers.filter((r) => r.status === 'pending' && !r.mine);
  if (!waiting.length) return [];
  const rows = await Promise.all(waiting.map(async (r) => requestRow(r, await shortCode(r.requesterKey), refresh)));
  return [
    h('h2', {}, 'Devices asking for your key'),
    h('p', {}, 'Approve only a device you are signing in on now, and only when it shows the same code.'),
    h('ul', { class: 'list', id: 'handovers' }, ...rows),
  ];
}
