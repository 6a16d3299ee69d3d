// Which version of a registered type an event is recorded as (docs/events.md, "Registered
// types"): registering v2 must not break producers still sending v1-shaped data.
import { checkData } from './schemas.ts';
import type { EventData, EventType } from './types.ts';

/**
 * The newest version, of `versions` (newest first), that is not deprecated and whose schema
 * `data` matches; null when none does.
 */
export function newestMatching(versions: readonly EventType[], data: EventData): EventType | null {
  for (const t of versions) {
    if (t.status !== 'deprecated' && checkData(t.dataSchema, data) === null) return t;
  }
  return null;
}
