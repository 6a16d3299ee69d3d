// The OpenAPI 3.1 document, built from the same JSON Schema files that validate requests:
// schemas/openapi.json holds the operations, and every $defs of the other schema files becomes
// a component, so the document and the validation can never drift apart.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCHEMAS_DIR } from '../paths.ts';
import type { AppRouter } from './context.ts';
import type { JsonSchema } from './validate.ts';

export const OPENAPI_FILE = 'openapi.json';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** `<file>#/$defs/Name` or `#/$defs/Name` → `#/components/schemas/Name`. */
function rewriteRefs(node: Json): Json {
  if (Array.isArray(node)) return node.map(rewriteRefs);
  if (node === null || typeof node !== 'object') return node;
  const out: { [key: string]: Json } = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === '$ref' && typeof value === 'string') {
      const m = /#\/\$defs\/([A-Za-z0-9_]+)$/.exec(value);
      if (!m) throw new Error(`cannot place $ref ${value} in the OpenAPI document`);
      out[key] = `#/components/schemas/${m[1]}`;
    } else {
      out[key] = rewriteRefs(value);
    }
  }
  return out;
}

export function buildOpenApi(schemas: JsonSchema[], dir = SCHEMAS_DIR): Record<string, Json> {
  const doc = JSON.parse(readFileSync(join(dir, OPENAPI_FILE), 'utf8')) as Record<string, Json> & {
    components: { [key: string]: Json };
  };
  const components: { [key: string]: Json } = {};
  for (const schema of schemas) {
    for (const [name, def] of Object.entries((schema.$defs ?? {}) as Record<string, Json>)) {
      if (name in components) throw new Error(`schema name ${name} is defined twice (${schema.$id})`);
      components[name] = def;
    }
  }
  return rewriteRefs({ ...doc, components: { ...doc.components, schemas: components } }) as Record<string, Json>;
}

/** Served without credentials on both base addresses: the contract is public. */
export function openApiRoutes(document: Record<string, Json>, prefixes: string[]) {
  const body = JSON.stringify(document);
  return (router: AppRouter): void => {
    for (const prefix of prefixes) {
      router.get(`${prefix}/openapi.json`, (ctx) => {
        ctx.type = 'application/json';
        // Shared caches never store Postern's responses (docs/api.md, "What the service does"), not even the public contract.
        ctx.set('Cache-Control', 'private, max-age=300');
        ctx.body = body;
      });
    }
  };
}
