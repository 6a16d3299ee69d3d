// The event-stream format (HTML standard, "Server-sent events", parsing an event stream), for
// streams read with fetch. No DOM here: the Node tests run it as it is (test/http/sse-parser.test.ts).
export interface SseMessage {
  event: string;
  data: string;
  id?: string;
}

/** Splits a text stream into events. Feed it chunks; it calls `dispatch` for each complete event. */
export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private event = '';
  lastEventId: string | undefined;
  retryMs: number | undefined;

  constructor(private readonly dispatch: (m: SseMessage) => void) {}

  push(chunk: string): void {
    this.buffer += chunk;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
      if (!m || (m[0] === '\r' && m.index === this.buffer.length - 1)) return;
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      this.line(line);
    }
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0) {
        const message: SseMessage = { event: this.event || 'message', data: this.data.join('\n') };
        if (this.lastEventId !== undefined) message.id = this.lastEventId;
        this.dispatch(message);
      }
      this.data = [];
      this.event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
  }
}
