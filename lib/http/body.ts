// Reads a JSON request body with a byte limit, refusing an oversized body before buffering it.
import type { Context } from 'koa';
import { ApiError, badRequest, tooLarge } from '../errors.ts';

export const DEFAULT_BODY_LIMIT = 256 * 1024;

/** The raw body, or 413 as soon as it passes `limit` bytes. */
export async function readRaw(ctx: Context, limit: number): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || NaN);
  if (declared > limit) throw tooLarge(`request body is over ${limit} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) throw tooLarge(`request body is over ${limit} bytes`);
      chunks.push(chunk);
    }
  } catch (err) {
    if (err instanceof ApiError) throw err;
    // The client went away mid-body: its fault, and nobody is left to read the answer.
    throw badRequest('request body was cut off');
  }
  return Buffer.concat(chunks, size);
}

/** The parsed JSON body; 400 when absent or not JSON, 415 for another content type. */
export async function readJson(ctx: Context, limit = DEFAULT_BODY_LIMIT): Promise<unknown> {
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]+\+)?json\s*(;|$)/i.test(type)) {
    throw new ApiError(415, 'send the body as Content-Type: application/json');
  }
  const raw = await readRaw(ctx, limit);
  if (raw.length === 0) throw badRequest('request body required');
  try {
    return JSON.parse(raw.toString('utf8')) as unknown;
  } catch {
    throw badRequest('request body is not valid JSON');
  }
}
