// Talking to Postern's {app_url}. The session token lives in sessionStorage: it survives a reload
// of this tab but not the tab, is never sent by the browser on its own (no cookie, so no CSRF),
// and is not shared with other tabs as localStorage would be (docs/app.md).
import type { SignedIn } from '../schemas/wire.ts';

const APP_URL = '/api/v1';
const SESSION_KEY = 'postern.session';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export function currentSession(): SignedIn | null {
  const raw = sessionStorage.getItem(SESSION_KEY);
  if (!raw) return null;
  try {
    const s = JSON.parse(raw) as SignedIn;
    if (Date.parse(s.expiresAt) > Date.now()) return s;
  } catch {
    // Not ours to read: dropped below like an expired one.
  }
  // Expired here: ended as a sign-out is, so the key and decrypted mail go too (SIGNED_OUT).
  forgetSession();
  return null;
}

export function keepSession(s: SignedIn): void {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
}

/**
 * Fired on `window` whenever the session ends here (sign-out, or the server refusing it): every
 * module holding the member's secrets or decrypted mail (keys.ts, mail/open.ts, mail/message.ts)
 * drops them on it, so nothing outlives the session in this tab's memory or DOM.
 */
export const SIGNED_OUT = 'postern:signed-out';

export function forgetSession(): void {
  sessionStorage.removeItem(SESSION_KEY);
  window.dispatchEvent(new Event(SIGNED_OUT));
}

/** A JSON request; the session header when signed in. Errors carry the server's message. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  const session = currentSession();
  if (session) headers['x-svc-token'] = session.session;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${APP_URL}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  if (res.status === 204) return undefined as T;
  const data = (await res.json().catch(() => ({ error: `HTTP ${res.status}` }))) as T & { error?: string };
  if (!res.ok) {
    // A session the server refused is over here too.
    if (res.status === 401 && session) forgetSession();
    throw new ApiError(res.status, data.error ?? `HTTP ${res.status}`);
  }
  return data;
}

/** A request whose body is not JSON (`/raw`, the inbox stream): the Response, or the server's error. */
export async function apiFetch(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  const session = currentSession();
  if (session) headers.set('x-svc-token', session.session);
  const res = await fetch(`${APP_URL}${path}`, { ...init, headers });
  if (!res.ok) {
    const data = (await res.json().catch(() => ({}))) as { error?: string };
    if (res.status === 401 && session) forgetSession();
    throw new ApiError(res.status, data.error ?? `HTTP ${res.status}`);
  }
  return res;
}
