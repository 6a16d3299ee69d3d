// `postern mcp`: MCP over stdio for desktop clients that start a server as a command, relayed
// to a Postern's /v1/mcp. A thin proxy: each message read on stdin is sent over Streamable HTTP
// with the token, and each message from Postern (answers, and notifications from the GET
// stream) is written to stdout. Nothing else may go to stdout: diagnostics go to stderr.
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { isJSONRPCRequest, isJSONRPCResultResponse, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { Readable, Writable } from 'node:stream';

export interface BridgeOptions {
  /** The MCP endpoint: {base_url}/mcp. */
  url: URL;
  token: string;
  stdin?: Readable;
  stdout?: Writable;
  /** Where failures are told (stderr). */
  warn?: (message: string) => void;
}

/** Relays until stdin ends; resolves then. */
export async function bridgeStdio(o: BridgeOptions): Promise<void> {
  const stdin = o.stdin ?? process.stdin;
  const warn = o.warn ?? ((m: string) => process.stderr.write(`postern mcp: ${m}\n`));
  const remote = new StreamableHTTPClientTransport(o.url, { requestInit: { headers: { Authorization: `Bearer ${o.token}` } } });
  const local = new StdioServerTransport(stdin, o.stdout ?? process.stdout);
  // The protocol version agreed at initialize rides on every later HTTP request (the SDK's
  // Client does this itself; a proxy has to read it off the answer).
  const initializing = new Set<string | number>();

  remote.onmessage = (message: JSONRPCMessage) => {
    if (isJSONRPCResultResponse(message) && initializing.delete(message.id)) {
      const version = (message.result as { protocolVersion?: unknown }).protocolVersion;
      if (typeof version === 'string') remote.setProtocolVersion(version);
    }
    local.send(message).catch((err: unknown) => warn(`could not write to stdout: ${(err as Error).message}`));
  };
  remote.onerror = (err) => warn(err.message);

  local.onmessage = (message: JSONRPCMessage) => {
    if (isJSONRPCRequest(message) && message.method === 'initialize') initializing.add(message.id);
    remote.send(message).catch((err: unknown) => {
      const reason = (err as Error).message ?? String(err);
      warn(reason);
      // A request that never reached Postern (refused, unreachable) is answered, not left hanging.
      if (isJSONRPCRequest(message)) {
        void local.send({ jsonrpc: '2.0', id: message.id, error: { code: -32000, message: `Postern did not answer: ${reason}` } });
      }
    });
  };
  local.onerror = (err) => warn(err.message);

  await remote.start();
  await local.start();
  await new Promise<void>((resolve) => {
    stdin.once('end', resolve);
    stdin.once('close', resolve);
  });
  await local.close();
  await remote.close();
}
