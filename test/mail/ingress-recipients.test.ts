// Recipient resolution at the delivery ingress (docs/ingress.md, "Recipients"): Dovecot delivers a detail form
// (user+news@…), another case, the bare IMAP user name and whatever an alias rewrites to into the
// same user's INBOX, so the ingress resolves every recipient to its Dovecot user as Dovecot will
// and seals whatever reaches a zero-access inbox. Each form goes through Postfix.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import nodemailer from 'nodemailer';
import { pino } from 'pino';
import { DovecotLmtp } from '../../adapters/smtp/dovecot-lmtp.ts';
import { LmtpIngress } from '../../adapters/smtp/lmtp-ingress.ts';
import { openStore } from '../../adapters/store/open.ts';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { EpochKeyring } from '../../lib/crypto/epoch-keys.ts';
import { newId } from '../../lib/ids.ts';
import { dovecotUser, Ingress } from '../../lib/mail/ingress.ts';
import { sealedEpoch } from '../../lib/mail/sealing.ts';
import { addUser } from '../../scripts/mailenv.ts';
import {
  mailEnv,
  newProject,
  newStore,
  startPostern,
  unique,
  type TestInbox,
  type TestProject,
  type TestServer,
  type TestStore,
} from '../helpers/harness.ts';
import { ingressUserInbox, lmtpSend, postfixLog, storedMessages, untilDelivered } from '../helpers/ingress-helpers.ts';

/** One message through Postfix's MX port with exactly these envelope recipients (RCPT TO as written). */
async function mailThroughPostfix(to: string[], messageId: string, body: string): Promise<void> {
  const env = mailEnv();
  const transport = nodemailer.createTransport({ host: env.smtp.host, port: env.smtp.port, secure: false, ignoreTLS: true });
  try {
    const raw = `From: Sender <sender@example.org>\r\nTo: someone@example.org\r\nSubject: form ${messageId}\r\nMessage-ID: <${messageId}>\r\n\r\n${body}\r\n`;
    await transport.sendMail({ envelope: { from: 'sender@example.org', to }, raw });
  } finally {
    transport.close();
  }
}

/** The stored copy of the message with this Message-ID, once Dovecot has it. */
async function storedCopy(inbox: TestInbox, messageId: string): Promise<Buffer> {
  const found = await untilDelivered(`<${messageId}> in ${inbox.imapUser}`, async () =>
    (await storedMessages(inbox)).find((m) => m.source.includes(`<${messageId}>`)),
  );
  return found.source;
}

