// Run as a child process by test/events/event-schemas.test.ts, with --expose-gc:
//   node --expose-gc --import tsx test/helpers/schema-cache-heap.ts [versions per phase]
// Registers type versions through the event log on a fresh SQLite store (in memory) and publishes one event
// of each, so each version's schema is compiled, in two equal phases. Prints the heap after each
// phase (after full collections) as JSON. Once the bounded caches are full (the first phase),
// the second phase must not grow the heap: compiled schemas are freed, not just forgotten.
import { openDb } from '../../adapters/store/sqlite/db.ts';
import { minimalDomain, sqlitePorts } from './minimal-domain.ts';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');
const PER_PHASE = Number(process.argv[2] ?? 10_000);
/** Versions per type name: each name's versions are read and tried newest first. */
const VERSIONS = 20;

// In memory: SQLite's own memory is outside the JS heap, and no disk makes 20,000 commits slow.
const db = openDb(':memory:');
try {
  const { admin, events: log } = minimalDomain(sqlitePorts(db));
  const project = (await admin.createProject('heap')).id;

  const heap = async (): Promise<number> => {
    for (let i = 0; i < 4; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    return process.memoryUsage().heapUsed;
  };

  let made = 0;
  /** Registers `count` more type versions (each schema distinct) and publishes one event of each. */
  async function phase(count: number): Promise<void> {
    const names = count / VERSIONS;
    const first = made / VERSIONS;
    for (let n = first; n < first + names; n++) {
      for (let v = 1; v <= VERSIONS; v++) {
        await log.registerType(project, {
          name: `ext.t${n}.happened`,
          description: 'heap',
          version: v,
          data: [{ name: `f${n}_${v}`, type: 'integer', required: true }],
        });
      }
      await Promise.all(
        Array.from({ length: VERSIONS }, (_, i) =>
          log.publish({ projectId: project, actor: 'sys_heap', type: `ext.t${n}.happened`, data: { [`f${n}_${i + 1}`]: 1 } }),
        ),
      );
    }
    made += count;
  }

  await phase(PER_PHASE);
  const afterFirst = await heap();
  await phase(PER_PHASE);
  const afterSecond = await heap();
  await log.close();
  process.stdout.write(`${JSON.stringify({ versions: made, afterFirst, afterSecond, growth: afterSecond - afterFirst })}\n`);
} finally {
  db.close();
}
