// The EventStore contract (lib/events/ports.ts): what every engine guarantees, run the same way
// against each (event-store.test.ts). An engine's store is opened once per run and shared by the
// tests, so each test works in projects of its own and never assumes an empty log.
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import type { AppendRequest, AppendResult, EventStore, StoredEventType } from '../../lib/events/ports.ts';
import { formatSequence } from '../../lib/events/ports.ts';
import type { StoredEvent, Visibility } from '../../lib/events/types.ts';
import { newId } from '../../lib/ids.ts';

export interface EventStoreEngine {
  store: EventStore;
  /** A new project in the store's directory (events name a project that exists). */
  newProject(): Promise<string>;
  /** Changes stored event `eventId`'s type in place, through the engine's own driver (what the log must refuse). */
  rewrite(eventId: string): Promise<void>;
  close(): Promise<void>;
}

interface Built {
  sequence: string;
  time: string;
}

type Req = Pick<AppendRequest, 'projectId'> & Omit<Partial<AppendRequest>, 'build'>;

function request(p: Req): AppendRequest {
  return {
    eventId: newId('evt'),
    inboxId: null,
    type: 'ext.test.happened',
    visibility: 'project',
    stream: p.inboxId ?? p.projectId,
    now: Date.now(),
    ...p,
    build: (assigned) => JSON.stringify(assigned),
  };
}

const appended = (r: AppendResult): StoredEvent => {
  if (r.kind !== 'appended') throw new Error(`expected an append, got a duplicate of ${r.eventId}`);
  return r.event;
};

const fields = (name: string) => [{ name, type: 'string' as const }];

