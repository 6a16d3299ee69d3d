// The mail layout (docs/app.md, "Panes"): labels | message list | reading pane on wide screens,
// one pane at a time on narrow ones. The inbox screen mounts it; a message of the same inbox opens
// in its reading pane, so the list is never rebuilt: it stays live, scrolled where it was, with the
// pages already loaded, and going back only closes the pane and puts focus back on the row.
import type { Label } from '../../schemas/wire.ts';
import type { Child } from '../ui.ts';
import { h, main } from '../ui.ts';

/** What the list offers the reading pane (inbox.ts): its actions and its rows. */
export interface ListControl {
  /** Runs an action (actions.ts) on messages of the list, optimistically, with Undo when destructive. */
  act(action: string, ids: string[], target?: string): Promise<void>;
  /** Deletes forever (Trash and Junk), once the member confirms; `confirmed` runs when they have. */
  deleteForever(ids: string[], confirmed?: () => void): Promise<void>;
  /** The message after (or, at the end, before) `msgId` in the list, for j/k and after an action. */
  neighbour(msgId: string, step: 1 | -1): string | undefined;
  /** Focuses the row of `msgId` (or the list's tab stop when it is gone). */
  focusRow(msgId: string | undefined): void;
  /** The labels a message may be moved to, for the reading pane's "Move to". */
  moveTargets(): Array<{ id: string; name: string }>;
  /** What a shortcut acts on in the list: the selection, else the row focus is on (or was last). */
  targets(): string[];
  /** Moves the list's focus `by` rows (j/k). */
  step(by: number): void;
  /** The row focus is on (or was last). */
  focused(): string | undefined;
  /** Selects or unselects that row (x). */
  toggleSelect(): void;
  /** Focuses "Move to" when there is a selection (v). */
  focusMove(): void;
  /** The label listed, and the inbox's labels. */
  label(): Label;
  labels(): Label[];
}

export interface Panes {
  inboxId: string;
  /** The list's address: going back to it closes the reading pane. */
  listHash: string;
  root: HTMLElement;
  reader: HTMLElement;
  control: ListControl;
  /** The message open in the reading pane. */
  open?: string;
  /** The row to focus when the reading pane closes, when not the message that was open (it left the list). */
  returnTo?: string;
  /** The page's scroll when the reading pane opened (one pane at a time: the list was the page). */
  scrollY: number;
}

let current: Panes | null = null;

/** The breakpoint of style.css's layout of panes side by side. */
export const wide = () => window.matchMedia('(min-width: 56rem)').matches;

/** The layout: the three panes as `show()` takes them, and the state the message screen finds. */
export function mountPanes(
  inboxId: string,
  listHash: string,
  labels: Child[],
  list: Child[],
  control: ListControl,
): { root: HTMLElement; panes: Panes } {
  const reader = h('section', { class: 'pane pane-reader', id: 'reader', 'aria-label': 'Message' }, placeholder());
  const root = h(
    'div',
    { class: 'panes', id: 'panes', 'data-pane': 'list' },
    h('div', { class: 'pane pane-labels' }, ...labels),
    h('section', { class: 'pane pane-list', 'aria-labelledby': 'label-heading' }, ...list),
    reader,
  );
  const panes: Panes = { inboxId, listHash, root, reader, control, scrollY: 0 };
  current = panes;
  return { root, panes };
}

const placeholder = () => h('p', { class: 'muted reader-empty' }, 'Choose a message to read it here.');

/** The mounted panes of `inboxId`, while they are on screen. */
export function panesFor(inboxId: string): Panes | null {
  return current && current.inboxId === inboxId && main().contains(current.root) ? current : null;
}

/** The panes on screen, whichever inbox. */
export const shownPanes = (): Panes | null => (current && main().contains(current.root) ? current : null);

/** Shows `children` in the reading pane, for `msgId`; focus goes to its heading, as `show()` does. */
export function showInReader(p: Panes, msgId: string, ...children: Child[]): void {
  if (p.root.dataset.pane !== 'reader') p.scrollY = window.scrollY;
  p.root.dataset.pane = 'reader';
  p.open = msgId;
  for (const a of p.root.querySelectorAll('li.message > a[aria-current]')) a.removeAttribute('aria-current');
  p.root.querySelector(`li.message[data-msg="${msgId}"] > a`)?.setAttribute('aria-current', 'true');
  p.reader.replaceChildren(...children.filter((c): c is Node | string => c !== null && c !== false));
  p.reader.scrollTop = 0;
  if (!wide()) window.scrollTo(0, 0);
  const heading = p.reader.querySelector('h1');
  if (heading) {
    heading.setAttribute('tabindex', '-1');
    heading.focus({ preventScroll: true });
  }
}

/** Back to the list: the reading pane empties, the page scrolls back and focus returns to the row. */
export function closeReader(p: Panes, focusOn?: string): void {
  const was = p.open;
  const returnTo = p.returnTo;
  p.open = undefined;
  p.returnTo = undefined;
  p.root.dataset.pane = 'list';
  for (const a of p.root.querySelectorAll('li.message > a[aria-current]')) a.removeAttribute('aria-current');
  p.reader.replaceChildren(placeholder());
  if (!wide()) window.scrollTo(0, p.scrollY);
  p.control.focusRow(focusOn ?? returnTo ?? was);
}
