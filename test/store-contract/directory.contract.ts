// The directory's store contracts (lib/directory/ports.ts, lib/crypto/ports.ts,
// lib/auth/ports.ts): what every engine guarantees, run the same way against each
// (directory.test.ts). An engine's stores are opened once per contract and shared by its tests, so
// each test works in projects, members and inboxes of its own.
import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import type { ChallengeRecord, PasskeyRecord, PasskeyStore } from '../../lib/auth/ports.ts';
import type { KeyBackupStore, KeyHandover, KeyHandoverStore } from '../../lib/crypto/ports.ts';
import type { EpochKeyRecord, EpochKeyStore, MemberKeyStore, MessageKeyStore } from '../../lib/crypto/ports.ts';
import { DuplicateError, type DirectoryStore } from '../../lib/directory/ports.ts';
import type { Inbox, TokenRecord } from '../../lib/directory/types.ts';
import { newId } from '../../lib/ids.ts';

export interface DirectoryEngine {
  directory: DirectoryStore;
  keys: EpochKeyStore & MemberKeyStore & MessageKeyStore;
  keyBackups: KeyBackupStore;
  keyHandovers: KeyHandoverStore;
  passkeys: PasskeyStore;
  close(): Promise<void>;
}

export interface DirectoryEngineTraits {
  /**
   * Two inboxes whose IMAP users, or two addresses, differ only in case are refused by the store
   * itself. PostgreSQL's unique indexes are on lower(); SQLite's are exact (the domain lower-cases
   * addresses and looks the IMAP user up first, which two processes could race).
   */
  caseFoldedUniqueness: boolean;
}

/** Settles to the DuplicateError the promise fails with (and fails the test if it does not). */
async function duplicate(p: Promise<unknown>): Promise<DuplicateError> {
  try {
    await p;
  } catch (err) {
    expect(err).to.be.instanceOf(DuplicateError);
    return err as DuplicateError;
  }
  throw new Error('expected a DuplicateError, the write succeeded');
}

const unique = () => randomUUID().slice(0, 8);
const bytes = (...b: number[]) => new Uint8Array(b);

/** A project with one member, and helpers making inboxes in it. */
async function seed(d: DirectoryStore, now = Date.now()) {
  const projectId = newId('prj');
  const projectName = `contract ${unique()}`;
  await d.createProject({ id: projectId, name: projectName, createdAt: now });
  const memberId = newId('mem');
  await d.createMember({ id: memberId, projectId, email: `m-${unique()}@example.test`, createdAt: now });
  const inbox = async (over: Partial<Inbox> = {}): Promise<Inbox> => {
    const tag = unique();
    const i: Inbox = {
      id: newId('ibx'),
      projectId,
      imapUser: `user-${tag}`,
      addresses: [`in-${tag}@example.test`],
      mode: 'compatible',
      createdAt: now,
      ...over,
    };
    await d.createInbox(i);
    return i;
  };
  const token = async (inboxes: string[] | null, over: Partial<TokenRecord> = {}): Promise<TokenRecord> => {
    const t: TokenRecord = {
      id: newId('tok'),
      projectId,
      memberId,
      scopes: ['read', 'send'],
      inboxes,
      secretHash: Buffer.from(randomUUID()),
      createdAt: now,
      expiresAt: null,
      revokedAt: null,
      ...over,
    };
    await d.createToken(t);
    return t;
  };
  return { projectId, projectName, memberId, inbox, token };
}

