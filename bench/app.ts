// Web app benchmark (docs/app.md), in headless Chromium (Debian's, through playwright-core) against
// a Postern on the real mail environment:
//   - sign-in to first message list: click "Sign in with a passkey" (a virtual PRF passkey), the
//     key unlocked, the inbox opened, until its first row is on screen;
//   - click to a decrypted 100 KB message rendered: click the row, until the message's last line
//     is in the page (detail + /keys + /raw, openpgp.js decrypt, postal-mime parse, render);
//   - the app's JavaScript, gzipped.
// Baseline, same run, same server: the same API calls from Node with the same session, and the
// same openpgp.js decrypt (the work the browser cannot avoid), without a browser or a DOM.
//
//   npm run bench:app                # prints the results as Markdown
//   npm run bench:app -- --write     # also replaces the app section of bench/RESULTS.md
//   npm run bench:app -- --quick     # fewer rounds
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { ImapFlow } from 'imapflow';
import * as openpgp from 'openpgp';
import { pino } from 'pino';
import { loadConfig } from '../lib/config.ts';
import { MasterKey } from '../lib/crypto/master-key.ts';
import { WEB_APP_DIR } from '../lib/http/routes/web-app.ts';
import { openPostern } from '../lib/server.ts';
import { addUser, posternEnv, up } from '../scripts/mailenv.ts';
import { buildApp } from '../scripts/build-app.ts';
import { enrollMember, go, launchChromium, newDevice } from '../test/helpers/browser.ts';
import { freePort } from '../test/helpers/processes.ts';
import { log, median, NO_RATE_LIMITS, runBench } from './common.ts';
import { writeResults } from './results.ts';

const args = new Set(process.argv.slice(2));
const ROUNDS = args.has('--quick') ? 3 : 9;
const SMALL = 50;
const BIG = 100 * 1024;

const ms = (n: number) => `${n.toFixed(0)} ms`;
const now = () => performance.now();

function bigMessage(to: string, last: string): string {
  const lines: string[] = [];
  let n = 0;
  while (n < BIG) {
    const line = `${randomBytes(36).toString('base64')} lorem ipsum dolor`;
    lines.push(line);
    n += line.length + 2;
  }
  lines.push(last);
  return [
    `From: Big Sender <big@example.org>`,
    `To: ${to}`,
    'Subject: the 100 KB message',
    `Date: ${new Date().toUTCString()}`,
    `Message-ID: <big-${randomBytes(6).toString('hex')}@example.org>`,
    'MIME-Version: 1.0',
    'Content-Type: text/plain; charset=utf-8',
    '',
    ...lines,
    '',
  ].join('\r\n');
}

