// SQLite keeps the token, grant and inbox each request reads while the file is unchanged
// (adapters/store/sqlite/kept-rows.ts): what another connection (another process, `postern
// admin`) commits, and what this one writes, is read from the next request on, never later.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { openDb, type Db } from '../../adapters/store/sqlite/db.ts';
import { SqliteDirectoryStore } from '../../adapters/store/sqlite/directory.ts';
import { newId } from '../../lib/ids.ts';

/** The next event-loop turn, as the next request is (its bytes arrive on a later turn). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('SQLite: rows every request reads, kept while the file is unchanged', () => {
  let dir: string;
  let dbA: Db;
  let dbB: Db;
  let a: SqliteDirectoryStore;
  let b: SqliteDirectoryStore;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'postern-kept-'));
    const file = join(dir, 'postern.db');
    dbA = openDb(file);
    dbB = openDb(file);
    a = new SqliteDirectoryStore(dbA);
    b = new SqliteDirectoryStore(dbB);
  });
  after(() => {
    dbA?.close();
    dbB?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function seed() {
    const projectId = newId('prj');
    const memberId = newId('mem');
    const inboxId = newId('ibx');
    const tokenId = newId('tok');
    await a.createProject({ id: projectId, name: 'p', createdAt: 1 });
    await a.createMember({ id: memberId, projectId, email: `${memberId}@example.org`, createdAt: 1 });
    await a.createInbox({
      id: inboxId,
      projectId,
      imapUser: `${inboxId}@example.org`,
      mode: 'compatible',
      createdAt: 1,
      addresses: [`${inboxId}@example.org`],
    });
    await a.putGrant({ memberId, inboxId, role: 'owner', createdAt: 1 });
    await a.createToken({
      id: tokenId,
      projectId,
      memberId,
      scopes: ['messages:read'],
      inboxes: null,
      secretHash: Buffer.alloc(32, 1),
      createdAt: 1,
      expiresAt: null,
      revokedAt: null,
    });
    return { memberId, inboxId, tokenId };
  }

  it("another connection's revocation, grant removal and inbox removal are read from the next turn on", async () => {
    const s = await seed();
    await nextTurn();
    // Read (and kept) by A.
    expect((await a.getToken(s.tokenId))!.revokedAt).to.equal(null);
    expect(await a.getGrant(s.memberId, s.inboxId)).to.include({ role: 'owner' });
    expect((await a.getInbox(s.inboxId))!.id).to.equal(s.inboxId);
    await nextTurn();
    expect(await b.revokeToken(s.tokenId, 42)).to.equal(true);
    await nextTurn();
    expect((await a.getToken(s.tokenId))!.revokedAt).to.equal(42);
    expect(await b.deleteGrant(s.memberId, s.inboxId)).to.equal(true);
    await nextTurn();
    expect(await a.getGrant(s.memberId, s.inboxId)).to.equal(null);
    expect(await b.deleteInbox(s.inboxId, 43)).to.equal(true);
    await nextTurn();
    expect(await a.getInbox(s.inboxId)).to.equal(null);
  });

  it('its own writes are read at once, even in the same turn', async () => {
    const s = await seed();
    await nextTurn();
    expect((await a.getToken(s.tokenId))!.revokedAt).to.equal(null);
    expect(await a.getGrant(s.memberId, s.inboxId)).to.include({ role: 'owner' });
    await a.putGrant({ memberId: s.memberId, inboxId: s.inboxId, role: 'reader', createdAt: 2 });
    expect(await a.getGrant(s.memberId, s.inboxId)).to.include({ role: 'reader' });
    expect(await a.revokeToken(s.tokenId, 7)).to.equal(true);
    expect((await a.getToken(s.tokenId))!.revokedAt).to.equal(7);
  });

  it('hands out copies: a caller changing what it got changes nothing kept', async () => {
    const s = await seed();
    await nextTurn();
    const token = (await a.getToken(s.tokenId))!;
    token.scopes.push('send');
    const grant = (await a.getGrant(s.memberId, s.inboxId))!;
    grant.role = 'reader';
    const inbox = (await a.getInbox(s.inboxId))!;
    inbox.addresses.push('x@example.org');
    expect((await a.getToken(s.tokenId))!.scopes).to.deep.equal(['messages:read']);
    expect((await a.getGrant(s.memberId, s.inboxId))!.role).to.equal('owner');
    expect((await a.getInbox(s.inboxId))!.addresses).to.deep.equal([`${s.inboxId}@example.org`]);
  });
});
