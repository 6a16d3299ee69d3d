// The one Server-Sent Events parser of the tests: yields each block of a response body as it
// arrives, so the stream readers of the mail and event tests see frames the same way.
export interface SseBlock {
  id?: string;
  event?: string;
  /** Data lines, joined with \n; undefined when the block had none. */
  data?: string;
  /** The block held a comment line (a heartbeat). */
  comment: boolean;
}

export async function* sseBlocks(body: ReadableStream<Uint8Array>): AsyncGenerator<SseBlock> {
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let at: number;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const lines = buf.slice(0, at).split('\n');
      buf = buf.slice(at + 2);
      const block: SseBlock = { comment: false };
      const data: string[] = [];
      for (const line of lines) {
        if (line.startsWith(':')) block.comment = true;
        else if (line.startsWith('id: ')) block.id = line.slice(4);
        else if (line.startsWith('event: ')) block.event = line.slice(7);
        else if (line.startsWith('data: ')) data.push(line.slice(6));
      }
      if (data.length > 0) block.data = data.join('\n');
      yield block;
    }
  }
}
