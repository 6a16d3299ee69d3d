// The hot path of POST /v1/mcp: one tools/call or tools/list request, answered without an SDK
// Server and transport of its own. Stateless MCP would build both for every request and pass
// the request and answer through web-standard Request/Response objects and zod; for the calls
// an agent makes most, that cost more than the tool itself (bench/RESULTS.md, "Message search").
// Only a request the SDK would take as it is comes here (leanRequest); anything else, from
// initialize to a malformed message, goes to the SDK, which answers it as the protocol says.
// The answer comes from the same McpTools.listTools/callTool the SDK's handlers call.
import { ErrorCode, RELATED_TASK_META_KEY, type JSONRPCResponse, type RequestId } from '@modelcontextprotocol/sdk/types.js';
import type { Principal } from '../auth/access.ts';
import { isDomainError } from '../errors.ts';
import { jsonOnce } from '../http/json-once.ts';
import type { McpTools } from './server.ts';

export type LeanRequest =
  | { id: RequestId; method: 'tools/list' }
  | { id: RequestId; method: 'tools/call'; name: string; args: Record<string, unknown> | undefined };

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const REQUEST_KEYS = new Set(['jsonrpc', 'id', 'method', 'params']);

/**
 * `_meta` as the SDK takes it without acting on it: absent, or an object whose progressToken (if
 * any) is valid. A task's metadata asks for task handling, which only the SDK does.
 */
function plainMeta(meta: unknown): boolean {
  if (meta === undefined) return true;
  if (!isObject(meta) || meta[RELATED_TASK_META_KEY] !== undefined) return false;
  const token = meta.progressToken;
  return token === undefined || typeof token === 'string' || Number.isSafeInteger(token);
}

/**
 * The request, when `body` is a single JSON-RPC request for tools/list or tools/call in the
 * shape the SDK's own schemas accept (JSONRPCRequestSchema, CallToolRequestSchema), and asks
 * for nothing only the SDK does (a task); else null, and the SDK takes it.
 */
export function leanRequest(body: unknown): LeanRequest | null {
  if (!isObject(body) || body.jsonrpc !== '2.0') return null;
  for (const key of Object.keys(body)) if (!REQUEST_KEYS.has(key)) return null;
  const { id, method, params } = body;
  if (typeof id !== 'string' && !Number.isSafeInteger(id)) return null;
  if (params !== undefined && (!isObject(params) || params.task !== undefined || !plainMeta(params._meta))) return null;
  if (method === 'tools/list') {
    if (params?.cursor !== undefined && typeof params.cursor !== 'string') return null;
    return { id: id as RequestId, method };
  }
  if (method === 'tools/call') {
    if (!params || typeof params.name !== 'string') return null;
    if (params.arguments !== undefined && !isObject(params.arguments)) return null;
    return { id: id as RequestId, method, name: params.name, args: params.arguments };
  }
  return null;
}

/**
 * The JSON-RPC answer, as the SDK's Protocol writes it: the result, or the error thrown. A
 * DomainError (the call's charge refused: the credential's budget is spent) refuses the request:
 * it is thrown, and the route answers it over HTTP (429 with Retry-After).
 */
export async function answerLean(mcp: McpTools, p: Principal, req: LeanRequest, requestId: string): Promise<JSONRPCResponse> {
  try {
    const result = req.method === 'tools/list' ? mcp.listTools(p) : await mcp.callTool(p, req.name, req.args, requestId);
    return { result, jsonrpc: '2.0', id: req.id };
  } catch (err) {
    if (isDomainError(err)) throw err;
    const e = err as { code?: unknown; message?: string; data?: unknown };
    const code = typeof e.code === 'number' && Number.isSafeInteger(e.code) ? e.code : ErrorCode.InternalError;
    return {
      jsonrpc: '2.0',
      id: req.id,
      error: { code, message: e.message ?? 'Internal error', ...(e.data !== undefined ? { data: e.data } : {}) },
    };
  }
}

const RESULT_OPEN = Buffer.from('{"result":');

/**
 * The answer's JSON bytes. A result is serialized once per object (json-once.ts): a tool that
 * answers a cached page with the same result costs the JSON-RPC envelope around it, not the page.
 */
export function leanBytes(answer: JSONRPCResponse): Buffer {
  if (!('result' in answer)) return Buffer.from(JSON.stringify(answer));
  return Buffer.concat([RESULT_OPEN, jsonOnce(answer.result), Buffer.from(`,"jsonrpc":"2.0","id":${JSON.stringify(answer.id)}}`)]);
}