export function directoryContract(engineName: string, traits: DirectoryEngineTraits, open: () => Promise<DirectoryEngine>): void {
  describe(`DirectoryStore contract: ${engineName}`, function () {
    let engine: DirectoryEngine;
    let d: DirectoryStore;

    before(async function () {
      engine = await open();
      d = engine.directory;
    });
    after(async () => {
      await engine?.close();
    });

    it('stores projects and members; an email is unique within its project only', async () => {
      const a = await seed(d, 1_700_000_000_000);
      expect(await d.getProject(a.projectId)).to.deep.equal({ id: a.projectId, name: a.projectName, createdAt: 1_700_000_000_000 });
      const email = `same-${unique()}@example.test`;
      const id = newId('mem');
      await d.createMember({ id, projectId: a.projectId, email, createdAt: 5 });
      expect(await d.getMember(id)).to.deep.equal({ id, projectId: a.projectId, email, createdAt: 5 });
      const dup = await duplicate(d.createMember({ id: newId('mem'), projectId: a.projectId, email, createdAt: 6 }));
      expect(dup.what).to.equal('member with this email');
      const b = await seed(d);
      await d.createMember({ id: newId('mem'), projectId: b.projectId, email, createdAt: 7 });
      expect(await d.getProject(newId('prj'))).to.equal(null);
      expect(await d.getMember(newId('mem'))).to.equal(null);
    });

    it('reads an inbox back whole, addresses in order; finds it by address and IMAP user whatever their case', async () => {
      const s = await seed(d);
      const tag = unique();
      const inbox = await s.inbox({
        imapUser: `Mixed-${tag}`,
        addresses: [`z-${tag}@example.test`, `a-${tag}@example.test`, `m-${tag}@example.test`],
        mode: 'zero-access',
        createdAt: 1234,
      });
      expect(await d.getInbox(inbox.id)).to.deep.equal(inbox);
      expect(await d.findInboxByAddress(`A-${tag}@EXAMPLE.test`)).to.deep.equal(inbox);
      expect(await d.getInboxByImapUser(`mixed-${tag}`)).to.deep.equal(inbox);
      expect(await d.getInboxByImapUser(`MIXED-${tag}`)).to.deep.equal(inbox);
      expect(await d.findInboxByAddress(`nobody-${tag}@example.test`)).to.equal(null);
      expect(await d.getInboxByImapUser(`nobody-${tag}`)).to.equal(null);
      expect(await d.getInbox(newId('ibx'))).to.equal(null);
      const none = await s.inbox({ addresses: [] });
      expect((await d.getInbox(none.id))!.addresses).to.deep.equal([]);
    });

    it('refuses a taken IMAP user with a DuplicateError, storing nothing of the refused inbox', async () => {
      const s = await seed(d);
      const first = await s.inbox();
      const other = await seed(d);
      const freeAddress = `free-${unique()}@example.test`;
      const refusedId = newId('ibx');
      const dup = await duplicate(other.inbox({ id: refusedId, imapUser: first.imapUser, addresses: [freeAddress] }));
      expect(dup.what).to.equal('inbox for this IMAP user');
      expect(await d.getInbox(refusedId)).to.equal(null);
      expect(await d.findInboxByAddress(freeAddress)).to.equal(null);
    });

    it('refuses a taken address (in any project) with a DuplicateError naming it, storing nothing of the refused inbox', async () => {
      const s = await seed(d);
      const first = await s.inbox();
      const other = await seed(d);
      const refusedId = newId('ibx');
      const imapUser = `refused-${unique()}`;
      const taken = first.addresses[0]!;
      const dup = await duplicate(other.inbox({ id: refusedId, imapUser, addresses: [`ok-${unique()}@example.test`, taken] }));
      expect(dup.what).to.equal(`address ${taken}`);
      expect(await d.getInbox(refusedId)).to.equal(null);
      expect(await d.getInboxByImapUser(imapUser)).to.equal(null);
      expect((await d.findInboxByAddress(taken))!.id).to.equal(first.id);
      // The refused inbox's IMAP user and first address were rolled back, so they are free again.
      await other.inbox({ imapUser });
    });

    (traits.caseFoldedUniqueness ? it : it.skip)('refuses an IMAP user or address differing only in case', async () => {
      const s = await seed(d);
      const tag = unique();
      await s.inbox({ imapUser: `Bob-${tag}`, addresses: [`Bob-${tag}@example.test`] });
      expect((await duplicate(s.inbox({ imapUser: `bob-${tag}` }))).what).to.equal('inbox for this IMAP user');
      expect((await duplicate(s.inbox({ addresses: [`bob-${tag}@EXAMPLE.TEST`] }))).what).to.equal(`address bob-${tag}@EXAMPLE.TEST`);
    });

    it('moves inboxesVersion up with every inbox added or removed, and lists every inbox by id', async () => {
      const s = await seed(d);
      const v0 = await d.inboxesVersion();
      const a = await s.inbox();
      const v1 = await d.inboxesVersion();
      expect(v1).to.be.greaterThan(v0);
      const b = await s.inbox();
      const v2 = await d.inboxesVersion();
      expect(v2).to.be.greaterThan(v1);
      const listed = await d.listInboxes();
      const ids = listed.map((i) => i.id);
      expect(ids).to.deep.equal([...ids].sort());
      expect(listed.find((i) => i.id === a.id)).to.deep.equal(a);
      expect(ids).to.include(b.id);
      expect(await d.deleteInbox(a.id, Date.now())).to.equal(true);
      const v3 = await d.inboxesVersion();
      expect(v3).to.be.greaterThan(v2);
      expect((await d.listInboxes()).map((i) => i.id)).to.not.include(a.id);
      // Nothing removed, nothing moved.
      expect(await d.deleteInbox(a.id, Date.now())).to.equal(false);
      expect(await d.inboxesVersion()).to.equal(v3);
    });

    it('deleteInbox revokes tokens narrowed to it alone, narrows the others, and takes its grants, addresses and keys', async () => {
      const s = await seed(d, 1000);
      const gone = await s.inbox();
      const kept = await s.inbox();
      const alone = await s.token([gone.id]);
      const both = await s.token([gone.id, kept.id]);
      const everyInbox = await s.token(null);
      const elsewhere = await s.token([kept.id]);
      const revokedBefore = await s.token([gone.id], { revokedAt: 500 });
      await d.putGrant({ memberId: s.memberId, inboxId: gone.id, role: 'owner', createdAt: 1 });
      await d.putGrant({ memberId: s.memberId, inboxId: kept.id, role: 'reader', createdAt: 2 });
      await engine.keys.addEpoch({
        inboxId: gone.id,
        epoch: 1,
        publicKey: bytes(1),
        fingerprint: 'f',
        sealedPrivate: bytes(2),
        createdAt: 1,
      });
      await engine.keys.putMessageKeyOnce({ inboxId: gone.id, msgGuid: 'guid-1', epoch: 1, wrappedDek: bytes(3), createdAt: 1 });

      expect(await d.deleteInbox(gone.id, 9999)).to.equal(true);

      expect(await d.getInbox(gone.id)).to.equal(null);
      expect((await d.getToken(alone.id))!.revokedAt).to.equal(9999);
      const narrowed = (await d.getToken(both.id))!;
      expect(narrowed.revokedAt).to.equal(null);
      expect(narrowed.inboxes).to.deep.equal([kept.id]);
      expect(await d.getToken(everyInbox.id)).to.deep.equal(everyInbox);
      expect(await d.getToken(elsewhere.id)).to.deep.equal(elsewhere);
      expect((await d.getToken(revokedBefore.id))!.revokedAt).to.equal(500);
      expect(await d.getGrant(s.memberId, gone.id)).to.equal(null);
      expect((await d.listGrants(s.memberId)).map((g) => g.inbox.id)).to.deep.equal([kept.id]);
      expect(await engine.keys.latest(gone.id)).to.equal(null);
      expect(await engine.keys.getMessageKey(gone.id, 'guid-1')).to.equal(null);
      // Its addresses and IMAP user are free again.
      expect(await d.findInboxByAddress(gone.addresses[0]!)).to.equal(null);
      await s.inbox({ imapUser: gone.imapUser, addresses: gone.addresses });
    });

    it('deleteInbox run at once on each inbox of a narrowed token revokes it, never widens it to every inbox', async () => {
      const s = await seed(d);
      const pairs = await Promise.all(Array.from({ length: 4 }, async () => [await s.inbox(), await s.inbox()] as const));
      const tokens = await Promise.all(pairs.map(([a, b]) => s.token([a.id, b.id])));
      await Promise.all(pairs.flatMap(([a, b]) => [d.deleteInbox(a.id, 42), d.deleteInbox(b.id, 42)]));
      for (const t of tokens) expect((await d.getToken(t.id))!.revokedAt, `token ${t.id}`).to.equal(42);
    });

    it('deleteInbox racing a token narrowed to that inbox: the inbox goes, and the token either fails or is revoked', async () => {
      const s = await seed(d);
      const inboxes = await Promise.all(Array.from({ length: 6 }, () => s.inbox()));
      const ids = inboxes.map(() => newId('tok'));
      const raced = await Promise.all(
        inboxes.map((inbox, n) => Promise.allSettled([s.token([inbox.id], { id: ids[n]! }), d.deleteInbox(inbox.id, 42)])),
      );
      for (const [n, [, deleted]] of raced.entries()) {
        expect(deleted.status === 'fulfilled' ? deleted.value : deleted.reason).to.equal(true);
        const token = await d.getToken(ids[n]!);
        if (token) expect(token.revokedAt, `token ${token.id}`).to.equal(42);
      }
    });

    it('puts, replaces, lists and deletes grants', async () => {
      const s = await seed(d);
      const x = await s.inbox();
      const y = await s.inbox();
      await d.putGrant({ memberId: s.memberId, inboxId: y.id, role: 'reader', createdAt: 10 });
      await d.putGrant({ memberId: s.memberId, inboxId: x.id, role: 'reader', createdAt: 20 });
      // Replacing keeps the grant's place (its creation time), changes its role.
      await d.putGrant({ memberId: s.memberId, inboxId: y.id, role: 'owner', createdAt: 30 });
      expect(await d.getGrant(s.memberId, y.id)).to.deep.equal({ memberId: s.memberId, inboxId: y.id, role: 'owner', createdAt: 10 });
      expect(await d.listGrants(s.memberId)).to.deep.equal([
        { grant: { memberId: s.memberId, inboxId: y.id, role: 'owner', createdAt: 10 }, inbox: y },
        { grant: { memberId: s.memberId, inboxId: x.id, role: 'reader', createdAt: 20 }, inbox: x },
      ]);
      expect(await d.deleteGrant(s.memberId, y.id)).to.equal(true);
      expect(await d.deleteGrant(s.memberId, y.id)).to.equal(false);
      expect(await d.getGrant(s.memberId, y.id)).to.equal(null);
      expect(await d.listGrants(newId('mem'))).to.deep.equal([]);
    });

    it('stores tokens as written; a token is revoked once', async () => {
      const s = await seed(d);
      const a = await s.inbox();
      const b = await s.inbox();
      const plain = await s.token(null, { scopes: ['read'], expiresAt: 123_456 });
      const got = (await d.getToken(plain.id))!;
      expect(got).to.deep.equal(plain);
      expect(Buffer.isBuffer(got.secretHash)).to.equal(true);
      const narrowed = await s.token([b.id, a.id]);
      expect([...(await d.getToken(narrowed.id))!.inboxes!].sort()).to.deep.equal([a.id, b.id].sort());
      expect(await d.revokeToken(plain.id, 50)).to.equal(true);
      expect(await d.revokeToken(plain.id, 60)).to.equal(false);
      expect((await d.getToken(plain.id))!.revokedAt).to.equal(50);
      expect(await d.revokeToken(newId('tok'), 60)).to.equal(false);
      expect(await d.getToken(newId('tok'))).to.equal(null);
    });

    it('stores sessions as written', async () => {
      const s = await seed(d);
      const session = {
        id: newId('ses'),
        memberId: s.memberId,
        secretHash: Buffer.from('hash'),
        createdAt: 1,
        expiresAt: 2,
        revokedAt: null,
      };
      await d.createSession(session);
      expect(await d.getSession(session.id)).to.deep.equal(session);
      expect(await d.getSession(newId('ses'))).to.equal(null);
    });
  });
}

