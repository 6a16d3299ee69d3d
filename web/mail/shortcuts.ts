// Keyboard shortcuts in the Gmail convention (docs/app.md, "Keyboard"): j/k, o, u, e, #, s, x, r,
// a, f, c, /, ? and a few more, on the list (the row focus is on, or the selection) or on the
// open message. Single-key shortcuts can be turned off in their help dialog (WCAG 2.1.4,
// "Character Key Shortcuts"); the arrow keys in the list, Enter and Space are not character keys
// and stay. The setting is kept in this browser (localStorage): it is no secret.
import { h, report } from '../ui.ts';
import { matchRoute, navigate } from '../routes.ts';
import { shownSummary } from './list.ts';
import { shownPanes, type Panes } from './panes.ts';
import { undoLast } from './undo.ts';

const SETTING = 'postern.shortcuts';

export const shortcutsOn = () => localStorage.getItem(SETTING) !== 'off';

const KEYS: Array<[string, string]> = [
  ['j / k', 'Next / previous message'],
  ['o or Enter', 'Open the message'],
  ['u', 'Back to the list'],
  ['e', 'Archive'],
  ['#', 'Delete (to Trash)'],
  ['!', 'Junk (in Junk: not junk)'],
  ['s', 'Flag or unflag'],
  ['Shift+I / Shift+U', 'Mark read / unread'],
  ['x or Space', 'Select the message in the list'],
  ['v', 'Move the selected messages'],
  ['z', 'Undo'],
  ['r / a / f', 'Reply / reply all / forward'],
  ['c', 'Compose'],
  ['/', 'Search'],
  ['?', 'This help'],
];

let dialog: HTMLDialogElement | null = null;

function helpDialog(): HTMLDialogElement {
  if (dialog?.isConnected) return dialog;
  const on = h('input', { type: 'checkbox', id: 'shortcuts-on', ...(shortcutsOn() ? { checked: '' } : {}) });
  on.addEventListener('change', () => {
    if (on.checked) localStorage.removeItem(SETTING);
    else localStorage.setItem(SETTING, 'off');
  });
  const close = h('button', { type: 'button', id: 'shortcuts-close' }, 'Close');
  const d = h(
    'dialog',
    { id: 'shortcuts-help', 'aria-labelledby': 'shortcuts-title' },
    h('h2', { id: 'shortcuts-title' }, 'Keyboard shortcuts'),
    h('label', { class: 'check' }, on, ' Use single-key shortcuts (turn off if they get in the way of speech input or other tools)'),
    h('dl', { class: 'keys' }, ...KEYS.flatMap(([k, what]) => [h('dt', {}, h('kbd', {}, k)), h('dd', {}, what)])),
    h('p', { class: 'muted' }, 'In the list, the arrow keys, Home and End move between messages whatever this setting.'),
    close,
  );
  close.addEventListener('click', () => d.close());
  document.body.append(d);
  dialog = d;
  return d;
}

/** Opens the help (and the setting), giving focus back to where it was when it closes. */
export function openHelp(): void {
  const d = helpDialog();
  if (d.open) return;
  const from = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  d.querySelector<HTMLInputElement>('#shortcuts-on')!.checked = shortcutsOn();
  d.addEventListener('close', () => from?.isConnected && from.focus(), { once: true });
  d.showModal();
}

/** The button that opens the help: the setting is reachable with shortcuts off too. */
export const helpButton = () => {
  const b = h('button', { type: 'button', class: 'secondary', id: 'shortcuts' }, 'Shortcuts');
  b.addEventListener('click', openHelp);
  return b;
};

/** Typing somewhere: keys are text there, not shortcuts. */
function typing(target: EventTarget | null): boolean {
  if (!(target instanceof HTMLElement)) return false;
  if (target.isContentEditable || target instanceof HTMLTextAreaElement || target instanceof HTMLSelectElement) return true;
  return target instanceof HTMLInputElement && !['checkbox', 'radio', 'button', 'submit', 'reset'].includes(target.type);
}

const click = (id: string) => {
  const el = document.getElementById(id);
  if (!(el instanceof HTMLElement) || el.getClientRects().length === 0) return false;
  el.click();
  return true;
};