describe('delivery ingress: recipients resolved as Dovecot resolves them', function () {
  this.timeout(120_000);
  let s: TestServer;
  let p: TestProject;

  before(async () => {
    s = await startPostern({ POSTERN_LMTP_PORT: String(mailEnv().ingress.port), POSTERN_EVENTS_SETTLE_MS: '0' });
    p = await newProject(s);
  });
  after(async () => {
    await s?.close();
  });

  it('names the Dovecot user as Dovecot 2.3 does: detail cut at the first delimiter, quotes removed, case folded', () => {
    expect(dovecotUser('Vault+News@Example.ORG', '+')).to.equal('vault@example.org');
    expect(dovecotUser('vault+a+b@example.org', '+')).to.equal('vault@example.org');
    expect(dovecotUser('vault-list+x@example.org', '+-')).to.equal('vault@example.org');
    expect(dovecotUser('vault-list@example.org', '+')).to.equal('vault-list@example.org');
    expect(dovecotUser('vault+news@example.org', '')).to.equal('vault+news@example.org');
    expect(dovecotUser('"Vault+x"@example.org', '+')).to.equal('vault@example.org');
    expect(dovecotUser('"va\\"ult"@example.org', '+')).to.equal('va"ult@example.org');
    expect(dovecotUser('vault', '+')).to.equal('vault');
    // Dovecot folds ASCII only, as SQLite's NOCASE compares.
    expect(dovecotUser('ÄBC@example.org', '+')).to.equal('Äbc@example.org');
  });

  it("takes the delimiter from POSTERN_RECIPIENT_DELIMITER (default +) and refuses one that cannot be Dovecot's", () => {
    expect(loadConfig({}).ingress.recipientDelimiter).to.equal('+');
    expect(loadConfig({ POSTERN_RECIPIENT_DELIMITER: '+-' }).ingress.recipientDelimiter).to.equal('+-');
    expect(loadConfig({ POSTERN_RECIPIENT_DELIMITER: '' }).ingress.recipientDelimiter).to.equal('');
    for (const bad of ['a', '@', '+ ', '"'])
      expect(() => loadConfig({ POSTERN_RECIPIENT_DELIMITER: bad }), bad).to.throw(ConfigError, /POSTERN_RECIPIENT_DELIMITER/);
  });

  it('seals every form that reaches a zero-access user: detail, case, IMAP user name, a detail on its address, a Postfix alias', async () => {
    const vault = await ingressUserInbox(s, p.projectId, p.memberId, 'zero-access');
    const domain = mailEnv().ingress.domain;
    const forms = [
      `${vault.name}+news@${domain}`,
      `${vault.name.toUpperCase()}@${domain.toUpperCase()}`,
      vault.imapUser,
      `${vault.name}.box+tag@${domain}`,
      // The env's virtual_alias_maps rewrites alias-NAME@… to NAME@… before the transport.
      `alias-${vault.name}@${domain}`,
      `alias-${vault.name}+list@${domain}`,
    ];
    const sent: Array<{ form: string; messageId: string; marker: string }> = [];
    for (const form of forms) {
      const messageId = `${unique('form')}@example.org`;
      const marker = `secret-${unique('m')}`;
      await mailThroughPostfix([form], messageId, `the body holds ${marker}`);
      sent.push({ form, messageId, marker });
    }
    for (const { form, messageId, marker } of sent) {
      const source = await storedCopy(vault, messageId);
      expect(sealedEpoch(source), form).to.equal(1);
      expect(source.includes(marker), form).to.equal(false);
    }
    // Each stored as it arrived, sealed: no plaintext copy was stored and replaced (the UIDs of a
    // fresh mailbox run 1..n with no gap a re-seal would leave).
    const stored = await storedMessages(vault);
    expect(stored.map((m) => m.uid)).to.deep.equal(forms.map((_f, i) => i + 1));
    for (const m of stored) expect(sealedEpoch(m.source)).to.equal(1);
    // A quoted local part, which Postfix never sends but an LMTP client may.
    const quoted = await lmtpSend(
      mailEnv().ingress.port,
      'a@example.org',
      [`"${vault.name}+q"@${domain}`],
      `Subject: quoted\r\nMessage-ID: <quoted-${vault.name}@example.org>\r\n\r\nquoted secret\r\n`,
    );
    expect(quoted.rejected).to.deep.equal([]);
    const quotedCopy = await storedCopy(vault, `quoted-${vault.name}@example.org`);
    expect(sealedEpoch(quotedCopy)).to.equal(1);
    expect(quotedCopy.includes('quoted secret')).to.equal(false);
  });

  it('one message for a compatible and a zero-access inbox through alias forms: each gets its own copy', async () => {
    const vault = await ingressUserInbox(s, p.projectId, p.memberId, 'zero-access');
    const open = await ingressUserInbox(s, p.projectId, p.memberId, 'compatible');
    const domain = mailEnv().ingress.domain;
    const messageId = `${unique('mixed')}@example.org`;
    const marker = `mixed-${unique('m')}`;
    await mailThroughPostfix([`${open.name}+news@${domain}`, `alias-${vault.name}@${domain}`], messageId, `both get ${marker}`);
    const sealedCopy = await storedCopy(vault, messageId);
    const plainCopy = await storedCopy(open, messageId);
    expect(sealedEpoch(sealedCopy)).to.equal(1);
    expect(sealedCopy.includes(marker)).to.equal(false);
    expect(sealedEpoch(plainCopy)).to.equal(null);
    expect(plainCopy.includes(marker)).to.equal(true);
    expect(await storedMessages(vault)).to.have.length(1);
    // And within one LMTP transaction, as Postfix hands a message for several users of one next hop.
    const both = `${unique('both')}@example.org`;
    const result = await lmtpSend(
      mailEnv().ingress.port,
      'a@example.org',
      [`${open.name.toUpperCase()}+x@${domain}`, `${vault.name}+y@${domain}`],
      `Subject: both\r\nMessage-ID: <${both}>\r\n\r\nboth see ${marker}\r\n`,
    );
    expect(result.rejected).to.deep.equal([]);
    expect(result.accepted).to.have.length(2);
    expect((await storedCopy(open, both)).includes(`both see ${marker}`)).to.equal(true);
    const sealedBoth = await storedCopy(vault, both);
    expect(sealedEpoch(sealedBoth)).to.equal(1);
    expect(sealedBoth.includes(marker)).to.equal(false);
  });
});

