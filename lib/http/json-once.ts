// JSON answers serialized once per object. A hot answer stays the same object while nothing
// changes (a page from MailService's cache, the MCP tool answer made from it), so its bytes are
// kept beside it in a WeakMap, as the SSE framer keeps a frame's text: JSON.stringify of a
// 50-message page was the largest single cost of a list request (bench/RESULTS.md, "Message
// search"). Only for values never changed once made; a fresh object costs one WeakMap entry.
import type { Context } from 'koa';

const encoded = new WeakMap<object, Buffer>();

/** `value` as UTF-8 JSON, serialized at its first use. */
export function jsonOnce(value: object): Buffer {
  let bytes = encoded.get(value);
  if (bytes === undefined) encoded.set(value, (bytes = Buffer.from(JSON.stringify(value))));
  return bytes;
}

/** Answers with `value` as JSON, as Koa would for an object body, but serialized once. */
export function sendJsonOnce(ctx: Context, value: object): void {
  ctx.type = 'json';
  ctx.body = jsonOnce(value);
}
