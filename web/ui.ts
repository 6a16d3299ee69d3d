// The app's DOM toolkit: pages are built with DOM calls, never from HTML strings, so no
// server-supplied text can become markup (the CSP allows no inline script either).
export type Child = Node | string | null | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== false) el.append(c);
  return el;
}

export const main = (): HTMLElement => document.getElementById('app')!;

/** Replaces the page and moves focus to its heading, so keyboard and screen-reader users follow. */
export function show(...children: Child[]): void {
  const root = main();
  root.replaceChildren(...children.filter((c): c is Node | string => c !== null && c !== false));
  const heading = root.querySelector('h1');
  if (heading) {
    heading.setAttribute('tabindex', '-1');
    heading.focus();
  }
}

/** A button that runs `onClick` once at a time and reports what it throws. */
export function button(label: string, onClick: () => Promise<void> | void, attrs: Record<string, string> = {}): HTMLButtonElement {
  const b = h('button', { type: 'button', ...attrs }, label);
  b.addEventListener('click', async () => {
    // Disabling a focused button drops focus to the page: a keyboard user would lose their place.
    const hadFocus = document.activeElement === b;
    b.disabled = true;
    try {
      await onClick();
    } catch (err) {
      report(err);
    } finally {
      b.disabled = false;
      if (hadFocus && b.isConnected && (document.activeElement === document.body || document.activeElement === null)) b.focus();
    }
  });
  return b;
}

/** Shows an error at the top of the page, in the alert region. */
export function report(err: unknown): void {
  const message = err instanceof Error ? err.message : String(err);
  let box = document.getElementById('error');
  if (!box) {
    box = h('p', { id: 'error', class: 'error', role: 'alert' });
    main().prepend(box);
  }
  box.textContent = message;
}

/**
 * Asks before something that cannot be undone: a modal dialog (Escape or Cancel: no), focus on
 * Cancel first, and back where it was when it closes. Resolves true when `yes` was chosen.
 */
export function confirmDialog(title: string, text: string, yes: string): Promise<boolean> {
  const from = document.activeElement instanceof HTMLElement ? document.activeElement : null;
  const confirm = h('button', { type: 'button', id: 'confirm-yes', class: 'danger' }, yes);
  const cancel = h('button', { type: 'button', id: 'confirm-no', class: 'secondary' }, 'Cancel');
  const d = h(
    'dialog',
    { id: 'confirm', 'aria-labelledby': 'confirm-title', 'aria-describedby': 'confirm-text' },
    h('h2', { id: 'confirm-title' }, title),
    h('p', { id: 'confirm-text' }, text),
    h('div', { class: 'actions' }, cancel, confirm),
  );
  document.getElementById('confirm')?.remove();
  document.body.append(d);
  return new Promise((resolve) => {
    let answer = false;
    confirm.addEventListener('click', () => {
      answer = true;
      d.close();
    });
    cancel.addEventListener('click', () => d.close());
    d.addEventListener(
      'close',
      () => {
        d.remove();
        if (from?.isConnected) from.focus();
        resolve(answer);
      },
      { once: true },
    );
    d.showModal();
    cancel.focus();
  });
}
