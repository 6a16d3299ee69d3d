// POST/GET /v1/mcp: the Model Context Protocol over Streamable HTTP (docs/mcp.md), for API
// tokens. The caller is authenticated like every request on {base_url}; then, statelessly, so
// any process can answer any request: a plain tools/call or tools/list is answered on the lean
// path (lib/mcp/lean.ts), and everything else goes to the SDK's transport, with a server and
// transport of its own. POST carries the calls; GET is the stream that carries
// resource-updated notifications for the inboxes the token subscribed to.
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isJsonContentType } from '@modelcontextprotocol/sdk/shared/mediaType.js';
import { SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/sdk/types.js';
import type { Access } from '../../auth/access.ts';
import type { Config } from '../../config.ts';
import { RequestGate, type McpLimits } from '../../mcp/gate.ts';
import { answerLean, leanBytes, leanRequest } from '../../mcp/lean.ts';
import type { McpTools } from '../../mcp/server.ts';
import type { McpSubscriptions } from '../../mcp/subscriptions.ts';
import { allow } from '../authenticate.ts';
import { readJson } from '../body.ts';
import type { AppContext, AppRouter } from '../context.ts';
import { HttpError } from '../errors.ts';
import type { StreamGuard } from '../stream-guard.ts';
import type { StreamQuota } from '../stream-quota.ts';

/** Tokens only: the web app's sessions have their own API, and MCP is for agents. */
const RULE = { token: 'any', session: false } as const;
/** A send_message call carries its text (200,000 characters, JSON-escaped) and little else. */
const MCP_BODY_LIMIT = 2 * 1024 * 1024;

/**
 * Whether the SDK's transport would pass the request's headers through to its server: Accept
 * names both JSON and SSE, the body is application/json, and any MCP-Protocol-Version is one it
 * supports. Otherwise the SDK answers (406, 415, 400) in its own words.
 */
function plainPost(ctx: AppContext): boolean {
  const accept = ctx.get('accept');
  const version = ctx.headers['mcp-protocol-version'];
  return (
    accept.includes('application/json') &&
    accept.includes('text/event-stream') &&
    isJsonContentType(ctx.get('content-type')) &&
    (version === undefined || (typeof version === 'string' && SUPPORTED_PROTOCOL_VERSIONS.includes(version)))
  );
}

export interface McpRouteDeps {
  access: Access;
  mcp: McpTools;
  subscriptions: McpSubscriptions;
  stream: Config['stream'];
  guard: StreamGuard;
  quota: StreamQuota;
  limits: McpLimits;
}

export function mcpRoutes({ access, mcp, subscriptions, stream, guard, quota, limits }: McpRouteDeps) {
  return (router: AppRouter): void => {
    router.post('/mcp', allow(access, RULE), async (ctx) => {
      const body = await readJson(ctx, MCP_BODY_LIMIT);
      const { requestId, principal } = ctx.state;
      if (Array.isArray(body) && body.length > limits.batchMax) {
        throw new HttpError(
          400,
          `a batch may hold at most ${limits.batchMax} messages (POSTERN_MCP_BATCH_MAX); this one holds ${body.length}: send it as several requests`,
        );
      }
      const lean = plainPost(ctx) ? leanRequest(body) : null;
      if (lean) {
        // Always a JSON answer, as the SDK's transport gives with enableJsonResponse below.
        ctx.type = 'json';
        ctx.body = leanBytes(await answerLean(mcp, principal, lean, requestId));
        return;
      }
      // The client gone before its answer: calls not started yet never start (lib/mcp/gate.ts).
      const gone = new AbortController();
      const server = mcp.serverFor(principal, { requestId, gate: new RequestGate(limits, gone.signal) });
      // JSON answers: no tool streams progress, and a plain response is easiest on proxies.
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      await server.connect(transport);
      ctx.respond = false;
      const closed = new Promise<void>((resolve) =>
        ctx.res.once('close', () => {
          gone.abort();
          void server.close();
          resolve();
        }),
      );
      // A batch whose client left is never answered, so the transport's promise never settles:
      // the request ends (and is logged) when its connection does.
      await Promise.race([transport.handleRequest(ctx.req, ctx.res, body), closed]);
    });

    router.get('/mcp', allow(access, RULE), async (ctx: AppContext) => {
      if (ctx.method === 'HEAD')
        throw new HttpError(405, 'HEAD is not served here: GET opens the notification stream', { Allow: 'GET, POST' });
      const p = ctx.state.principal;
      // The stream watches inboxes with the process's IMAP pool: it counts as an inbox stream.
      const release = quota.take('inbox', p);
      const server = mcp.serverFor(p, { requestId: ctx.state.requestId });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, keepAliveMs: stream.heartbeatMs });
      try {
        await server.connect(transport);
      } catch (err) {
        release();
        throw err;
      }
      const end = () => void server.close();
      const live = subscriptions.open(p, (uri) => server.sendResourceUpdated({ uri }), end);
      // Like every live stream, it ends within POSTERN_STREAM_MAX_MS; the client opens another.
      const timer = setTimeout(end, stream.maxDurationMs);
      let closed = false;
      ctx.respond = false;
      ctx.res.once('close', () => {
        closed = true;
        clearTimeout(timer);
        release();
        live.close();
        end();
      });
      // Re-checked like every live stream (POSTERN_STREAM_RECHECK_MS): a subscription whose inbox
      // the token may no longer read is dropped; a revoked or expired token loses them all, and
      // the stream ends (the client's reconnection is then refused with the reason).
      guard.watch(
        ctx,
        {
          get closed() {
            return closed;
          },
          endWith: () => live.refused(),
          reconnect: end,
          onClose: (handler) => ctx.res.once('close', handler),
        },
        (now) => live.recheck(now),
      );
      await transport.handleRequest(ctx.req, ctx.res);
    });
  };
}