export function eventStoreContract(engineName: string, open: () => Promise<EventStoreEngine>): void {
  describe(`EventStore contract: ${engineName}`, function () {
    let engine: EventStoreEngine;
    let store: EventStore;

    before(async function () {
      engine = await open();
      store = engine.store;
    });
    after(async () => {
      await engine?.close();
    });

    const append = async (p: Req) => appended(await store.append(request(p)));

    it('names its log with a fixed id and a 32-byte cursor secret', async () => {
      const id = await store.logId();
      expect(id).to.match(/^[0-9a-f]{32}$/);
      expect(await store.logId()).to.equal(id);
      const secret = await store.cursorSecret();
      expect(secret.length).to.equal(32);
      expect(Buffer.from(await store.cursorSecret()).equals(Buffer.from(secret))).to.equal(true);
    });

    it('appends in order: positions grow, readAll and read return them so, lastPosition and positionOf agree', async () => {
      const projectId = await engine.newProject();
      const before = await store.lastPosition();
      const events: StoredEvent[] = [];
      for (let i = 0; i < 5; i++) events.push(await append({ projectId }));
      const positions = events.map((e) => e.position);
      expect(positions[0]).to.be.greaterThan(before);
      expect([...positions].sort((a, b) => a - b)).to.deep.equal(positions);
      expect(new Set(positions).size).to.equal(5);
      expect(await store.lastPosition()).to.equal(positions[4]);
      const all = (await store.readAll(before, 100)).filter((e) => e.projectId === projectId);
      expect(all).to.deep.equal(events);
      expect((await store.readAll(positions[1]!, 2)).map((e) => e.position)).to.deep.equal(positions.slice(2, 4));
      const page = await store.read(readQuery(projectId, before));
      expect(page.events).to.deep.equal(events);
      expect(page.scannedTo).to.equal(positions[4]);
      expect(page.complete).to.equal(true);
      for (const e of events) expect(await store.positionOf(projectId, e.eventId)).to.equal(e.position);
      expect(await store.positionOf(projectId, newId('evt'))).to.equal(null);
      expect(await store.positionOf(await engine.newProject(), events[0]!.eventId)).to.equal(null);
    });

    it("reads events by position: those asked for, in order, only the project's", async () => {
      const projectId = await engine.newProject();
      const other = await engine.newProject();
      const events: StoredEvent[] = [];
      for (let i = 0; i < 4; i++) events.push(await append({ projectId }));
      const theirs = await append({ projectId: other });
      const wanted = [events[3]!.position, events[0]!.position, events[2]!.position, theirs.position, (await store.lastPosition()) + 10];
      expect(await store.atPositions(projectId, wanted)).to.deep.equal([events[0], events[2], events[3]]);
      expect(await store.atPositions(projectId, [])).to.deep.equal([]);
    });

    it('is append-only: the engine itself refuses to change a stored event', async () => {
      const event = await append({ projectId: await engine.newProject(), type: 'ext.test.kept' });
      const refused = await engine.rewrite(event.eventId).then(
        () => null,
        (err: unknown) => err as Error,
      );
      expect(refused?.message).to.match(/append-only/);
      expect((await store.readAll(event.position - 1, 1))[0]).to.deep.include({ eventId: event.eventId, type: 'ext.test.kept' });
    });

    it('numbers each stream on its own, gap-free, and never records a time earlier than the previous event', async () => {
      const projectId = await engine.newProject();
      const inbox = newId('ibx');
      // What was stored: an engine may build with placeholders and fill them in (Assigned).
      const seen: Array<[string, Built, StoredEvent]> = [];
      const plan = [inbox, projectId, inbox, inbox, projectId];
      for (const stream of plan) {
        const e = await append({
          projectId,
          inboxId: stream === inbox ? inbox : null,
          visibility: stream === inbox ? 'inbox' : 'project',
          stream,
        });
        seen.push([stream, JSON.parse(e.json) as Built, e]);
      }
      expect(seen.filter(([s]) => s === inbox).map(([, b]) => b.sequence)).to.deep.equal([1, 2, 3].map(formatSequence));
      expect(seen.filter(([s]) => s === projectId).map(([, b]) => b.sequence)).to.deep.equal([1, 2].map(formatSequence));
      for (const [, b, e] of seen) expect(b.time).to.equal(new Date(e.recordedAt).toISOString());
      // A clock that went back still records after the last event.
      const last = seen[seen.length - 1]![2].recordedAt;
      const early = await append({ projectId, now: last - 60_000 });
      expect(early.recordedAt).to.equal(last);
      expect(JSON.parse(early.json)).to.deep.equal({ sequence: formatSequence(3), time: new Date(last).toISOString() });
    });

    it('appends made together: one whose body fails, or that names no project, fails alone; the others keep gap-free positions and sequences', async () => {
      const projectId = await engine.newProject();
      const results = await Promise.allSettled([
        store.append(request({ projectId })),
        store.append({
          ...request({ projectId }),
          build: () => {
            throw new Error('bad event');
          },
        }),
        store.append(request({ projectId: 'prj_no_such_project', stream: projectId })),
        store.append(request({ projectId })),
      ]);
      expect(results.map((r) => r.status)).to.deep.equal(['fulfilled', 'rejected', 'rejected', 'fulfilled']);
      const [first, , , last] = results.map((r) => (r.status === 'fulfilled' ? appended(r.value) : null));
      expect(last!.position).to.equal(first!.position + 1);
      expect([first, last].map((e) => (JSON.parse(e!.json) as Built).sequence)).to.deep.equal([1, 2].map(formatSequence));
      expect((await store.read(readQuery(projectId, 0))).events).to.deep.equal([first, last]);
    });

    it('a key used within its lifetime returns the first event, whatever the body, and says whether the request matched', async () => {
      const projectId = await engine.newProject();
      const key = randomUUID();
      const first = await append({ projectId, idempotency: { key, fingerprint: 'f1', ttlMs: 86_400_000 } });
      const same = await store.append(request({ projectId, idempotency: { key, fingerprint: 'f1', ttlMs: 86_400_000 } }));
      const other = await store.append(
        request({ projectId, type: 'ext.other.thing', idempotency: { key, fingerprint: 'f2', ttlMs: 86_400_000 } }),
      );
      expect(same).to.deep.equal({ kind: 'duplicate', eventId: first.eventId, position: first.position, sameRequest: true });
      expect(other).to.deep.equal({ kind: 'duplicate', eventId: first.eventId, position: first.position, sameRequest: false });
      // Looked up without appending: the event the key names while it lives, per project.
      expect(await store.keyedEvent(projectId, key, Date.now() - 86_400_000)).to.deep.equal({
        eventId: first.eventId,
        position: first.position,
      });
      expect(await store.keyedEvent(projectId, key, Date.now() + 60_000)).to.equal(null);
      expect(await store.keyedEvent(projectId, randomUUID(), 0)).to.equal(null);
      expect(await store.keyedEvent(await engine.newProject(), key, 0)).to.equal(null);
      // Keys are per project.
      const elsewhere = await store.append(
        request({ projectId: await engine.newProject(), idempotency: { key, fingerprint: 'f1', ttlMs: 86_400_000 } }),
      );
      expect(elsewhere.kind).to.equal('appended');
      expect((await store.read(readQuery(projectId, 0))).events.map((e) => e.eventId)).to.deep.equal([first.eventId]);
    });

    it('many appends racing with one key: one event, every other answer names it', async () => {
      const projectId = await engine.newProject();
      const key = randomUUID();
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          store.append(request({ projectId, idempotency: { key, fingerprint: `f${i % 2}`, ttlMs: 86_400_000 } })),
        ),
      );
      const winners = results.filter((r) => r.kind === 'appended');
      expect(winners).to.have.length(1);
      const winner = appended(winners[0]!);
      for (const r of results) {
        if (r.kind === 'duplicate') expect([r.eventId, r.position]).to.deep.equal([winner.eventId, winner.position]);
      }
      expect((await store.read(readQuery(projectId, 0))).events).to.have.length(1);
    });

    it('a key expires after its lifetime: the next use appends anew, and is then the one returned', async () => {
      const projectId = await engine.newProject();
      const key = randomUUID();
      const now = Date.now();
      const first = await append({ projectId, now: now - 10_000, idempotency: { key, fingerprint: 'f', ttlMs: 5_000 } });
      const again = await append({ projectId, now, idempotency: { key, fingerprint: 'f', ttlMs: 5_000 } });
      expect(again.eventId).to.not.equal(first.eventId);
      const third = await store.append(request({ projectId, now: now + 1, idempotency: { key, fingerprint: 'f', ttlMs: 5_000 } }));
      expect(third).to.deep.equal({ kind: 'duplicate', eventId: again.eventId, position: again.position, sameRequest: true });
    });

    it('purge forgets keys older than the cutoff and keeps the younger ones', async () => {
      const projectId = await engine.newProject();
      const [old, young] = [randomUUID(), randomUUID()];
      const now = Date.now();
      await append({ projectId, now: now - 100_000, idempotency: { key: old, fingerprint: 'f', ttlMs: 86_400_000 } });
      const kept = await append({ projectId, now, idempotency: { key: young, fingerprint: 'f', ttlMs: 86_400_000 } });
      expect(await store.purgeIdempotency(now - 50_000)).to.be.at.least(1);
      expect((await store.append(request({ projectId, idempotency: { key: old, fingerprint: 'f', ttlMs: 86_400_000 } }))).kind).to.equal(
        'appended',
      );
      expect(await store.append(request({ projectId, idempotency: { key: young, fingerprint: 'f', ttlMs: 86_400_000 } }))).to.deep.include({
        kind: 'duplicate',
        eventId: kept.eventId,
      });
    });

    it('filters reads by inbox, allowed inboxes, visibility and type (exact and prefix.*)', async () => {
      const projectId = await engine.newProject();
      const [a, b] = [newId('ibx'), newId('ibx')];
      const ev = (inboxId: string | null, type: string, visibility: Visibility) =>
        append({ projectId, inboxId, type, visibility, stream: inboxId ?? projectId });
      const aMail = await ev(a, 'mail.message.added', 'inbox');
      const bMail = await ev(b, 'mail.message.added', 'inbox');
      const proj = await ev(null, 'delivery.sent', 'project');
      const audit = await ev(a, 'access.content.read', 'audit');
      const ext = await ev(null, 'ext.shop.order_paid', 'project');
      const ids = async (over: Partial<ReturnType<typeof readQuery>>) =>
        (await store.read({ ...readQuery(projectId, 0), ...over })).events.map((e) => e.eventId);
      const all = ['inbox', 'project', 'audit'] as const;
      expect(await ids({ allowedInboxes: [a, b], visibilities: all })).to.deep.equal(
        [aMail, bMail, proj, audit, ext].map((e) => e.eventId),
      );
      // An inbox the caller may not use is never shown, whatever the visibility.
      expect(await ids({ allowedInboxes: [a], visibilities: all })).to.deep.equal([aMail, proj, audit, ext].map((e) => e.eventId));
      expect(await ids({ allowedInboxes: [], visibilities: all })).to.deep.equal([proj, ext].map((e) => e.eventId));
      expect(await ids({ inboxes: [b], allowedInboxes: [a, b], visibilities: all })).to.deep.equal([bMail.eventId]);
      expect(await ids({ inboxes: [a, b], allowedInboxes: [a, b], visibilities: ['inbox'] })).to.deep.equal(
        [aMail, bMail].map((e) => e.eventId),
      );
      expect(await ids({ allowedInboxes: [a, b], visibilities: ['project'] })).to.deep.equal([proj, ext].map((e) => e.eventId));
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, types: ['delivery.sent', 'ext.*'] })).to.deep.equal(
        [proj, ext].map((e) => e.eventId),
      );
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, types: ['mail.*'] })).to.deep.equal(
        [aMail, bMail].map((e) => e.eventId),
      );
      // `_` and `%` in a pattern are the characters themselves.
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, types: ['ext.shop.order%', 'ext.shop.order_*'] })).to.deep.equal([
        ext.eventId,
      ]);
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, types: ['ext.shop.order%*'] })).to.deep.equal([]);
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, types: [] })).to.deep.equal([]);
      expect(await ids({ allowedInboxes: [a, b], visibilities: all, after: aMail.position, limit: 2 })).to.deep.equal(
        [bMail, proj].map((e) => e.eventId),
      );
    });

    it("scans at most maxScan of the project's rows: the cursor moves to the last one looked at, never to another project's", async () => {
      const projectId = await engine.newProject();
      const other = await engine.newProject();
      const before = await store.lastPosition();
      const mine: StoredEvent[] = [];
      for (let i = 0; i < 6; i++) {
        mine.push(await append({ projectId, type: 'ext.test.noise' }));
        await append({ projectId: other, type: 'ext.test.wanted' });
      }
      const wanted = await append({ projectId, type: 'ext.test.wanted' });
      await append({ projectId: other, type: 'ext.test.wanted' });
      const q = { ...readQuery(projectId, before), types: ['ext.test.wanted'], maxScan: 4 };
      const first = await store.read(q);
      expect(first).to.deep.equal({ events: [], scannedTo: mine[3]!.position, complete: false });
      const second = await store.read({ ...q, after: first.scannedTo });
      expect(second).to.deep.equal({ events: [wanted], scannedTo: wanted.position, complete: true });
      // Caught up: stays put.
      expect(await store.read({ ...q, after: second.scannedTo })).to.deep.equal({ events: [], scannedTo: wanted.position, complete: true });
      // A full page ends at its last event, with more maybe to come.
      const full = await store.read({ ...readQuery(projectId, before), limit: 2, maxScan: 100 });
      expect(full).to.deep.equal({ events: mine.slice(0, 2), scannedTo: mine[1]!.position, complete: false });
      // Named inboxes scan only their own rows.
      const inbox = newId('ibx');
      const start = await store.lastPosition();
      await append({ projectId, type: 'ext.test.noise' });
      const inInbox = await append({ projectId, inboxId: inbox, visibility: 'inbox', stream: inbox });
      const named = await store.read({ ...readQuery(projectId, start), inboxes: [inbox], allowedInboxes: [inbox], maxScan: 2 });
      expect(named).to.deep.equal({ events: [inInbox], scannedTo: inInbox.position, complete: true });
    });

    it("reads backwards: newest first, each page below the last one's cursor, only the project's rows scanned", async () => {
      const projectId = await engine.newProject();
      const other = await engine.newProject();
      const mine: StoredEvent[] = [];
      for (let i = 0; i < 5; i++) {
        mine.push(await append({ projectId, type: i === 1 ? 'ext.test.wanted' : 'ext.test.noise' }));
        await append({ projectId: other, type: 'ext.test.wanted' });
      }
      const q = { ...readBackQuery(projectId), limit: 2 };
      const first = await store.readBack(q);
      expect(first).to.deep.equal({ events: [mine[4], mine[3]], scannedTo: mine[3]!.position, complete: false });
      const second = await store.readBack({ ...q, before: first.scannedTo });
      expect(second).to.deep.equal({ events: [mine[2], mine[1]], scannedTo: mine[1]!.position, complete: false });
      const third = await store.readBack({ ...q, before: second.scannedTo });
      expect(third).to.deep.equal({ events: [mine[0]], scannedTo: mine[0]!.position, complete: true });
      // The start of the log: the cursor stays put.
      expect(await store.readBack({ ...q, before: third.scannedTo })).to.deep.equal({
        events: [],
        scannedTo: mine[0]!.position,
        complete: true,
      });
      // A sparse filter: at most maxScan of the project's rows, the cursor on the lowest looked at.
      const sparse = { ...q, types: ['ext.test.wanted'], maxScan: 2 };
      expect(await store.readBack(sparse)).to.deep.equal({ events: [], scannedTo: mine[3]!.position, complete: false });
      expect(await store.readBack({ ...sparse, before: mine[3]!.position })).to.deep.equal({
        events: [mine[1]],
        scannedTo: mine[1]!.position,
        complete: false,
      });
      // The settle horizon bounds the first page too.
      const later = await append({ projectId, now: mine[4]!.recordedAt + 1_000 });
      expect((await store.readBack({ ...q, recordedBefore: mine[4]!.recordedAt + 1 })).events[0]).to.deep.equal(mine[4]);
      expect((await store.readBack({ ...q, recordedBefore: later.recordedAt })).events[0]).to.deep.equal(later);
      // Named inboxes scan only their own rows; another project's position as `before` reads the same.
      const inbox = newId('ibx');
      const inInbox = await append({ projectId, inboxId: inbox, visibility: 'inbox', stream: inbox });
      await append({ projectId, type: 'ext.test.noise' });
      const named = await store.readBack({ ...q, inboxes: [inbox], allowedInboxes: [inbox], maxScan: 2 });
      expect(named).to.deep.equal({ events: [inInbox], scannedTo: inInbox.position, complete: true });
      expect((await store.readBack({ ...q, projectId: await engine.newProject() })).events).to.deep.equal([]);
    });

    it('reads only events recorded at or before the settle horizon', async () => {
      const projectId = await engine.newProject();
      const before = await store.lastPosition();
      const settled = await append({ projectId });
      const later = await append({ projectId, now: settled.recordedAt + 1_000 });
      expect(later.recordedAt).to.equal(settled.recordedAt + 1_000);
      const page = await store.read({ ...readQuery(projectId, before), recordedBefore: settled.recordedAt });
      expect(page.events).to.deep.equal([settled]);
      expect(page.scannedTo).to.equal(settled.position);
      expect((await store.read({ ...readQuery(projectId, before), recordedBefore: later.recordedAt })).events).to.deep.equal([
        settled,
        later,
      ]);
    });

    it('upserts types in a transaction: decide sees the stored row, and a racing incompatible first registration is refused', async () => {
      const projectId = await engine.newProject();
      const t = (name: string, version: number, field: string, at = 1000): StoredEventType => ({
        projectId,
        name,
        version,
        description: `${name} v${version}`,
        fields: fields(field),
        createdAt: at,
        updatedAt: at,
      });
      // Only compatible changes: the same fields, or a first registration.
      const compatible = (want: StoredEventType) => (existing: StoredEventType | null) => {
        if (existing && JSON.stringify(existing.fields) !== JSON.stringify(want.fields)) throw new Error('incompatible');
        return existing ? { ...want, createdAt: existing.createdAt } : want;
      };
      const raced = await Promise.allSettled(
        ['x', 'y', 'x', 'y'].map((f) => store.upsertType(projectId, 'ext.shop.paid', 1, compatible(t('ext.shop.paid', 1, f)))),
      );
      const ok = raced.filter((r) => r.status === 'fulfilled').map((r) => r.value);
      const winner = ok[0]!.fields[0]!.name;
      expect(ok.every((v) => v.fields[0]!.name === winner)).to.equal(true);
      expect(raced.filter((r) => r.status === 'rejected')).to.have.length(2);
      expect((await store.getType(projectId, 'ext.shop.paid', 1))!.fields).to.deep.equal(fields(winner));
      // An update keeps createdAt (decide's choice) and stores the rest.
      const updated = await store.upsertType(projectId, 'ext.shop.paid', 1, (existing) => ({
        ...existing!,
        description: 'new',
        updatedAt: 2000,
      }));
      expect(await store.getType(projectId, 'ext.shop.paid', 1)).to.deep.equal(updated);
      expect(updated).to.deep.include({ description: 'new', createdAt: 1000, updatedAt: 2000 });
      for (const v of [2, 3]) await store.upsertType(projectId, 'ext.shop.paid', v, () => t('ext.shop.paid', v, 'z'));
      await store.upsertType(projectId, 'ext.a.first', 1, () => t('ext.a.first', 1, 'a'));
      expect((await store.typeVersions(projectId, 'ext.shop.paid', null, 10)).map((v) => v.version)).to.deep.equal([3, 2, 1]);
      expect((await store.typeVersions(projectId, 'ext.shop.paid', 3, 1)).map((v) => v.version)).to.deep.equal([2]);
      expect((await store.listTypes(projectId)).map((v) => `${v.name}@${v.version}`)).to.deep.equal([
        'ext.a.first@1',
        'ext.shop.paid@1',
        'ext.shop.paid@2',
        'ext.shop.paid@3',
      ]);
      expect(await store.getType(projectId, 'ext.shop.paid', 9)).to.equal(null);
      expect(await store.listTypes(await engine.newProject())).to.deep.equal([]);
    });
  });
}

/** A read of everything of the project after a position, no settle bound. */
function readBackQuery(projectId: string) {
  const { after, ...rest } = readQuery(projectId, 0);
  return { ...rest, before: after === 0 ? null : after };
}

function readQuery(projectId: string, after: number) {
  return {
    projectId,
    after,
    limit: 100,
    recordedBefore: null as number | null,
    inboxes: null as readonly string[] | null,
    allowedInboxes: [] as readonly string[],
    visibilities: ['inbox', 'project', 'audit'] as readonly Visibility[],
    types: null as readonly string[] | null,
    maxScan: 10_000,
  };
}
