// Where bulk changes are recorded and their answers kept (docs/organize.md, "Bulk"): one
// message.bulk event per call in the project log. A call with an Idempotency-Key records it as the
// event's dedupe key (the log's one idempotency store, 24 hours, lib/events/log.ts), and a repeat
// is answered from that event's data.
import type { EventLog } from '../events/log.ts';
import type { EventData } from '../events/types.ts';
import type { BulkAnswer, BulkChange, BulkJournal, BulkResult } from './bulk.ts';

const keyOf = (inboxId: string, key: string) => `message.bulk:${inboxId}:${key}`;

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

export class EventBulkJournal implements BulkJournal {
  constructor(private readonly events: EventLog) {}

  async prior(projectId: string, inboxId: string, key: string): Promise<BulkAnswer | null> {
    const data = await this.events.recordedUnder(projectId, keyOf(inboxId, key));
    return data ? answerOf(data) : null;
  }

  async record(
    input: { projectId: string; inboxId: string; actor: string; key?: string; change: BulkChange },
    answer: BulkAnswer,
  ): Promise<BulkAnswer> {
    const { change } = input;
    const of = (s: BulkResult['status']) => answer.results.filter((r) => r.status === s);
    const data: EventData = {
      change: change.kind,
      ...(change.kind === 'move'
        ? { to: change.to }
        : change.kind === 'destroy'
          ? { confirm: change.confirm }
          : { add: [...change.add], remove: [...change.remove] }),
      changed: of('changed').map((r) => r.id),
      unchanged: of('unchanged').map((r) => r.id),
      notFound: of('not_found').map((r) => r.id),
      refused: of('refused').map((r) => r.id),
      errors: of('refused').map((r) => r.error ?? ''),
    };
    const recorded = await this.events
      .record({
        type: 'message.bulk',
        projectId: input.projectId,
        inboxId: input.inboxId,
        actor: input.actor,
        ...(input.key !== undefined ? { subject: input.key, dedupeKey: keyOf(input.inboxId, input.key) } : {}),
        data,
      })
      .catch(async (err: unknown) => {
        // Another process's call with the same key recorded first (its answer differs from this
        // one's, so the log refuses this one as another event): the first answer is the answer.
        if (input.key === undefined) throw err;
        return null;
      });
    if (recorded === null && input.key !== undefined) {
      const first = await this.prior(input.projectId, input.inboxId, input.key);
      if (first) return { ...first, replayed: true };
    }
    return answer;
  }
}

/** The answer a message.bulk event's data holds. */
function answerOf(data: EventData): BulkAnswer {
  const errors = strings(data.errors);
  const results: BulkResult[] = [
    ...strings(data.changed).map((id) => ({ id, status: 'changed' as const })),
    ...strings(data.unchanged).map((id) => ({ id, status: 'unchanged' as const })),
    ...strings(data.notFound).map((id) => ({ id, status: 'not_found' as const })),
    ...strings(data.refused).map((id, i) => ({ id, status: 'refused' as const, ...(errors[i] ? { error: errors[i] } : {}) })),
  ];
  const count = (s: BulkResult['status']) => results.filter((r) => r.status === s).length;
  return { results, changed: count('changed'), unchanged: count('unchanged'), notFound: count('not_found'), refused: count('refused') };
}
