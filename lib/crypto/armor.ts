// Streaming ASCII-armor decoding (RFC 4880 6.2) for the stored PGP/MIME part of a zero-access
// message: line by line, so `/raw` of a large message never holds it whole. The checksum line
// is skipped: the packets carry their own integrity check (MDC / AEAD), which the reader verifies.

/** Yields the binary data of the first `-----BEGIN PGP MESSAGE-----` block of `source`. */
export async function* dearmor(source: AsyncIterable<Uint8Array>): AsyncGenerator<Buffer> {
  let state = 'begin' as 'begin' | 'headers' | 'body' | 'done';
  let pending = '';
  let carry = '';
  function* line(raw: string): Generator<Buffer> {
    const text = raw.replace(/\r$/, '').trim();
    if (state === 'begin') {
      if (text.startsWith('-----BEGIN PGP MESSAGE')) state = 'headers';
    } else if (state === 'headers') {
      if (text === '') state = 'body';
    } else if (state === 'body') {
      if (text.startsWith('-----END') || (text.startsWith('=') && text.length === 5)) {
        state = 'done';
        if (carry) yield Buffer.from(carry, 'base64');
        carry = '';
        return;
      }
      carry += text;
      const whole = carry.length - (carry.length % 4);
      if (whole > 0) {
        yield Buffer.from(carry.slice(0, whole), 'base64');
        carry = carry.slice(whole);
      }
    }
  }
  for await (const chunk of source) {
    pending += Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString('latin1');
    let nl: number;
    while (state !== 'done' && (nl = pending.indexOf('\n')) >= 0) {
      yield* line(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
    }
    if (state === 'done') return;
  }
  if (pending) yield* line(pending);
  if (state !== 'done') throw new Error('the armored message ends before its END line');
}

/** Whether bytes start an ASCII-armored block (after optional whitespace). */
export function looksArmored(head: Uint8Array): boolean {
  return Buffer.from(head.subarray(0, 64)).toString('latin1').trimStart().startsWith('-----BEGIN PGP');
}

/** The binary OpenPGP data of a stored part, armored or not (decided by its first bytes). */
export async function* openpgpBytes(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const iterator = source[Symbol.asyncIterator]();
  const first = await iterator.next();
  if (first.done) return;
  async function* all(): AsyncGenerator<Buffer> {
    yield first.value;
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) yield next.value;
  }
  yield* looksArmored(first.value) ? dearmor(all()) : all();
}
