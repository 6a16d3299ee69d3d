// Hash routes: each screen module registers the fragments it answers (`#/inbox/ibx_…`, …), so
// screens are added without touching the shell. The fragment never reaches a server.
export type RouteHandler = (match: RegExpExecArray) => Promise<void> | void;

const routes: Array<{ pattern: RegExp; handler: RouteHandler }> = [];

export function addRoute(pattern: RegExp, handler: RouteHandler): void {
  routes.push({ pattern, handler });
}

/** The handler for `hash` and its match, or null for the shell's own pages. */
export function matchRoute(hash: string): { handler: RouteHandler; match: RegExpExecArray } | null {
  for (const r of routes) {
    const match = r.pattern.exec(hash);
    if (match) return { handler: r.handler, match };
  }
  return null;
}

export function navigate(hash: string): void {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = hash;
}