export function keysContract(engineName: string, open: () => Promise<DirectoryEngine>): void {
  describe(`Key stores contract: ${engineName}`, function () {
    let engine: DirectoryEngine;

    before(async function () {
      engine = await open();
    });
    after(async () => {
      await engine?.close();
    });

    const epoch = (inboxId: string, n: number): EpochKeyRecord => ({
      inboxId,
      epoch: n,
      publicKey: bytes(n, 0, 255),
      fingerprint: `fp-${n}`,
      sealedPrivate: bytes(255, n, 0, 7),
      createdAt: 1000 + n,
    });

    it('keeps epochs in epoch order whatever the order written; latest is the highest', async () => {
      const s = await seed(engine.directory);
      const inbox = await s.inbox();
      const k = engine.keys;
      expect(await k.latest(inbox.id)).to.equal(null);
      expect(await k.list(inbox.id)).to.deep.equal([]);
      for (const n of [2, 10, 1]) await k.addEpoch(epoch(inbox.id, n));
      expect((await k.list(inbox.id)).map((e) => e.epoch)).to.deep.equal([1, 2, 10]);
      expect(await k.latest(inbox.id)).to.deep.equal(epoch(inbox.id, 10));
      expect(await k.get(inbox.id, 2)).to.deep.equal(epoch(inbox.id, 2));
      expect(await k.get(inbox.id, 3)).to.equal(null);
      expect(await k.sample()).to.not.equal(null);
    });

    it('refuses an epoch the inbox already has with a DuplicateError (a concurrent rotation)', async () => {
      const s = await seed(engine.directory);
      const inbox = await s.inbox();
      await engine.keys.addEpoch(epoch(inbox.id, 1));
      const racing = await Promise.allSettled([2, 2, 2].map((n) => engine.keys.addEpoch(epoch(inbox.id, n))));
      expect(racing.filter((r) => r.status === 'fulfilled')).to.have.length(1);
      for (const r of racing) if (r.status === 'rejected') expect(r.reason).to.be.instanceOf(DuplicateError);
      await duplicate(engine.keys.addEpoch({ ...epoch(inbox.id, 1), fingerprint: 'other' }));
      expect((await engine.keys.get(inbox.id, 1))!.fingerprint).to.equal('fp-1');
    });

    it('lists the inboxes without keys, by id', async () => {
      const s = await seed(engine.directory);
      const bare = await s.inbox();
      const keyed = await s.inbox();
      await engine.keys.addEpoch(epoch(keyed.id, 1));
      const without = await engine.keys.inboxesWithoutKeys();
      expect(without).to.include(bare.id);
      expect(without).to.not.include(keyed.id);
      expect(without).to.deep.equal([...without].sort());
    });

    it('puts, replaces and reads member keys', async () => {
      const s = await seed(engine.directory);
      expect(await engine.keys.getMemberKey(s.memberId)).to.equal(null);
      await engine.keys.putMemberKey({ memberId: s.memberId, publicKey: bytes(1, 2), fingerprint: 'one', updatedAt: 1 });
      await engine.keys.putMemberKey({ memberId: s.memberId, publicKey: bytes(3), fingerprint: 'two', updatedAt: 2 });
      expect(await engine.keys.getMemberKey(s.memberId)).to.deep.equal({
        memberId: s.memberId,
        publicKey: bytes(3),
        fingerprint: 'two',
        updatedAt: 2,
      });
    });

    it('keeps the first message key written, also among concurrent writers', async () => {
      const s = await seed(engine.directory);
      const inbox = await s.inbox();
      await engine.keys.addEpoch(epoch(inbox.id, 1));
      const first = { inboxId: inbox.id, msgGuid: 'g-1', epoch: 1, wrappedDek: bytes(9, 9), createdAt: 5 };
      expect(await engine.keys.getMessageKey(inbox.id, 'g-1')).to.equal(null);
      expect(await engine.keys.putMessageKeyOnce(first)).to.deep.equal(first);
      expect(await engine.keys.putMessageKeyOnce({ ...first, wrappedDek: bytes(1), createdAt: 6 })).to.deep.equal(first);
      const racing = await Promise.all(
        [1, 2, 3, 4, 5, 6].map((n) => engine.keys.putMessageKeyOnce({ ...first, msgGuid: 'g-2', wrappedDek: bytes(n), createdAt: n })),
      );
      expect(new Set(racing.map((r) => r.createdAt)).size).to.equal(1);
      expect(await engine.keys.getMessageKey(inbox.id, 'g-2')).to.deep.equal(racing[0]);
    });

    it('writes a key backup only over the version the writer read', async () => {
      const s = await seed(engine.directory);
      const b = engine.keyBackups;
      expect(await b.get(s.memberId)).to.equal(null);
      expect(await b.put(s.memberId, 'blob-1', 1, 10)).to.equal(null);
      expect(await b.put(s.memberId, 'blob-1', 0, 10)).to.equal(1);
      expect(await b.put(s.memberId, 'again', 0, 11)).to.equal(null);
      expect(await b.put(s.memberId, 'blob-2', 1, 12)).to.equal(2);
      expect(await b.put(s.memberId, 'stale', 1, 13)).to.equal(null);
      expect(await b.get(s.memberId)).to.deep.equal({ blob: 'blob-2', version: 2, updatedAt: 12 });
      // Two devices over the same version: one wins.
      const racing = await Promise.all(['a', 'b', 'c', 'd'].map((x) => b.put(s.memberId, x, 2, 14)));
      expect(racing.filter((v) => v === 3)).to.have.length(1);
      expect(racing.filter((v) => v === null)).to.have.length(3);
      expect((await b.get(s.memberId))!.version).to.equal(3);
    });
  });
}

