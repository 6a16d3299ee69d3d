// Every message of ../shared/corpus sent through POST /inboxes/{inbox}/messages arrives at the
// sink as it was given: the same bytes, apart from the Received trace Postfix puts on top (and
// line endings: SMTP carries CRLF, so a file with bare LF arrives with CRLF; and Return-Path,
// a trace field Postfix drops from what it is given; and lines over 998 bytes, which Postfix folds). A message without
// one From address (or with an address that is not one) is refused with 400; nothing is a 5xx.
import { expect } from 'chai';
import { isEmail } from '../../lib/directory/admin.ts';
import { fromAddress, splitHeader } from '../../lib/send/rfc5322.ts';
import { addSenderLogins, addUser } from '../../scripts/mailenv.ts';
import { corpusFiles, describeWithCorpus } from '../helpers/corpus-files.ts';
import { mailEnv, newProject, startPostern, unique, type TestServer } from '../helpers/harness.ts';
import { atSink, postRaw, rcpt, withoutTrace } from '../helpers/send-fixtures.ts';

/**
 * What Postfix passes on for a message it was given: SMTP's line endings (every line ends in
 * CRLF, bare CR and bare LF included, and the message in one), without the Return-Path and
 * Content-Length fields Postfix drops by default (message_drop_headers: Return-Path is a trace
 * field only final delivery adds; Content-Length is meaningless in transit).
 */
function asRelayed(raw: Buffer): Buffer {
  let text = raw.toString('latin1').replace(/\r\n|\r|\n/g, '\r\n');
  if (!text.endsWith('\r\n')) text += '\r\n';
  const end = text.indexOf('\r\n\r\n');
  const head = end < 0 ? text : text.slice(0, end + 2);
  // Bcc goes too, but that is Postern: it reaches the recipients in the envelope only.
  const kept = head.replace(/^(?:Return-Path|Content-Length|Bcc):[^\r]*\r\n(?:[ \t][^\r]*\r\n)*/gim, '');
  return Buffer.from(kept + text.slice(head.length), 'latin1');
}

describeWithCorpus('sending the real-world corpus through /messages', function () {
  this.timeout(300_000);
  let s: TestServer;

  before(async () => {
    s = await startPostern({ POSTERN_SEND_RATE_PER_HOUR: '100000' });
  });
  after(async () => {
    await s?.close();
  });

  it('arrives byte for byte at the sink, or is refused with 400 when it has no single From address', async () => {
    const files = corpusFiles();
    const env = mailEnv();
    const user = `${unique('corpus')}@${env.domain}`;
    await addUser(env, user, unique('pw'));
    const cases = files.map((f) => ({ ...f, from: fromAddress(splitHeader(f.raw).head), to: rcpt('corpus') }));
    // An address the API takes as `from` (its schema) and the directory as an inbox address.
    const usable = (a: string) => {
      try {
        s.postern.validator.body('https://postern.dev/schemas/send.json#/$defs/Address', a);
        return isEmail(a) && !a.endsWith(`@${env.domain}`);
      } catch {
        return false;
      }
    };
    const senders = [...new Set(cases.map((c) => c.from).filter((a): a is string => a !== null && usable(a)))];
    // The inbox may send as every author in the corpus, and Postfix agrees that its user may.
    await addSenderLogins(
      env,
      senders.map((a) => [a, user] as const),
    );
    const p = await newProject(s);
    const { id } = await s.postern.admin.addInbox({
      projectId: p.projectId,
      imapUser: user,
      addresses: [user, ...senders],
      mode: 'compatible',
    });
    await s.postern.admin.grant(p.memberId, id, 'owner');
    const token = await p.token(['send']);

    const statuses = new Map<string, { status: number; body: string }>();
    const queue = [...cases];
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        for (let c = queue.shift(); c; c = queue.shift()) {
          const res = await postRaw(s, token, id, { from: c.from && senders.includes(c.from) ? c.from : user, to: [c.to], raw: c.raw });
          statuses.set(c.name, { status: res.status, body: await res.text() });
        }
      }),
    );
    const sent = cases.filter((c) => statuses.get(c.name)!.status === 200);
    for (const c of cases) {
      const { status, body } = statuses.get(c.name)!;
      if (status === 200) continue;
      // Only a message without one usable From address may be refused, and only as malformed.
      expect(status, `${c.name}: ${body}`).to.equal(400);
      expect(c.from === null || !senders.includes(c.from), `${c.name} has From ${c.from}: ${body}`).to.equal(true);
    }
    expect(sent.length, 'messages sent').to.be.above(files.length / 2);

    const wanted = new Set(sent.map((c) => c.to));
    const byRecipient = new Map((await atSink((m) => wanted.has(m.rcptTo[0]!), sent.length, 180_000)).map((m) => [m.rcptTo[0]!, m]));
    const differing: string[] = [];
    for (const c of sent) {
      const arrived = withoutTrace(byRecipient.get(c.to)!.raw);
      const given = asRelayed(c.raw);
      // Postern adds a Message-ID and a Date only to a message without them, at the top.
      const added = arrived.subarray(0, arrived.length - given.length).toString('latin1');
      // Lines over 998 bytes (RFC 5322's limit) are folded by Postfix (smtp_line_length_limit):
      // for those, the same bytes once every folding point is taken out on both sides.
      const long = given
        .toString('latin1')
        .split('\r\n')
        .some((line) => line.length > 998);
      const unfold = (b: Buffer) => b.toString('latin1').replace(/\r\n /g, '');
      const tail = arrived.subarray(Math.max(0, arrived.length - given.length));
      const same = long ? unfold(arrived).endsWith(unfold(given)) : tail.equals(given);
      const prefix = long ? unfold(arrived).slice(0, unfold(arrived).length - unfold(given).length) : added;
      if (!same || !/^(Message-ID: <[0-9a-f]{32}@[^>]+>\r\n)?(Date: [^\r\n]+\r\n)?$/.test(prefix)) differing.push(c.name);
    }
    expect(differing, 'messages that arrived changed').to.deep.equal([]);
  });
});
