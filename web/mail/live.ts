// One inbox stream reader per inbox, shared by the screens that show it (the inbox list, an open
// message): each screen subscribes, and the stream stays open while any screen listens. Moving
// from the list to a message and back keeps the same connection: a brief grace period covers the
// moment between one screen leaving and the next subscribing.
import { SIGNED_OUT } from '../api.ts';
import type { LiveChange } from '../../schemas/wire.ts';
import { openStream } from './sse.ts';

export interface LiveHandlers {
  onChange(change: LiveChange): void;
  /**
   * The stream is connected: at once when subscribing to a connected stream (`reconnected`
   * false), then after each reconnect (true: whatever happened meanwhile must be read again).
   */
  onOpen?(reconnected: boolean): void;
  /** The stream is down and reconnecting. */
  onDown?(): void;
  /** The stream gave up for good (access gone). */
  onFail?(err: unknown): void;
}

interface Shared {
  subscribers: Set<LiveHandlers>;
  connected: boolean;
  failed: unknown;
  close(): void;
  idleTimer?: number;
}

/** Kept this long after the last screen leaves, so the next screen of the same inbox reuses it. */
const GRACE_MS = 2000;

const streams = new Map<string, Shared>();

// The session ended: no stream outlives it (the next sign-in's screens open fresh ones).
window.addEventListener(SIGNED_OUT, () => {
  for (const s of streams.values()) {
    clearTimeout(s.idleTimer);
    s.close();
  }
  streams.clear();
});

/** Listens to `inboxId`'s stream until the returned function is called. */
export function subscribe(inboxId: string, handlers: LiveHandlers): () => void {
  let shared = streams.get(inboxId);
  if (!shared) {
    const created: Shared = { subscribers: new Set(), connected: false, failed: undefined, close: () => undefined };
    const stream = openStream(`/inboxes/${inboxId}/events`, {
      onOpen: (reconnected) => {
        created.connected = true;
        for (const s of [...created.subscribers]) s.onOpen?.(reconnected);
      },
      onMessage: (m) => {
        if (m.event === 'error') {
          created.connected = false;
          for (const s of [...created.subscribers]) s.onDown?.();
          return;
        }
        let change: LiveChange;
        try {
          change = JSON.parse(m.data) as LiveChange;
        } catch {
          return;
        }
        for (const s of [...created.subscribers]) s.onChange(change);
      },
      onFail: (err) => {
        created.connected = false;
        created.failed = err;
        // Nothing more will come: the next screen opens a fresh stream (perhaps after sign-in).
        streams.delete(inboxId);
        for (const s of [...created.subscribers]) s.onFail?.(err);
      },
    });
    created.close = () => stream.close();
    shared = created;
    streams.set(inboxId, shared);
  }
  const s = shared;
  clearTimeout(s.idleTimer);
  s.subscribers.add(handlers);
  if (s.connected) handlers.onOpen?.(false);
  return () => {
    if (!s.subscribers.delete(handlers) || s.subscribers.size > 0) return;
    s.idleTimer = window.setTimeout(() => {
      if (s.subscribers.size > 0) return;
      s.close();
      if (streams.get(inboxId) === s) streams.delete(inboxId);
    }, GRACE_MS);
  };
}

/**
 * Ties a subscription to the screen at `hash`: it ends when the member moves to another screen.
 * Returns the unsubscribe, for a screen done listening before then.
 */
export function subscribeWhileOn(hash: string, inboxId: string, handlers: LiveHandlers): () => void {
  const unsubscribe = subscribe(inboxId, handlers);
  const leave = () => {
    if (location.hash === hash) return;
    window.removeEventListener('hashchange', leave);
    unsubscribe();
  };
  window.addEventListener('hashchange', leave);
  return () => {
    window.removeEventListener('hashchange', leave);
    unsubscribe();
  };
}
