// One writing process of the never-skip test (never-skip.test.ts): `writers` concurrent appenders
// on their own connections, each in a loop until the deadline, then the acknowledged events on
// stdout, one "position eventId" a line. Run as: node --import tsx never-skip-writer.ts URL PROJECT MS WRITERS
import { openPgPool } from '../../adapters/store/postgres/db.ts';
import { PgEventStore } from '../../adapters/store/postgres/events.ts';
import { newId } from '../../lib/ids.ts';

const [url, projectId, ms, count] = process.argv.slice(2) as [string, string, string, string];
const writers = Number(count);
const pool = openPgPool(url, { max: writers, applicationName: 'postern never-skip writer' });
const store = new PgEventStore(pool);
const deadline = Date.now() + Number(ms);
const acked: string[] = [];

async function writer(i: number): Promise<void> {
  // Each writer its own stream: the only contention left is the log's own order.
  const stream = `${projectId}:${process.pid}:${i}`;
  while (Date.now() < deadline) {
    const r = await store.append({
      eventId: newId('evt'),
      projectId,
      inboxId: null,
      type: 'ext.test.stress',
      visibility: 'project',
      stream,
      now: Date.now(),
      build: (a) => JSON.stringify(a),
    });
    if (r.kind === 'appended') acked.push(`${r.event.position} ${r.event.eventId}`);
  }
}

await Promise.all(Array.from({ length: writers }, (_, i) => writer(i)));
await pool.end();
process.stdout.write(acked.join('\n') + '\n');
