// A log that never skips (docs/events.md, "On PostgreSQL: a log that never
// skips"): 3 processes × 16 concurrent writers append to one PostgreSQL log while readers page
// through it by cursor (read), by readAll, and through the live feed's store catch-up. Every
// acknowledged event must be seen exactly once by each reader, all in the same order.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { expect } from 'chai';
import { PgEventStore } from '../../adapters/store/postgres/events.ts';
import { MemoryBus } from '../../adapters/bus/memory.ts';
import { LiveFeed } from '../../lib/events/live.ts';
import type { EventStore, ReadQuery } from '../../lib/events/ports.ts';
import type { StoredEvent } from '../../lib/events/types.ts';
import { freshDatabase, type FreshDatabase } from './postgres.ts';

const PROCESSES = 3;
const WRITERS = 16;
const WRITE_MS = 8_000;

function runWriter(url: string, projectId: string): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(import.meta.dirname, 'never-skip-writer.ts'), url, projectId, String(WRITE_MS), String(WRITERS)],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve(out.split('\n').filter(Boolean)) : reject(new Error(`writer exited ${code}: ${err}`)),
    );
  });
}

/** Pages with read() from position 0, as GET /events does, until `done()` and caught up with `upTo()`. */
async function pageReader(store: EventStore, projectId: string, limit: number, stop: () => number | null): Promise<StoredEvent[]> {
  const seen: StoredEvent[] = [];
  let after = 0;
  for (;;) {
    const q: ReadQuery = {
      projectId,
      after,
      limit,
      recordedBefore: null,
      inboxes: null,
      allowedInboxes: [],
      visibilities: ['project'],
      types: null,
      maxScan: 10_000,
    };
    const page = await store.read(q);
    seen.push(...page.events);
    after = page.scannedTo;
    const end = stop();
    if (end !== null && after >= end) return seen;
    if (page.events.length === 0) await new Promise((r) => setTimeout(r, 1));
  }
}

async function readAllReader(store: EventStore, stop: () => number | null): Promise<StoredEvent[]> {
  const seen: StoredEvent[] = [];
  let after = 0;
  for (;;) {
    const rows = await store.readAll(after, 37);
    seen.push(...rows);
    if (rows.length > 0) after = rows[rows.length - 1]!.position;
    const end = stop();
    if (end !== null && after >= end) return seen;
    if (rows.length === 0) await new Promise((r) => setTimeout(r, 1));
  }
}

describe('PostgreSQL event log: never skips under concurrent writers', function () {
  this.timeout(60_000);
  let db: FreshDatabase;

  before(async () => {
    db = await freshDatabase(8);
  });
  after(async () => {
    await db?.drop();
  });

  it(`${PROCESSES} processes × ${WRITERS} writers for ${WRITE_MS / 1000} s: each reader sees every acknowledged event once, in one order`, async () => {
    const projectId = await db.newProject();
    // Each reader on its own store: no cache or connection shared with another.
    const stores = [0, 1, 2, 3].map(() => new PgEventStore(db.pool));
    const live: StoredEvent[] = [];
    // Without bus messages (the writers are other processes) the feed learns of events only by
    // healing from the store, the path that must not assume anything but position order.
    const feed = new LiveFeed(stores[3]!, new MemoryBus(), { healIntervalMs: 5 });
    await feed.start();
    feed.subscribe(projectId, (e) => live.push(e));

    let end: number | null = null;
    const stop = () => end;
    const readers = Promise.all([
      pageReader(stores[0]!, projectId, 100, stop),
      pageReader(stores[1]!, projectId, 7, stop),
      readAllReader(stores[2]!, stop),
    ]);
    const acked = (await Promise.all(Array.from({ length: PROCESSES }, () => runWriter(db.url, projectId)))).flat();
    end = await stores[0]!.lastPosition();
    const results = await readers;
    while (feed.position < end) await new Promise((r) => setTimeout(r, 5));
    await feed.close();

    const expected = acked
      .map((line) => line.split(' ') as [string, string])
      .map(([p, id]) => ({ position: Number(p), eventId: id }))
      .sort((a, b) => a.position - b.position);
    expect(expected.length, 'writers acknowledged events').to.be.greaterThan(200);
    for (const [name, seen] of [
      ['read() by 100', results[0]],
      ['read() by 7', results[1]],
      ['readAll', results[2]],
      ['live feed', live],
    ] as const) {
      const ids = new Set(seen.map((e) => e.eventId));
      expect(ids.size, `${name}: no event twice`).to.equal(seen.length);
      const missing = expected.filter((e) => !ids.has(e.eventId)).length;
      expect(missing, `${name}: acknowledged events never seen (of ${expected.length})`).to.equal(0);
      expect(
        seen.map((e) => ({ position: e.position, eventId: e.eventId })),
        `${name}: in log order`,
      ).to.deep.equal(expected);
    }
  });
});