export function passkeysContract(engineName: string, open: () => Promise<DirectoryEngine>): void {
  describe(`PasskeyStore contract: ${engineName}`, function () {
    let engine: DirectoryEngine;
    let p: PasskeyStore;

    before(async function () {
      engine = await open();
      p = engine.passkeys;
    });
    after(async () => {
      await engine?.close();
    });

    const passkey = (memberId: string, over: Partial<PasskeyRecord> = {}): PasskeyRecord => ({
      id: newId('pky'),
      memberId,
      credentialId: `cred-${randomUUID()}`,
      publicKey: Buffer.from([1, 2, 3]),
      counter: 0,
      transports: ['usb', 'nfc'],
      name: 'key',
      backedUp: false,
      createdAt: 100,
      lastUsedAt: null,
      disabledAt: null,
      ...over,
    });

    const challenge = (over: Partial<ChallengeRecord> = {}): ChallengeRecord => ({
      challenge: `ch-${randomUUID()}`,
      kind: 'sign-in',
      inviteId: null,
      memberId: null,
      operation: null,
      expiresAt: Date.now() + 60_000,
      ...over,
    });

    it('uses an invite once', async () => {
      const s = await seed(engine.directory);
      const invite = {
        id: newId('inv'),
        memberId: s.memberId,
        secretHash: Buffer.from('secret'),
        createdAt: 1,
        expiresAt: 2,
        usedAt: null,
      };
      await p.createInvite(invite);
      expect(await p.getInvite(invite.id)).to.deep.equal(invite);
      const racing = await Promise.all([p.useInvite(invite.id, 5), p.useInvite(invite.id, 6), p.useInvite(invite.id, 7)]);
      expect(racing.filter(Boolean)).to.have.length(1);
      expect([5, 6, 7]).to.include((await p.getInvite(invite.id))!.usedAt);
      expect(await p.useInvite(invite.id, 8)).to.equal(false);
      expect(await p.getInvite(newId('inv'))).to.equal(null);
    });

    it("stores passkeys as written, finds them by id and credential, lists a member's oldest first", async () => {
      const s = await seed(engine.directory);
      const later = passkey(s.memberId, {
        createdAt: 200,
        backedUp: true,
        transports: [],
        counter: 2 ** 32 - 1,
        lastUsedAt: 300,
        disabledAt: 400,
      });
      const earlier = passkey(s.memberId, { createdAt: 100 });
      await p.createPasskey(later);
      await p.createPasskey(earlier);
      expect(await p.getPasskey(later.id)).to.deep.equal(later);
      expect(await p.getPasskeyByCredential(earlier.credentialId)).to.deep.equal(earlier);
      expect(await p.listPasskeys(s.memberId)).to.deep.equal([earlier, later]);
      expect(await p.getPasskey(newId('pky'))).to.equal(null);
      expect(await p.getPasskeyByCredential('no-such-credential')).to.equal(null);
      expect(await p.listPasskeys(newId('mem'))).to.deep.equal([]);
    });

    it('refuses a credential already registered, to any member, with a DuplicateError', async () => {
      const a = await seed(engine.directory);
      const b = await seed(engine.directory);
      const first = passkey(a.memberId);
      await p.createPasskey(first);
      const dup = await duplicate(p.createPasskey(passkey(b.memberId, { credentialId: first.credentialId })));
      expect(dup.what).to.equal('passkey');
      expect(await p.listPasskeys(b.memberId)).to.deep.equal([]);
    });

    it('records a use only over the counter the verifier read; disabling keeps the first time', async () => {
      const s = await seed(engine.directory);
      const k = passkey(s.memberId, { counter: 5 });
      await p.createPasskey(k);
      expect(await p.recordUse(k.id, 5, 6, 1000)).to.equal(true);
      expect(await p.recordUse(k.id, 5, 7, 1001)).to.equal(false);
      const racing = await Promise.all([7, 8, 9].map((to) => p.recordUse(k.id, 6, to, 1002)));
      expect(racing.filter(Boolean)).to.have.length(1);
      const now = (await p.getPasskey(k.id))!;
      expect([7, 8, 9]).to.include(now.counter);
      expect(now.lastUsedAt).to.equal(1002);
      await p.disablePasskey(k.id, 2000);
      await p.disablePasskey(k.id, 3000);
      expect((await p.getPasskey(k.id))!.disabledAt).to.equal(2000);
    });

    it('deleting a passkey ends the sessions it opened, and only those', async () => {
      const s = await seed(engine.directory);
      const k = passkey(s.memberId);
      await p.createPasskey(k);
      const future = Date.now() + 3_600_000;
      const session = (passkeyId: string | null) => ({
        id: newId('ses'),
        memberId: s.memberId,
        passkeyId,
        createdAt: 1,
        expiresAt: future,
        revokedAt: null,
        device: null,
        lastUsedAt: null,
        secretHash: Buffer.from('h'),
      });
      const opened = session(k.id);
      const other = session(null);
      await p.createSession(opened);
      await p.createSession(other);
      expect(await p.deletePasskey(k.id, 77)).to.equal(true);
      expect(await p.deletePasskey(k.id, 78)).to.equal(false);
      expect(await p.getPasskey(k.id)).to.equal(null);
      expect((await p.getSession(opened.id))!.revokedAt).to.equal(77);
      expect((await p.getSession(other.id))!.revokedAt).to.equal(null);
    });

    it('lists live sessions newest first; a live session ends once', async () => {
      const s = await seed(engine.directory);
      const now = 1_000_000;
      const session = (createdAt: number, expiresAt: number, revokedAt: number | null = null) => ({
        id: newId('ses'),
        memberId: s.memberId,
        passkeyId: null,
        createdAt,
        expiresAt,
        revokedAt,
        device: 'Firefox on Linux' as string | null,
        lastUsedAt: null as number | null,
      });
      const old = session(10, now + 1000);
      const fresh = session(20, now + 1000);
      const expired = session(30, now);
      const revoked = session(40, now + 1000, 50);
      for (const x of [old, fresh, expired, revoked]) await p.createSession({ ...x, secretHash: Buffer.from('h') });
      expect(await p.listLiveSessions(s.memberId, now)).to.deep.equal([fresh, old]);
      expect(await p.getSession(fresh.id)).to.deep.equal(fresh);
      expect(await p.getSessionOwner(fresh.id)).to.equal(s.memberId);
      expect(await p.getSessionOwner(newId('ses'))).to.equal(null);
      expect(await p.getSession(newId('ses'))).to.equal(null);
      expect(await p.endSession(fresh.id, now)).to.equal(true);
      expect(await p.endSession(fresh.id, now)).to.equal(false);
      expect((await p.getSession(fresh.id))!.revokedAt).to.equal(now);
      // Expired or revoked already: nothing to end.
      expect(await p.endSession(expired.id, now)).to.equal(false);
      expect(await p.endSession(revoked.id, now)).to.equal(false);
      expect(await p.listLiveSessions(s.memberId, now)).to.deep.equal([old]);
    });

    it("keeps a session's device and moves its last use forward only", async () => {
      const s = await seed(engine.directory);
      const opened = {
        id: newId('ses'),
        memberId: s.memberId,
        passkeyId: null,
        createdAt: 10,
        expiresAt: Date.now() + 3_600_000,
        revokedAt: null,
        device: 'Safari on iPhone',
        lastUsedAt: 10,
      };
      await p.createSession({ ...opened, secretHash: Buffer.from('h') });
      await engine.directory.touchSession(opened.id, 500);
      expect(await p.getSession(opened.id)).to.deep.equal({ ...opened, lastUsedAt: 500 });
      // An older write arriving late (another instance) does not move it back.
      await engine.directory.touchSession(opened.id, 200);
      await engine.directory.touchSession(newId('ses'), 900);
      expect((await p.listLiveSessions(s.memberId, 0)).map((x) => [x.device, x.lastUsedAt])).to.deep.equal([['Safari on iPhone', 500]]);
    });

    it('hands a challenge out once, as stored (a re-auth one with its operation)', async () => {
      const s = await seed(engine.directory);
      const reauth = challenge({ kind: 'reauth', memberId: s.memberId, operation: 'replace-key' });
      const enroll = challenge({ kind: 'enroll', inviteId: newId('inv') });
      expect(await p.putChallenge(reauth, Date.now(), 1000)).to.equal(true);
      expect(await p.putChallenge(enroll, Date.now(), 1000)).to.equal(true);
      const taken = await Promise.all([p.takeChallenge(reauth.challenge), p.takeChallenge(reauth.challenge)]);
      expect(taken.filter((t) => t !== null)).to.deep.equal([reauth]);
      expect(await p.takeChallenge(reauth.challenge)).to.equal(null);
      expect(await p.takeChallenge(enroll.challenge)).to.deep.equal(enroll);
      expect(await p.takeChallenge('never-issued')).to.equal(null);
    });

    it('keeps at most `limit` unexpired challenges, dropping expired ones first, also among concurrent callers', async () => {
      // Far past every other test's challenges, so they are all expired here and dropped.
      const now = Date.now() + 10 * 365 * 86_400_000;
      const live = [1, 2, 3].map(() => challenge({ expiresAt: now + 1000 }));
      for (const c of live) expect(await p.putChallenge(c, now, 3)).to.equal(true);
      const refused = challenge({ expiresAt: now + 1000 });
      expect(await p.putChallenge(refused, now, 3)).to.equal(false);
      expect(await p.takeChallenge(refused.challenge)).to.equal(null);
      // Once they expire they make room, and are gone.
      const later = now + 1000;
      const next = challenge({ expiresAt: later + 1000 });
      expect(await p.putChallenge(next, later, 3)).to.equal(true);
      for (const c of live) expect(await p.takeChallenge(c.challenge)).to.equal(null);
      // Concurrent callers (each on its own connection, on PostgreSQL) do not overrun the limit.
      const evenLater = later + 1000;
      const racing = await Promise.all(
        Array.from({ length: 12 }, () => p.putChallenge(challenge({ expiresAt: evenLater + 1000 }), evenLater, 4)),
      );
      expect(racing.filter(Boolean)).to.have.length(4);
    });
  });
}

