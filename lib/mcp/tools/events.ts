// The project event log (docs/api.md, "Events"): list_events, the twin of GET /events read as pages, and
// publish_event, the twin of POST /events, with the same checks in the same order.
import type { Access } from '../../auth/access.ts';
import type { EventLog } from '../../events/log.ts';
import { publishAs, publishKeyed, type PublishRequest } from '../../events/publish-as.ts';
import { filterFor, startPosition, type EventsQuery } from '../../events/query.ts';
import { untrusted, UNTRUSTED_NOTICE } from '../text.ts';
import { tool, type Tool } from '../tool.ts';

interface PublishArgs extends PublishRequest {
  idempotencyKey?: string;
}

export function eventTools(access: Access, events: EventLog): Tool[] {
  return [
    tool<EventsQuery>({
      name: 'list_events',
      title: 'List events',
      description:
        "A page of the project's events, oldest first, that this token may see. Pass the answer's cursor as `after` for the next page.",
      rule: { token: 'events:read', session: true },
      input: 'ListEventsInput',
      async run(p, q) {
        const filter = await filterFor(access, p, q);
        const cursors = await events.cursors();
        const after = (await startPosition(events, p, q.after, cursors)) ?? 0;
        const page = await events.page(filter, after, q.limit);
        const list = page.events.map((e) => JSON.parse(e.json) as Record<string, unknown>);
        // A subject is another caller's (publish_event), or an outside mail's Message-ID (message.received).
        const lines = list.map(
          (e) => `${String(e.id)} ${String(e.type)} at ${String(e.time)}${e.subject ? ` subject ${String(e.subject)}` : ''}`,
        );
        const text = `${list.length === 0 ? 'No events.' : untrusted(lines.join('\n'))}\nNext page: after=${page.cursor}`;
        return { structured: { events: list, cursor: page.cursor, notice: UNTRUSTED_NOTICE }, text };
      },
    }),

    tool<PublishArgs>({
      name: 'publish_event',
      title: 'Publish an event',
      description:
        "Publishes an event of a registered type to the project's event log. With idempotencyKey, a repeat answers with the first event.",
      rule: { token: 'events:write', session: false },
      input: 'PublishEventInput',
      async run(p, body) {
        const key = body.idempotencyKey;
        const result = await publishKeyed(events, p.projectId, key, () => publishAs(events, access, p, body, key));
        if (result.duplicate) return { structured: { id: result.id, duplicate: true }, text: `Already published as ${result.id}.` };
        return { structured: { id: result.id, cursor: result.cursor, duplicate: false }, text: `Published ${result.id}.` };
      },
    }),
  ];
}
