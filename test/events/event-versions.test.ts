// Which version of a registered type an event is recorded as: the newest non-deprecated version
// its data matches (docs/events.md, "Registered types"). The HTTP side is in events.test.ts ("publishing").
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { schemaForFields } from '../../lib/events/catalog.ts';
import type { EventLog } from '../../lib/events/log.ts';
import type { DataField, EventType, TypeStatus } from '../../lib/events/types.ts';
import { newestMatching } from '../../lib/events/versions.ts';
import { minimalDomain, sqlitePorts } from '../helpers/minimal-domain.ts';

function version(n: number, status: TypeStatus, fields: DataField[]): EventType {
  return {
    name: 'ext.thing.happened',
    version: n,
    description: `v${n}`,
    source: '/postern/projects/x',
    class: 'ext',
    visibility: 'project',
    status,
    data: fields,
    dataSchema: schemaForFields(fields),
  };
}

describe('event types: the version an event is recorded as', () => {
  it('the newest matching version wins; a deprecated version is never chosen', () => {
    const v1 = version(1, 'stable', [{ name: 'a', type: 'string', required: true }]);
    const v2 = version(2, 'deprecated', [
      { name: 'a', type: 'string' },
      { name: 'b', type: 'integer' },
    ]);
    const v3 = version(3, 'experimental', [{ name: 'b', type: 'integer', required: true }]);
    const newestFirst = [v3, v2, v1];
    expect(newestMatching(newestFirst, { b: 1 })).to.equal(v3);
    expect(newestMatching(newestFirst, { a: 'x' })).to.equal(v1);
    // Matches only the deprecated v2.
    expect(newestMatching(newestFirst, { a: 'x', b: 1 })).to.equal(null);
    expect(newestMatching(newestFirst, {})).to.equal(null);
  });

  describe('through the event log and its store', () => {
    let dir: string;
    let db: Db;
    let log: EventLog;
    let project: string;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'postern-versions-'));
      db = openDb(join(dir, 'events.db'));
      const domain = minimalDomain(sqlitePorts(db));
      project = (await domain.admin.createProject('versions')).id;
      log = domain.events;
    });
    after(async () => {
      await log.close();
      db.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('finds an old version past many newer ones (read a batch at a time)', async () => {
      // v1 takes `first`; v2..v40 each require a field of their own.
      await log.registerType(project, {
        name: 'ext.thing.happened',
        description: 'v1',
        data: [{ name: 'first', type: 'string', required: true }],
      });
      for (let v = 2; v <= 40; v++) {
        await log.registerType(project, {
          name: 'ext.thing.happened',
          description: `v${v}`,
          version: v,
          data: [{ name: `f${v}`, type: 'integer', required: true }],
        });
      }
      const schemaOf = async (data: Record<string, string | number>) => {
        const r = await log.publish({ projectId: project, actor: 'sys_test', type: 'ext.thing.happened', data });
        if (r.duplicate) throw new Error('unexpected duplicate');
        const { events } = await log.page(
          { projectId: project, inboxes: null, allowedInboxes: [], visibilities: ['project'], types: null, redactActor: false },
          0,
          500,
        );
        return (JSON.parse(events.find((e) => e.eventId === r.id)!.json) as { dataschema: string }).dataschema;
      };
      expect(await schemaOf({ first: 'x' })).to.match(/\/ext\.thing\.happened\/v1\.json$/);
      expect(await schemaOf({ f23: 1 })).to.match(/\/v23\.json$/);
      expect(await schemaOf({ f40: 1 })).to.match(/\/v40\.json$/);
      let error: unknown;
      await log
        .publish({ projectId: project, actor: 'sys_test', type: 'ext.thing.happened', data: { nothing: 1 } })
        .catch((err: unknown) => (error = err));
      expect(error).to.include({ kind: 'unprocessable' });
      expect((error as Error).message).to.match(/^ext\.thing\.happened v40: /);
    });
  });
});
