// The MCP context: the tools (twins of HTTP operations, calling the same domain services) and the
// resource subscriptions heard over the bus (docs/mcp.md).
import type { EventLog } from '../events/log.ts';
import type { RouteModule } from '../http/app.ts';
import { mcpRoutes } from '../http/routes/mcp.ts';
import { McpTools } from '../mcp/server.ts';
import { McpSubscriptions } from '../mcp/subscriptions.ts';
import type { Core } from './core.ts';
import type { MailContext } from './mail.ts';
import type { SendContext } from './send.ts';

export interface McpContext {
  /** McpTools.charge is where a limit on calls plugs in. */
  tools: McpTools;
  subscriptions: McpSubscriptions;
  /** `{base_url}/mcp` over Streamable HTTP (docs/mcp.md). */
  routes: RouteModule[];
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function mcpContext(core: Core, events: EventLog, mail: MailContext, send: SendContext): McpContext {
  const { access, log, rate } = core;
  const subscriptions = new McpSubscriptions({ bus: core.bus, mail: mail.mail, access, log: log.child({ part: 'mcp' }) });
  const tools = new McpTools({
    access,
    mail: mail.mail,
    folders: mail.folders,
    bulk: mail.bulk,
    search: mail.search,
    threads: mail.threads,
    sealed: mail.sealed,
    send: send.send,
    drafts: send.drafts,
    identities: send.identities,
    events,
    validator: core.validator,
    subscriptions,
    log: log.child({ part: 'mcp' }),
    // Each tool call, a batch's too, spends one of the credential's expensive budget as it starts.
    charge: (p) => rate.expensive(p),
  });
  return {
    tools,
    subscriptions,
    routes: [
      mcpRoutes({
        access,
        mcp: tools,
        subscriptions,
        stream: core.config.stream,
        guard: core.streamGuard,
        quota: core.streamQuota,
        limits: core.config.mcp,
      }),
    ],
    start: () => subscriptions.start(),
    stop: () => subscriptions.close(),
  };
}