async function main(): Promise<void> {
  const env = await up();
  const dir = mkdtempSync(join(tmpdir(), 'postern-bench-app-'));
  const port = await freePort();
  const origin = `http://localhost:${port}`;
  const config = loadConfig({
    ...NO_RATE_LIMITS,
    POSTERN_PORT: String(port),
    POSTERN_DB: join(dir, 'postern.db'),
    ...posternEnv(env),
    POSTERN_MASTER_KEY: MasterKey.generate(),
    POSTERN_LOG_LEVEL: 'warn',
    POSTERN_APP_ORIGIN: origin,
    POSTERN_WATCH: 'off',
  });
  await buildApp();
  const postern = await openPostern(config, pino({ level: 'warn' }));
  await postern.listen();
  const browser = await launchChromium();
  try {
    const stamp = Date.now().toString(36);
    const user = `bench-app-${stamp}@${env.domain}`;
    const password = randomBytes(12).toString('hex');
    await addUser(env, user, password);
    const project = await postern.admin.createProject('bench-app');
    const member = await postern.admin.addMember(project.id, `bench-app-${stamp}@example.org`);
    const { id: inboxId } = await postern.admin.addInbox({ projectId: project.id, imapUser: user, addresses: [user], mode: 'compatible' });
    await postern.admin.grant(member.id, inboxId, 'owner');

    const last = `the last line ${randomBytes(6).toString('hex')}`;
    const imap = new ImapFlow({ host: env.imap.host, port: env.imap.port, secure: false, auth: { user, pass: password }, logger: false });
    await imap.connect();
    for (let i = 0; i < SMALL; i++)
      await imap.append(
        'INBOX',
        `From: s${i}@example.org\r\nTo: ${user}\r\nSubject: small ${i}\r\nDate: ${new Date().toUTCString()}\r\n\r\nbody ${i}\r\n`,
      );
    await imap.append('INBOX', bigMessage(user, last));
    await imap.logout();

    const device = await newDevice(browser, { prf: true });
    const { page } = device;
    await enrollMember(device, (await postern.passkeys.invite(member.id)).link, 'bench passphrase, unused');

    log(`sign-in to first message list, ${ROUNDS} rounds`);
    const signIn: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      await go(page, '#');
      await page.click('#sign-out');
      await page.locator('#sign-in').waitFor();
      const t0 = now();
      await page.click('#sign-in');
      await page.locator('#key-fingerprint').waitFor({ timeout: 60_000 });
      await go(page, `#/inbox/${inboxId}`);
      await page.locator('#messages li[data-msg]').first().waitFor({ timeout: 60_000 });
      signIn.push(now() - t0);
    }

    log(`click to a decrypted 100 KB message rendered, ${ROUNDS} rounds`);
    const open: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      await go(page, `#/inbox/${inboxId}`);
      const row = page.locator('#messages li[data-msg]', { hasText: 'the 100 KB message' }).locator('a');
      await row.waitFor({ timeout: 60_000 });
      const t0 = now();
      await row.click();
      await page.locator('#message-text', { hasText: last }).waitFor({ timeout: 60_000 });
      open.push(now() - t0);
    }

    // The baseline: the same session's API calls from Node, and the same decrypt.
    const session = JSON.parse(await page.evaluate<string>("sessionStorage.getItem('postern.session')")) as { session: string };
    const api = async (path: string) => {
      const res = await fetch(`${origin}/api/v1${path}`, { headers: { 'x-svc-token': session.session } });
      if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
      return res;
    };
    // The member's key is the browser's; the baseline opens with the epoch key itself.
    const listBaseline: number[] = [];
    const openBaseline: number[] = [];
    let bigId = '';
    for (let r = 0; r < ROUNDS; r++) {
      const t0 = now();
      await (await api('/inboxes')).json();
      const { labels } = (await (await api(`/inboxes/${inboxId}/labels`)).json()) as { labels: Array<{ id: string; name: string }> };
      const { messages } = (await (
        await api(`/inboxes/${inboxId}/labels/${labels.find((l) => l.name === 'INBOX')!.id}/messages?limit=50`)
      ).json()) as { messages: Array<{ id: string; subject?: string }> };
      listBaseline.push(now() - t0);
      bigId = messages.find((m) => m.subject === 'the 100 KB message')!.id;
    }
    const { keyEpoch } = (await (await api(`/inboxes/${inboxId}/messages/${bigId}`)).json()) as { keyEpoch: number };
    const epochKey = await postern.keys.privateKey(inboxId, keyEpoch);
    for (let r = 0; r < ROUNDS; r++) {
      const t0 = now();
      const [detail, raw] = await Promise.all([
        api(`/inboxes/${inboxId}/messages/${bigId}`).then((x) => x.json() as Promise<{ wrappedDek: string }>),
        api(`/inboxes/${inboxId}/messages/${bigId}/raw`).then(async (x) => new Uint8Array(await x.arrayBuffer())),
      ]);
      await (await api(`/inboxes/${inboxId}/keys`)).json();
      const message = await openpgp.readMessage({ binaryMessage: Buffer.concat([Buffer.from(detail.wrappedDek, 'base64'), raw]) });
      const { data } = await openpgp.decrypt({ message, decryptionKeys: epochKey, format: 'binary' });
      if (!Buffer.from(data as Uint8Array).includes(last)) throw new Error('the baseline did not open the message');
      openBaseline.push(now() - t0);
    }

    const js = readFileSync(join(WEB_APP_DIR, 'main.js'));
    const gz = gzipSync(js, { level: 9 }).length;
    const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'CPU'}, ${Math.round(totalmem() / 2 ** 30)} GB RAM, Node ${process.version}, Chromium ${browser.version()} headless`;
    const md = [
      '## Web app (issue 11)',
      '',
      `Machine: ${machine}. Load average at the end: ${loadavg()[0]!.toFixed(2)} (the machine is shared).`,
      `Command: \`npm run bench:app\`, ${new Date().toISOString().slice(0, 10)}. Postern in the bench's process, Chromium and the mail environment on the same cores; ${ROUNDS} rounds each, medians.`,
      '',
      '| Benchmark | Web app (Chromium) | Baseline, same run | Ratio |',
      '|---|---|---|---|',
      `| Sign-in to first message list (${SMALL + 1} messages) | ${ms(median(signIn))} (rounds: ${signIn.map((x) => x.toFixed(0)).join(', ')}) | the list's API calls from Node (inboxes, labels, first page): ${ms(median(listBaseline))} | ${(median(signIn) / median(listBaseline)).toFixed(1)} |`,
      `| Click to a decrypted 100 KB message rendered | ${ms(median(open))} (rounds: ${open.map((x) => x.toFixed(0)).join(', ')}) | detail + /raw + /keys from Node and openpgp.js decrypt: ${ms(median(openBaseline))} | ${(median(open) / median(openBaseline)).toFixed(1)} |`,
      `| The app's JavaScript | ${(js.length / 1024).toFixed(0)} KB, ${(gz / 1024).toFixed(0)} KB gzipped (level 9) | — | — |`,
      '',
      'Notes:',
      "- Sign-in includes the WebAuthn ceremony with a virtual authenticator (no human), the PRF unlock of the key envelope (HKDF + two AES-GCM), and the inbox screen's own requests; the baseline has none of the browser's work.",
      "- The first open of a message fetches /keys and unwraps the epoch key with the member's key; later opens use the cached epoch key and the browser's cache for /raw (immutable). The first round is the cold one.",
      '',
    ].join('\n');
    process.stdout.write(`${md}\n`);
    if (args.has('--write')) log(`written to ${writeResults('app', md)}`);
  } finally {
    await browser.close();
    await postern.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

runBench(main);