describe('delivery ingress: a zero-access user reached by another form when sealing fails', function () {
  this.timeout(120_000);
  let admin: TestServer;
  let failing: LmtpIngress | null = null;
  let live: TestServer | null = null;
  let nokey: TestStore | null = null;
  before(async () => {
    admin = await startPostern();
  });
  after(async () => {
    await failing?.close();
    await live?.close();
    await nokey?.drop();
    await admin?.close();
  });

  it('answers 4xx, so Postfix keeps the message queued, never delivers it plain, and delivers it sealed once sealing works', async () => {
    const env = mailEnv();
    // A zero-access inbox that has no epoch key yet, in a store of its own that no running Postern
    // would make a key in, served by an ingress that cannot make one (no master key): sealing
    // fails for it, as when its key cannot be read.
    const name = unique('nokey');
    const imapUser = `${name}@${env.ingress.domain}`;
    await addUser(env, imapUser, 'nokey-password');
    const dir = join(admin.dir, 'nokey');
    mkdirSync(dir);
    nokey = await newStore(dir);
    const store = await openStore(loadConfig(nokey.env));
    const { directory } = store;
    const projectId = newId('prj');
    await directory.createProject({ id: projectId, name: 'no key yet', createdAt: Date.now() });
    const inboxId = newId('ibx');
    await directory.createInbox({
      id: inboxId,
      projectId,
      imapUser,
      addresses: [`${name}.box@${env.ingress.domain}`],
      mode: 'zero-access',
      createdAt: Date.now(),
    });
    const log = pino({ level: 'silent' });
    const dovecot = new DovecotLmtp(admin.postern.config.ingress.dovecot);
    // Its message.received events (none here) would go to the admin's log: only the ingress's keys and directory matter.
    const ingress = new Ingress({ directory, keys: new EpochKeyring(store.keys, null), local: dovecot, events: admin.postern.events, log });
    failing = new LmtpIngress(ingress, { host: env.ingress.host, port: env.ingress.port, log });
    await failing.listen();

    const to = `${name}+news@${env.ingress.domain}`;
    const messageId = `${unique('nokey')}@example.org`;
    await mailThroughPostfix([to], messageId, 'never stored plain');
    await untilDelivered(
      "Postfix deferring it with the ingress's 4xx",
      async () =>
        postfixLog()
          .split('\n')
          .some((l) => l.includes(`to=<${to}>`) && l.includes('status=deferred') && l.includes('cannot seal')),
      60_000,
    );
    const inbox: TestInbox = { id: inboxId, address: to, imapUser, imapPassword: 'nokey-password' };
    expect(await storedMessages(inbox)).to.deep.equal([]);
    await failing.close();
    await dovecot.close();
    await store.close();
    failing = null;

    // A Postern with the master key makes the inbox's key at start-up; Postfix's retry is sealed.
    live = await startPostern({ ...nokey.env, POSTERN_LMTP_PORT: String(env.ingress.port) });
    const source = await storedCopy(inbox, messageId);
    expect(sealedEpoch(source)).to.equal(1);
    expect(source.includes('never stored plain')).to.equal(false);
    expect(await storedMessages(inbox)).to.have.length(1);
  });
});