/** The message shown on its own or in the reading pane, and whether keys go to it rather than the list. */
function messageOpen(p: Panes | null): string | undefined {
  if (!document.getElementById('message-actions')) return undefined;
  const id = /\/message\/(msg_[0-9A-Z]{26})$/.exec(location.hash)?.[1];
  // With the list beside it, focus on a row means the list's row.
  if (p && document.activeElement?.closest('#messages')) return undefined;
  return id;
}

/** Where a row of the list leads: its message, or its conversation when the list is grouped. */
const rowHref = (id: string) => document.querySelector(`#messages li.message[data-msg="${id}"] > a`)?.getAttribute('href');

const inboxOf = () => /^#\/inbox\/(ibx_[0-9A-Z]{26})/.exec(location.hash)?.[1] ?? shownPanes()?.inboxId;

function reply(inboxId: string, msgId: string, how: 'reply' | 'reply-all' | 'forward'): void {
  const wanted = `#/compose/${inboxId}/${how}/${msgId}`;
  // Reply all is the compose screen's to offer; until it does, a reply.
  navigate(matchRoute(wanted) ? wanted : `#/compose/${inboxId}/reply/${msgId}`);
}

function onKey(e: KeyboardEvent): void {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
  if (typing(e.target) || (dialog?.open && e.key !== '?')) return;
  // Another modal dialog (Delete forever's question) is answered before any shortcut acts.
  if (document.querySelector('dialog[open]:not(#shortcuts-help)')) return;
  if (e.key.length !== 1 || !shortcutsOn()) return;
  const key = e.key;
  const p = shownPanes();
  const inboxId = inboxOf();
  const open = messageOpen(p);
  const handled = (() => {
    if (key === '?') return (openHelp(), true);
    if (key === 'z') return (void undoLast(), true);
    if (key === '/') return document.getElementById('search') ? (document.getElementById('search')!.focus(), true) : false;
    if (key === 'c' && inboxId) return (navigate(`#/compose/${inboxId}`), true);
    if (open && inboxId) {
      if ((key === 'j' || key === 'k') && p) {
        // The next (or previous) message in the list; none past either end.
        const step = key === 'j' ? 1 : -1;
        const next = p.control.neighbour(open, step);
        const href = next && p.control.neighbour(next, step === 1 ? -1 : 1) === open ? rowHref(next) : null;
        if (href) navigate(href);
        return true;
      }
      if (key === 'u') return click('back');
      if (key === 'e') return click('msg-archive');
      if (key === '#') return click('msg-trash');
      if (key === '!') return click('msg-junk');
      if (key === 's') return click('toggle-flagged');
      if (key === 'I') return document.getElementById('toggle-seen')?.getAttribute('aria-pressed') === 'false' && click('toggle-seen');
      if (key === 'U') return click('msg-unread');
      if (key === 'v') return (document.getElementById('msg-move-to')?.focus(), true);
      if (key === 'r' || key === 'a' || key === 'f')
        return (reply(inboxId, open, key === 'r' ? 'reply' : key === 'a' ? 'reply-all' : 'forward'), true);
      return false;
    }
    if (!p) return false;
    const c = p.control;
    const targets = c.targets();
    const flaggedAll = targets.length > 0 && targets.every((id) => shownSummary(id)?.flags.includes('flagged'));
    const junk = c.label().specialUse === '\\Junk' ? 'not-junk' : 'junk';
    const actions: Record<string, () => void> = {
      j: () => c.step(1),
      k: () => c.step(-1),
      o: () => {
        const href = c.focused() && rowHref(c.focused()!);
        if (href) navigate(href);
      },
      x: () => c.toggleSelect(),
      u: () => void click('back'),
      e: () => void c.act('archive', targets).catch(report),
      '#': () => void c.act('trash', targets).catch(report),
      '!': () => void c.act(junk, targets).catch(report),
      s: () => void c.act(flaggedAll ? 'unflag' : 'flag', targets).catch(report),
      I: () => void c.act('read', targets).catch(report),
      U: () => void c.act('unread', targets).catch(report),
      v: () => c.focusMove(),
      r: () => c.focused() && reply(p.inboxId, c.focused()!, 'reply'),
      a: () => c.focused() && reply(p.inboxId, c.focused()!, 'reply-all'),
      f: () => c.focused() && reply(p.inboxId, c.focused()!, 'forward'),
    };
    const run = actions[key];
    if (!run) return false;
    run();
    return true;
  })();
  if (handled) e.preventDefault();
}

document.addEventListener('keydown', onKey);