export function keyHandoversContract(engineName: string, open: () => Promise<DirectoryEngine>): void {
  describe(`KeyHandoverStore contract: ${engineName}`, function () {
    let engine: DirectoryEngine;
    let h: KeyHandoverStore;

    before(async function () {
      engine = await open();
      h = engine.keyHandovers;
    });
    after(async () => {
      await engine?.close();
    });

    const handover = (memberId: string, over: Partial<KeyHandover> = {}): KeyHandover => ({
      id: newId('kho'),
      memberId,
      requesterSession: newId('ses'),
      device: 'Chrome on Linux',
      requesterKey: `B${'a'.repeat(86)}`,
      approverKey: null,
      sealed: null,
      createdAt: 1000,
      expiresAt: 2000,
      ...over,
    });

    it('keeps a request until it expires, and hands the sealed key over once', async () => {
      const s = await seed(engine.directory);
      const other = await seed(engine.directory);
      const a = handover(s.memberId);
      expect(await h.create(a, 1000, 5)).to.equal(true);
      expect(await h.get(s.memberId, a.id, 1500)).to.deep.equal(a);
      expect(await h.get(other.memberId, a.id, 1500), 'another member').to.equal(null);
      expect(await h.get(s.memberId, a.id, 2000), 'expired').to.equal(null);
      expect(await h.listPending(s.memberId, 1500)).to.deep.equal([a]);
      expect(await h.approve(other.memberId, a.id, 'K', 'S', 1500), 'another member').to.equal(false);
      expect(await h.approve(s.memberId, a.id, 'K', 'S', 2000), 'expired').to.equal(false);
      expect(await h.approve(s.memberId, a.id, 'K', 'S', 1500)).to.equal(true);
      expect(await h.approve(s.memberId, a.id, 'K2', 'S2', 1500), 'twice').to.equal(false);
      expect(await h.get(s.memberId, a.id, 1500)).to.deep.equal({ ...a, approverKey: 'K', sealed: 'S' });
      expect(await h.listPending(s.memberId, 1500), 'approved is not pending').to.deep.equal([]);
      expect(await h.remove(other.memberId, a.id)).to.equal(false);
      expect(await h.remove(s.memberId, a.id)).to.equal(true);
      expect(await h.remove(s.memberId, a.id)).to.equal(false);
      expect(await h.get(s.memberId, a.id, 1500)).to.equal(null);
    });

    it('bounds the requests a member has at once, counting none expired', async () => {
      const s = await seed(engine.directory);
      const other = await seed(engine.directory);
      const first = handover(s.memberId, { createdAt: 1000, expiresAt: 2000 });
      expect(await h.create(first, 1000, 2)).to.equal(true);
      expect(await h.create(handover(s.memberId, { createdAt: 1001, expiresAt: 3000 }), 1001, 2)).to.equal(true);
      expect(await h.create(handover(s.memberId), 1002, 2)).to.equal(false);
      expect(await h.create(handover(other.memberId), 1002, 2), 'another member counts apart').to.equal(true);
      // Once the first expired, a create prunes it and is taken.
      const later = handover(s.memberId, { createdAt: 2000, expiresAt: 4000 });
      expect(await h.create(later, 2000, 2)).to.equal(true);
      expect((await h.listPending(s.memberId, 2000)).map((x) => x.createdAt)).to.deep.equal([1001, 2000]);
      // Racing creates of one member: the limit holds.
      const racer = await seed(engine.directory);
      const results = await Promise.all([1, 2, 3, 4, 5, 6].map(() => h.create(handover(racer.memberId), 1000, 3)));
      expect(results.filter(Boolean)).to.have.length(3);
    });
  });
}
