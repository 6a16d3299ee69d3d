// What POST /inboxes/{inbox}/send refuses before (or instead of) opening a sealed draft: a
// compressed draft (30 KB of bzip2 opens to 25 MB the memory budget never counted) is a 422,
// and who may send, the recipients and the sending rate are checked before anything is opened.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import * as openpgp from 'openpgp';
import { splitPkesk } from '../../lib/crypto/mail-opening.ts';
import { call, expectError, json, newProject, startPostern, type TestInbox, type TestServer } from '../helpers/harness.ts';
import { atSink, rcpt } from '../helpers/send-fixtures.ts';

const draft = () => `draft_${randomBytes(12).toString('base64url')}`;

function message(from: string, to: string, body = 'Sealed in the browser.'): Buffer {
  return Buffer.from(
    [
      `From: <${from}>`,
      `To: <${to}>`,
      'Subject: sealed',
      `Message-ID: <${randomBytes(8).toString('hex')}@postern.test>`,
      '',
      body,
      '',
    ].join('\r\n'),
  );
}

type Parts = { wrappedDek: string; ciphertext: string };

function parts(sealed: Uint8Array): Parts {
  const split = splitPkesk(sealed);
  if (!split) throw new Error('no PKESK in the sealed message');
  return { wrappedDek: Buffer.from(split.wrappedDek).toString('base64'), ciphertext: Buffer.from(split.raw).toString('base64') };
}

async function epochKey(epochPublic: string): Promise<openpgp.PublicKey> {
  return openpgp.readKey({ binaryKey: Buffer.from(epochPublic, 'base64') });
}

/** As the web app seals, but with openpgp.js compressing the literal data (zlib). */
async function sealZlib(epochPublic: string, raw: Buffer, filename: string): Promise<Parts> {
  const sealed = await openpgp.encrypt({
    message: await openpgp.createMessage({ binary: raw, filename }),
    encryptionKeys: await epochKey(epochPublic),
    format: 'binary',
    config: { preferredCompressionAlgorithm: openpgp.enums.compression.zlib },
  });
  return parts(sealed);
}

/** A literal data packet compressed with bzip2 (which openpgp.js reads but cannot write), sealed. */
async function sealBzip2(epochPublic: string, raw: Buffer, filename: string): Promise<Parts & { packetBytes: number }> {
  // The literal data packet, as a message of it writes it.
  const literal = (await openpgp.createMessage({ binary: raw, filename })).write() as Uint8Array;
  const compressed = new openpgp.CompressedDataPacket();
  Object.assign(compressed, { algorithm: openpgp.enums.compression.bzip2, compressed: execFileSync('bzip2', ['-9c'], { input: literal }) });
  const packets = new openpgp.PacketList<openpgp.AnyPacket>();
  packets.push(compressed);
  const sealed = await new openpgp.Message(packets).encrypt([await epochKey(epochPublic)]);
  return { ...parts(sealed.write() as Uint8Array), packetBytes: compressed.write().length };
}

describe('sending: what a sealed draft is refused for, before it is opened', function () {
  this.timeout(60_000);
  let s: TestServer;
  let token: string;
  let inbox: TestInbox;
  let compose: { epoch: number; epochPublic: string };

  const post = (server: TestServer, t: string, box: TestInbox, body: Record<string, unknown>) =>
    call(`${server.base}/inboxes/${box.id}/send`, {
      method: 'POST',
      token: t,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  before(async () => {
    s = await startPostern();
    const p = await newProject(s);
    inbox = await p.inbox();
    token = await p.token(['send']);
    compose = await json<{ epoch: number; epochPublic: string }>(await call(`${s.base}/inboxes/${inbox.id}/compose`, { token }));
  });
  after(async () => {
    await s?.close();
  });

  it('refuses a compressed draft with 422, a bzip2 bomb at once, and sends the same message uncompressed', async () => {
    const to = rcpt();
    const raw = message(inbox.address, to);
    const zlibDraft = draft();
    await expectError(
      await post(s, token, inbox, {
        draftId: zlibDraft,
        epoch: compose.epoch,
        ...(await sealZlib(compose.epochPublic, raw, zlibDraft)),
        from: inbox.address,
        to: [to],
      }),
      422,
      /compressed/,
    );

    // 25 MB of message in a few KB: refused before any of it is opened.
    const bomb = message(inbox.address, to, 'A'.repeat(25 * 1024 * 1024 - 200));
    const bombDraft = draft();
    const { packetBytes, ...sealedBomb } = await sealBzip2(compose.epochPublic, bomb, bombDraft);
    expect(packetBytes).to.be.below(30 * 1024);
    const before = process.memoryUsage().rss;
    const started = Date.now();
    await expectError(
      await post(s, token, inbox, { draftId: bombDraft, epoch: compose.epoch, ...sealedBomb, from: inbox.address, to: [to] }),
      422,
      /compressed/,
    );
    expect(Date.now() - started).to.be.below(5_000);
    expect(process.memoryUsage().rss - before).to.be.below(20 * 1024 * 1024);

    // Neither was sent (the drafts are still free); the same message sealed as the app does goes.
    const plain = await openpgp.encrypt({
      message: await openpgp.createMessage({ binary: raw, filename: zlibDraft }),
      encryptionKeys: await epochKey(compose.epochPublic),
      format: 'binary',
    });
    const ok = await post(s, token, inbox, { draftId: zlibDraft, epoch: compose.epoch, ...parts(plain), from: inbox.address, to: [to] });
    expect(ok.status, await ok.clone().text()).to.equal(200);
    expect(await atSink(to)).to.have.length(1);
  });

  it('checks who may send and the sending rate before opening anything', async () => {
    const limited = await startPostern({ POSTERN_SEND_RATE_PER_HOUR: '1' });
    try {
      const lp = await newProject(limited);
      const box = await lp.inbox();
      const t = await lp.token(['send']);
      const c = await json<{ epoch: number; epochPublic: string }>(await call(`${limited.base}/inboxes/${box.id}/compose`, { token: t }));
      const to = rcpt();
      // A ciphertext that would never open: the answer shows which check came first.
      const garbage = {
        epoch: c.epoch,
        wrappedDek: randomBytes(64).toString('base64'),
        ciphertext: randomBytes(64).toString('base64'),
        to: [to],
      };
      await expectError(await post(limited, t, box, { draftId: draft(), ...garbage, from: 'other@example.org' }), 403, /cannot send as/);
      await expectError(await post(limited, t, box, { draftId: draft(), ...garbage, from: box.address }), 400, /does not open/);

      const first = draft();
      const sealed = await openpgp.encrypt({
        message: await openpgp.createMessage({ binary: message(box.address, to), filename: first }),
        encryptionKeys: await epochKey(c.epochPublic),
        format: 'binary',
      });
      const ok = await post(limited, t, box, { draftId: first, epoch: c.epoch, ...parts(sealed), from: box.address, to: [to] });
      expect(ok.status, await ok.clone().text()).to.equal(200);
      await atSink(to);
      // The hour's one message is sent: the next draft is refused for the rate, unopened.
      await expectError(await post(limited, t, box, { draftId: draft(), ...garbage, from: box.address }), 422, /1 messages per hour/);
    } finally {
      await limited.close();
    }
  });
});
