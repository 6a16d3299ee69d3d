// Deleting a project or a member (DirectoryStore.deleteProject, deleteMember) on a whole store:
// rows are written through every port, then every table is searched for anything still naming
// what was deleted (every text column of every table the export carries, rows/dump.ts), so a
// table the deletion forgets fails here, including tables added later. Run on each engine by
// erase.test.ts.
import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { DUMP_TABLES } from '../../adapters/store/rows/dump.ts';
import { newId } from '../../lib/ids.ts';
import type { Store } from '../../lib/store.ts';

export interface EraseEngine {
  store: Store;
  /** Rows of `table` whose `column` is one of `values`, through the engine's own driver. */
  count(table: string, column: string, values: readonly string[]): Promise<number>;
  close(): Promise<void>;
}

const tag = () => randomUUID().slice(0, 8);
const hex = (n: number) => randomBytes(n).toString('hex');

/** A project with two members and two inboxes, with a row in every port; its ids. */
async function populate(s: Store, now = Date.now()) {
  const d = s.directory;
  const projectId = newId('prj');
  await d.createProject({ id: projectId, name: `erase ${tag()}`, createdAt: now });
  const members = [newId('mem'), newId('mem')];
  for (const id of members) await d.createMember({ id, projectId, email: `${tag()}@example.test`, createdAt: now });
  const inboxes = [newId('ibx'), newId('ibx')];
  for (const id of inboxes) {
    const t = tag();
    await d.createInbox({ id, projectId, imapUser: `erase-${t}`, addresses: [`${t}@example.test`], mode: 'compatible', createdAt: now });
    await s.keys.addEpoch({
      inboxId: id,
      epoch: 1,
      publicKey: randomBytes(8),
      fingerprint: hex(20),
      sealedPrivate: randomBytes(8),
      createdAt: now,
    });
    await s.keys.putMessageKeyOnce({ inboxId: id, msgGuid: hex(16), epoch: 1, wrappedDek: randomBytes(8), createdAt: now });
    // The mail index: a label with an unsealed message (a place to seal), its watch lease.
    const [labelGuid, msgGuid] = [hex(16), hex(16)];
    await s.mailIndex.apply(
      id,
      [
        {
          op: 'put',
          message: {
            guid: msgGuid,
            size: 1,
            receivedAt: now,
            date: null,
            from: null,
            to: null,
            cc: null,
            replyTo: null,
            subject: 's',
            messageId: null,
            inReplyTo: null,
            fromAddress: null,
          },
          location: { labelGuid, uid: 1, msgGuid, modseq: 1, flags: [] },
        },
      ],
      { guid: labelGuid, path: 'INBOX', specialUse: null, uidValidity: 1, uidNext: 2, highestModseq: 1, fillLow: null },
    );
    await s.mailIndex.markSeeded(id, true);
    await s.mailIndex.claim([id], 'erase-test', 60_000);
    const [place] = await s.resealJobs.due(id, 'erase-test', now, 1);
    expect(place, 'a place to seal').to.not.equal(undefined);
    await s.resealJobs.claim(id, place!, 'erase-test', now, 60_000);
    const outboxId = hex(16);
    await s.outbox.reserve(
      {
        id: outboxId,
        inboxId: id,
        projectId,
        actor: members[0]!,
        draftId: null,
        fingerprint: null,
        state: 'relaying',
        outcomeUnknown: false,
        settledBy: null,
        mailFrom: `${t}@example.test`,
        recipients: 1,
        messageId: `<${hex(6)}@x>`,
        size: 1,
        attempts: 0,
        claims: 0,
        nextAttemptAt: now,
        sendAt: null,
        holdUntil: null,
        failure: null,
        createdAt: now,
      },
      [Buffer.from('copy')],
      { since: now - 60_000, max: 100 },
    );
  }
  for (const memberId of members) {
    await d.putGrant({ memberId, inboxId: inboxes[0]!, role: 'owner', createdAt: now });
    await s.keys.putMemberKey({ memberId, publicKey: randomBytes(8), fingerprint: hex(20), updatedAt: now });
    await s.keyBackups.put(memberId, 'sealed blob', 0, now);
    await s.passkeys.createInvite({
      id: newId('inv'),
      memberId,
      secretHash: randomBytes(8),
      createdAt: now,
      expiresAt: now + 60_000,
      usedAt: null,
    });
    await s.passkeys.createPasskey({
      id: newId('pky'),
      memberId,
      credentialId: hex(16),
      publicKey: randomBytes(8),
      counter: 0,
      transports: [],
      name: 'key',
      backedUp: false,
      createdAt: now,
      lastUsedAt: null,
      disabledAt: null,
    });
    await s.passkeys.putChallenge(
      { challenge: hex(16), kind: 'reauth', inviteId: null, memberId, operation: 'replace-key', expiresAt: now + 60_000 },
      now,
      1000,
    );
    await d.createSession({
      id: newId('ses'),
      memberId,
      secretHash: randomBytes(8),
      createdAt: now,
      expiresAt: now + 60_000,
      revokedAt: null,
    });
  }
  const tokens = [newId('tok'), newId('tok')];
  for (const [i, id] of tokens.entries()) {
    await d.createToken({
      id,
      projectId,
      memberId: members[i]!,
      scopes: ['events:read'],
      inboxes: i === 0 ? [inboxes[1]!] : null,
      secretHash: randomBytes(8),
      createdAt: now,
      expiresAt: null,
      revokedAt: null,
    });
  }
  const webhooks = [newId('whk'), newId('whk')];
  for (const [i, id] of webhooks.entries()) {
    await s.webhooks.create({
      id,
      projectId,
      tokenId: tokens[i]!,
      url: 'https://hooks.example.test/in',
      types: null,
      inboxes: null,
      description: null,
      secretSealed: randomBytes(8),
      previousSecretSealed: null,
      previousExpiresAt: null,
      disabledAt: null,
      disabledReason: null,
      disabledBy: null,
      position: 0,
      failingSince: null,
      createdAt: now,
      updatedAt: now,
    });
  }
  await s.events.upsertType(projectId, 'ext.thing.happened', 1, () => ({
    projectId,
    name: 'ext.thing.happened',
    version: 1,
    description: 'd',
    fields: [],
    createdAt: now,
    updatedAt: now,
  }));
  const events: string[] = [];
  for (const inboxId of [null, inboxes[0]!]) {
    const eventId = newId('evt');
    events.push(eventId);
    const r = await s.events.append({
      eventId,
      projectId,
      inboxId,
      type: 'ext.thing.happened',
      visibility: inboxId ? 'inbox' : 'project',
      stream: inboxId ?? projectId,
      now,
      build: (assigned) => JSON.stringify({ id: eventId, ...assigned }),
      idempotency: { key: hex(8), fingerprint: hex(8), ttlMs: 60_000 },
    });
    expect(r.kind).to.equal('appended');
    if (r.kind === 'appended') {
      for (const endpointId of webhooks) {
        expect(
          await s.webhooks.enqueue(
            endpointId,
            (await s.webhooks.get(projectId, endpointId))!.position,
            r.event.position,
            [{ eventId, position: r.event.position, type: 'ext.thing.happened' }],
            now,
          ),
        ).to.deep.equal([]);
      }
    }
  }
  return { projectId, members, inboxes, tokens, webhooks, events };
}

