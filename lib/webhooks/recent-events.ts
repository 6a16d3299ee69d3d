// Events the dispatcher read from the log lately, kept so that sending a delivery made from them
// does not read them again (lib/webhooks/dispatcher.ts). A backlog is enqueued in reads of
// hundreds, but only what the process has room for is leased as it is made; the rest is claimed
// later, and without this each claimed batch read its bodies from the log a second time.
// Events never change once appended, so a kept one is never stale; the oldest go first once the
// kept bodies pass a size, so a run of large events holds little memory.
import type { StoredEvent } from '../events/types.ts';

/** Kept bodies' total size (UTF-16 code units, near enough bytes for the bound's purpose). */
const MAX_CHARS = 8 * 1024 * 1024;
/** At most this many events, however small. */
const MAX_EVENTS = 8192;

export class RecentEvents {
  /** By log position (unique across projects), oldest read first. */
  private readonly byPosition = new Map<number, StoredEvent>();
  private chars = 0;

  add(events: readonly StoredEvent[]): void {
    for (const ev of events) {
      if (this.byPosition.has(ev.position)) continue;
      this.byPosition.set(ev.position, ev);
      this.chars += ev.json.length;
    }
    for (const [position, ev] of this.byPosition) {
      if (this.chars <= MAX_CHARS && this.byPosition.size <= MAX_EVENTS) break;
      this.byPosition.delete(position);
      this.chars -= ev.json.length;
    }
  }

  /** The project's event at `position`, if kept. */
  get(projectId: string, position: number): StoredEvent | undefined {
    const ev = this.byPosition.get(position);
    return ev && ev.projectId === projectId ? ev : undefined;
  }
}
