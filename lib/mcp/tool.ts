// One MCP tool: what it is called, what it needs (the same access rule as the HTTP operation it
// mirrors), its arguments' schema (schemas/mcp.json) and what it does for a caller.
import type { AccessRule, Principal } from '../auth/access.ts';

export const MCP_SCHEMA = 'https://postern.dev/schemas/mcp.json';

export interface ToolAnswer {
  /** structuredContent: the same facts the HTTP operation answers with. */
  structured: Record<string, unknown>;
  /** What the model reads: short, and with mail-derived text fenced as untrusted (text.ts). */
  text: string;
}

export interface Tool {
  name: string;
  title: string;
  description: string;
  rule: AccessRule;
  /** The $defs entry of schemas/mcp.json that its arguments must match. */
  input: string;
  /** Arguments already checked against `input` (with defaults filled in). */
  run(p: Principal, args: never): Promise<ToolAnswer>;
}

/** Typed at the definition, stored untyped: the registry validates before calling. */
export function tool<A>(t: Omit<Tool, 'run'> & { run(p: Principal, args: A): Promise<ToolAnswer> }): Tool {
  return t;
}
