// Caps on open live streams per credential and per project (docs/access.md, "How many streams and connections a caller may hold"). An inbox stream holds an
// IMAP watcher from the process's connection pool, so without a cap one caller could take every
// watcher the pool allows; a project event stream holds a socket and a subscription. Each kind is
// counted on its own: a project's dashboards never use up its inbox streams, nor the reverse.
//
// The counts are this process's (with POSTERN_WORKERS or several instances, each has its own):
// what they protect, the IMAP pool and the sockets, is per process too. docs/mail.md, "Limits".
import type { Principal } from '../auth/access.ts';
import { rateLimited } from '../errors.ts';

export type StreamKind = 'inbox' | 'events';

export interface StreamQuotaLimits {
  /** Streams of one kind one token or session may hold open (0: no cap). */
  maxPerCredential: number;
  /** Streams of one kind all credentials of one project may hold open (0: no cap). */
  maxPerProject: number;
}

/** Streams end within POSTERN_STREAM_MAX_MS at most; a retry a little later may find room. */
const RETRY_AFTER_SECONDS = 10;

export class StreamQuota {
  private readonly open = new Map<string, number>();
  /** Every open stream of each kind, capped or not (the metrics' SSE streams). */
  private readonly byKind: Record<StreamKind, number> = { inbox: 0, events: 0 };

  constructor(private readonly limits: StreamQuotaLimits) {}

  /**
   * Counts one more open stream for the caller, or throws a 429 (with Retry-After) at either cap.
   * The returned release gives the place back; calling it more than once is harmless.
   */
  take(kind: StreamKind, p: Principal): () => void {
    const { maxPerCredential, maxPerProject } = this.limits;
    const cred = credentialKey(kind, p);
    const project = projectKey(kind, p);
    const what = kind === 'inbox' ? 'inbox streams' : 'event streams';
    if (maxPerCredential > 0 && (this.open.get(cred) ?? 0) >= maxPerCredential) {
      throw rateLimited(
        `too many open ${what} for this credential (at most ${maxPerCredential}); close one or try again later`,
        RETRY_AFTER_SECONDS,
      );
    }
    if (maxPerProject > 0 && (this.open.get(project) ?? 0) >= maxPerProject) {
      throw rateLimited(
        `too many open ${what} for this project (at most ${maxPerProject}); close one or try again later`,
        RETRY_AFTER_SECONDS,
      );
    }
    this.add(cred, 1);
    this.add(project, 1);
    this.byKind[kind]++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.add(cred, -1);
      this.add(project, -1);
      this.byKind[kind]--;
    };
  }

  /** Streams open now in this process, by kind. */
  openStreams(): Record<StreamKind, number> {
    return { ...this.byKind };
  }

  private add(key: string, delta: number): void {
    const n = (this.open.get(key) ?? 0) + delta;
    if (n > 0) this.open.set(key, n);
    else this.open.delete(key);
  }
}

const credentialKey = (kind: StreamKind, p: Principal) => `${kind}|${p.kind}:${p.credentialId}`;
const projectKey = (kind: StreamKind, p: Principal) => `${kind}|project:${p.projectId}`;
