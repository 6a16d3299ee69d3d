// Send later across a crash (docs/sending.md, "Send later"): `postern serve` is killed with
// `kill -9` while 1,000 sends are scheduled or held and the first of them are being relayed; once
// it is restarted every one goes, at or after its time, exactly once (a send whose relay answer
// the kill cut off is shown "unknown" and went at most once), and none is left waiting.
import { expect } from 'chai';
import { call, envVars, mailEnv, newProject, startPostern, type TestServer } from '../helpers/harness.ts';
import { until } from '../helpers/mail-fixtures.ts';
import { freePort, spawnPostern, stopProcess, type Listening } from '../helpers/processes.ts';
import { atSink, rcpt } from '../helpers/send-fixtures.ts';

const SENDS = 1000;
/** Of them, the last this many carry an undo hold instead of a send time. */
const HELD = 100;
const SENDERS = 16;

describe('send later: postern serve killed with 1,000 sends waiting', function () {
  this.timeout(600_000);
  let admin: TestServer | null = null;
  let child: Listening | null = null;

  after(async () => {
    if (child) await stopProcess(child.child);
    await admin?.close();
  });

  it('sends every one after the restart, at or after its time, exactly once, none left waiting', async () => {
    const server = (admin = await startPostern());
    // Only the served process sends: what it left at the kill is the restarted one's.
    await server.postern.scheduled.stop();
    const p = await newProject(server);
    const inbox = await p.inbox();
    const token = await p.token(['messages:read', 'send']);
    const env = envVars(mailEnv(), {
      ...server.storeEnv,
      POSTERN_PORT: String(await freePort()),
      POSTERN_SEND_RATE_PER_HOUR: '100000',
      // 1,000 sends from one token as fast as the machine posts them: past its request budget.
      POSTERN_RATE_REQUESTS: '0',
    });
    child = await spawnPostern(env);
    const to = rcpt('crash');

    // Posted well ahead of their times (measured: posting takes a while on a busy machine), and
    // spread over 4 s, so the kill finds some being relayed and most still waiting.
    const postStarted = Date.now();
    const estimate = Math.max(20_000, SENDS * 30);
    const first = postStarted + estimate;
    const wanted = new Map<string, number>();
    const base = `${child.url}/v1`;
    let next = 0;
    await Promise.all(
      Array.from({ length: SENDERS }, async () => {
        for (let i = next++; i < SENDS; i = next++) {
          const subject = `later ${i}`;
          const held = i >= SENDS - HELD;
          const sendAt = first + Math.floor((i * 4000) / SENDS);
          const query = held ? 'holdSeconds=30' : `sendAt=${encodeURIComponent(new Date(sendAt).toISOString())}`;
          const raw = [`From: <${inbox.address}>`, `To: <${to}>`, `Subject: ${subject}`, '', 'Sent later.', ''].join('\r\n');
          const res = await call(`${base}/inboxes/${inbox.id}/messages?${query}`, {
            method: 'POST',
            token,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ from: inbox.address, to: [to], raw: Buffer.from(raw).toString('base64') }),
          });
          if (res.status !== 202) throw new Error(`${subject}: ${res.status} ${await res.text()}`);
          const answer = (await res.json()) as { sendAt: string; holdUntil: string | null };
          wanted.set(subject, Date.parse(answer.holdUntil ?? answer.sendAt));
        }
      }),
    );
    const posted = Date.now();
    expect(posted, `posting ${SENDS} took ${posted - postStarted} ms, more than planned`).to.be.below(first - 1000);

    // Killed once the first have begun to go (the positive signal), with the rest waiting.
    await atSink(to, 1, estimate + 30_000);
    child.child.kill('SIGKILL');
    await new Promise((r) => child!.child.once('exit', r));
    const left = await server.postern.store.outbox.list(inbox.id, true, SENDS);
    expect(left.length, 'sends still waiting or in flight at the kill').to.be.greaterThan(0);

    child = await spawnPostern(env);
    const all = await until(
      'nothing waiting in the outbox',
      // Pending: waiting, in flight, or outcome unknown (which stays, listed, until evidence settles it).
      async () => ((await server.postern.store.outbox.list(inbox.id, true, SENDS)).every((e) => e.state === 'unknown') ? true : null),
      240_000,
    );
    expect(all).to.equal(true);
    const entries = await server.postern.store.outbox.list(inbox.id, false, SENDS + 10);
    const unknown = entries.filter((e) => e.outcomeUnknown).length;
    expect(entries.filter((e) => e.state === 'failed' || e.state === 'cancelled')).to.deep.equal([]);
    // Outcome unknown only for sends cut off between the end of their data and the relay's answer.
    expect(unknown).to.be.below(SENDERS * 2 + 32);

    // Every send at the sink: at least all but the unknown ones, each once, none before its time.
    const got = await atSink(to, SENDS - unknown, 120_000);
    const counts = new Map<string, number>();
    for (const m of got) {
      const subject = /^Subject: (.*)$/m.exec(m.raw.toString('latin1'))?.[1]?.trim() ?? '';
      counts.set(subject, (counts.get(subject) ?? 0) + 1);
      expect(Date.parse(m.receivedAt), `${subject} arrived before its time`).to.be.at.least(wanted.get(subject)!);
    }
    const twice = [...counts].filter(([, n]) => n > 1);
    expect(twice, 'sent twice').to.deep.equal([]);
    const sentOnes = new Set(entries.filter((e) => !e.outcomeUnknown).map((e) => e.messageId));
    expect(sentOnes.size).to.equal(SENDS - unknown);
    expect(counts.size).to.be.at.least(SENDS - unknown);
  });
});
