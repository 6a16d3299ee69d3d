// The bar that says what an action did and offers Undo for a few seconds (docs/app.md, "Actions").
// One at a time: a new action's bar replaces the last (whose change then stands). It lives beside
// <main>, so a screen change does not take it; the session ending does. Its words are a status
// message; the Undo button sits outside that live region (a screen reader hears the words once).
import { SIGNED_OUT } from '../api.ts';
import { h, report } from '../ui.ts';

/** How long Undo is offered. */
export const UNDO_MS = 8000;

let bar: HTMLElement | null = null;
let pending: { undo?: () => Promise<void>; timer: number; refocus: () => void } | null = null;

function theBar(): HTMLElement {
  if (bar?.isConnected) return bar;
  bar = h('div', { class: 'undo-bar', id: 'undo-bar', hidden: '' }, h('p', { role: 'status', id: 'undo-status' }));
  document.body.append(bar);
  return bar;
}

/** Hides the bar; focus on its button goes back where the action left it. */
function hide(): void {
  const b = theBar();
  const hadFocus = b.contains(document.activeElement);
  const was = pending;
  if (was) clearTimeout(was.timer);
  pending = null;
  b.querySelector('button')?.remove();
  b.hidden = true;
  if (hadFocus) was?.refocus();
}

/** Says `text`; with `undo`, offers it for UNDO_MS. `refocus` puts focus back if it was on the bar. */
export function offer(text: string, undo?: () => Promise<void>, refocus: () => void = () => undefined): void {
  hide();
  const b = theBar();
  b.hidden = false;
  b.querySelector('#undo-status')!.textContent = undo ? `${text} Undo with z or the button.` : text;
  if (!undo) {
    pending = { timer: window.setTimeout(hide, UNDO_MS), refocus };
    return;
  }
  const button = h('button', { type: 'button', id: 'undo', class: 'secondary' }, 'Undo');
  button.addEventListener('click', () => void undoLast());
  b.append(button);
  pending = { undo, timer: window.setTimeout(hide, UNDO_MS), refocus };
}

/** Undoes the last action while its bar is up; false when there is none. */
export async function undoLast(): Promise<boolean> {
  const was = pending;
  if (!was?.undo) return false;
  const b = theBar();
  const hadFocus = b.contains(document.activeElement);
  clearTimeout(was.timer);
  pending = null;
  b.querySelector('button')?.remove();
  b.querySelector('#undo-status')!.textContent = 'Undoing…';
  if (hadFocus) was.refocus();
  try {
    await was.undo();
    b.querySelector('#undo-status')!.textContent = 'Undone.';
    pending = { timer: window.setTimeout(hide, 3000), refocus: was.refocus };
  } catch (err) {
    hide();
    report(err);
  }
  return true;
}

window.addEventListener(SIGNED_OUT, () => {
  hide();
});
