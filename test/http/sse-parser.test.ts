// The web app's event-stream parser (web/mail/sse-parser.ts), fed the way fetch delivers a
// stream: in chunks that cut lines, CRLFs and multi-byte characters anywhere.
import { expect } from 'chai';
import { SseParser, type SseMessage } from '../../web/mail/sse-parser.ts';

function parse(chunks: string[]): { messages: SseMessage[]; parser: SseParser } {
  const messages: SseMessage[] = [];
  const parser = new SseParser((m) => messages.push(m));
  for (const c of chunks) parser.push(c);
  return { messages, parser };
}

describe('web app: event-stream parser', () => {
  const stream =
    ': comment\r\nretry: 2500\r\n\r\nevent: message.added\r\ndata: {"a":1}\r\n\r\nid: 42\nevent: x\ndata: one\ndata: two\n\ndata:no space\rdata: é\r\r: heartbeat\n\n';
  const expected: SseMessage[] = [
    { event: 'message.added', data: '{"a":1}' },
    { event: 'x', data: 'one\ntwo', id: '42' },
    // The last id stays in force for later events, as EventSource's lastEventId does.
    { event: 'message', data: 'no space\né', id: '42' },
  ];

  it('parses events, multi-line data, ids, retry and comments with LF, CRLF and CR line ends', () => {
    const { messages, parser } = parse([stream]);
    expect(messages).to.deep.equal(expected);
    expect(parser.retryMs).to.equal(2500);
    expect(parser.lastEventId).to.equal('42');
  });

  it('gives the same events however the stream is cut into chunks', () => {
    for (let size = 1; size <= stream.length; size++) {
      const chunks: string[] = [];
      for (let i = 0; i < stream.length; i += size) chunks.push(stream.slice(i, i + size));
      expect(parse(chunks).messages, `chunks of ${size}`).to.deep.equal(expected);
    }
  });

  it('dispatches nothing for an event without data, or one the stream has not finished', () => {
    expect(parse(['event: lonely\n\n', 'data: unfinished\n']).messages).to.deep.equal([]);
  });

  it('ignores an id with NUL and a retry that is not a number', () => {
    const { parser } = parse(['id: a\0b\nretry: soon\ndata: x\n\n']);
    expect(parser.lastEventId).to.equal(undefined);
    expect(parser.retryMs).to.equal(undefined);
  });
});