/** `table.column` of every row naming one of the ids, in any text column of any carried table. */
async function residue(engine: EraseEngine, ids: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  for (const table of DUMP_TABLES) {
    for (const [column, kind] of Object.entries(table.columns)) {
      if (kind === 'text' && (await engine.count(table.name, column, ids)) > 0) found.push(`${table.name}.${column}`);
    }
  }
  return found;
}

export function eraseContract(engineName: string, open: () => Promise<EraseEngine>): void {
  describe(`Deleting projects and members: ${engineName}`, function () {
    let engine: EraseEngine;

    before(async function () {
      engine = await open();
    });
    after(async () => {
      await engine?.close();
    });

    it('deletes a project from every table, leaves its inboxes tombstoned in the mail index and another project untouched', async () => {
      const s = engine.store;
      const gone = await populate(s);
      const kept = await populate(s);
      const keptIds = Object.values(kept).flat();
      const before = await residue(engine, keptIds);
      const version = await s.directory.inboxesVersion();

      const erased = await s.directory.deleteProject(gone.projectId, Date.now());
      expect(erased).to.deep.equal({ projects: 1, members: 2, inboxes: 2, tokens: 2, sessions: 2, webhooks: 2, events: 2 });

      // What is left naming it: the tombstones only (mail_inboxes.inbox_id, removed_at set).
      const ids = Object.values(gone).flat();
      expect(await residue(engine, ids)).to.deep.equal(['mail_inboxes.inbox_id']);
      for (const inboxId of gone.inboxes) {
        // Watch leases are not exported (rows/dump.ts), so the search above does not see them.
        expect(await s.mailIndex.status(inboxId)).to.deep.include({ messages: 0, watcher: null });
        // A pass still running over it has its write refused rather than filling the index again.
        await s.mailIndex.markSeeded(inboxId, true).then(
          () => expect.fail("a write to a deleted project's inbox index was accepted"),
          (err: Error) => expect(err.message).to.match(/removed/),
        );
      }
      expect(await s.directory.inboxesVersion()).to.be.greaterThan(version);
      expect(await s.directory.getProject(gone.projectId)).to.equal(null);
      expect(await s.directory.deleteProject(gone.projectId, Date.now())).to.equal(null);

      expect(await residue(engine, keptIds)).to.deep.equal(before);
      for (const inboxId of kept.inboxes) expect((await s.mailIndex.status(inboxId)).watcher).to.not.equal(null);
      expect(await s.directory.listMembers(kept.projectId)).to.have.length(2);
      for (const eventId of kept.events) expect(await s.events.positionOf(kept.projectId, eventId)).to.be.a('number');
      for (const eventId of gone.events) expect(await s.events.positionOf(gone.projectId, eventId)).to.equal(null);
    });

    it('removes a member with their grants, credentials, passkeys and keys; the project and its events stay', async () => {
      const s = engine.store;
      const p = await populate(s);
      const [gone, kept] = p.members as [string, string];
      expect(await s.directory.deleteMember(gone)).to.equal(true);
      expect(await s.directory.getMember(gone)).to.equal(null);
      expect(await s.directory.deleteMember(gone)).to.equal(false);
      // The member's id is still in what they did (the outbox's actor); nothing else names them.
      expect(await residue(engine, [gone])).to.deep.equal(['mail_outbox.actor']);
      // Their token and the webhook it made are gone, with its deliveries; the other member's stay.
      expect(await residue(engine, [p.tokens[0]!, p.webhooks[0]!])).to.deep.equal([]);
      expect(await s.directory.getToken(p.tokens[1]!)).to.not.equal(null);
      expect(await s.webhooks.get(p.projectId, p.webhooks[1]!)).to.not.equal(null);
      expect(await s.directory.listGrants(kept)).to.have.length(1);
      expect(await s.passkeys.listPasskeys(kept)).to.have.length(1);
      expect(await s.directory.listMembers(p.projectId)).to.deep.equal([(await s.directory.getMember(kept))!]);
      expect(await residue(engine, p.events)).to.include('events.event_id');
    });

    it('lists projects, members, tokens and sessions, and revokes a session once', async () => {
      const s = engine.store;
      const p = await populate(s, 1_700_000_000_000);
      expect((await s.directory.listProjects()).map((x) => x.id)).to.include(p.projectId);
      expect((await s.directory.listMembers(p.projectId)).map((m) => m.id)).to.deep.equal([...p.members].sort());
      const tokens = await s.directory.listTokens({ projectId: p.projectId });
      expect(tokens.map((t) => t.id)).to.deep.equal([...p.tokens].sort());
      expect(tokens.find((t) => t.id === p.tokens[0])!.inboxes).to.deep.equal([p.inboxes[1]]);
      expect(tokens.find((t) => t.id === p.tokens[1])!.inboxes).to.equal(null);
      expect((await s.directory.listTokens({ projectId: p.projectId, memberId: p.members[1]! })).map((t) => t.id)).to.deep.equal([
        p.tokens[1],
      ]);
      expect(await s.directory.listTokens({ projectId: newId('prj') })).to.deep.equal([]);

      const sessions = await s.directory.listSessions({ projectId: p.projectId });
      expect(sessions.map((x) => x.memberId).sort()).to.deep.equal([...p.members].sort());
      const mine = await s.directory.listSessions({ projectId: p.projectId, memberId: p.members[0]! });
      expect(mine).to.have.length(1);
      expect(await s.directory.revokeSession(mine[0]!.id, 1_700_000_000_500)).to.equal(true);
      expect(await s.directory.revokeSession(mine[0]!.id, 1_700_000_000_600)).to.equal(false);
      expect((await s.directory.getSession(mine[0]!.id))!.revokedAt).to.equal(1_700_000_000_500);
      expect(await s.directory.revokeSession(newId('ses'), 1)).to.equal(false);
    });
  });
}
