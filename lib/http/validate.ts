// Request validation at the edge: every body and query is checked against a JSON Schema from
// schemas/ (the same files the OpenAPI document is built from); inside, the shapes are trusted.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { invalid } from '../errors.ts';
import { SCHEMAS_DIR } from '../paths.ts';
import { describeSchemaError } from '../schema-errors.ts';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

export type JsonSchema = Record<string, unknown> & { $id: string };

/** Every schema in schemas/, keyed by its $id. */
export function loadSchemas(dir = SCHEMAS_DIR): JsonSchema[] {
  return (
    readdirSync(dir)
      // The OpenAPI document is built from these schemas; it is not one itself.
      .filter((f) => f.endsWith('.json') && f !== 'openapi.json')
      .sort()
      .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as JsonSchema)
  );
}

function makeAjv(schemas: JsonSchema[], coerce: boolean): Ajv2020 {
  // Query strings arrive as text: their validator coerces "50" to 50; bodies are taken as sent.
  const ajv = new Ajv2020({ allErrors: false, strict: true, coerceTypes: coerce, useDefaults: true });
  addFormats(ajv);
  ajv.addKeyword('x-postern');
  for (const s of schemas) ajv.addSchema(s);
  return ajv;
}

export class Validator {
  private readonly bodies: Ajv2020;
  private readonly queries: Ajv2020;
  private readonly cache = new Map<string, ValidateFunction>();

  constructor(readonly schemas: JsonSchema[] = loadSchemas()) {
    this.bodies = makeAjv(schemas, false);
    this.queries = makeAjv(schemas, true);
  }

  private fn(kind: 'body' | 'query', ref: string): ValidateFunction {
    const key = `${kind} ${ref}`;
    let fn = this.cache.get(key);
    if (!fn) {
      const ajv = kind === 'body' ? this.bodies : this.queries;
      fn = ajv.getSchema(ref);
      if (!fn) throw new Error(`no schema ${ref}`);
      this.cache.set(key, fn);
    }
    return fn;
  }

  /** The value if it matches the schema `ref` (an $id, optionally with a #/pointer); 400 otherwise. */
  body<T>(ref: string, value: unknown): T {
    const fn = this.fn('body', ref);
    if (!fn(value)) throw invalid(describeSchemaError(fn.errors![0]!, 'body'));
    return value as T;
  }

  /** A copy of the query, coerced and defaulted by the schema; 400 when it does not match. */
  query<T>(ref: string, query: Record<string, string | string[] | undefined>): T {
    const copy: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(query)) {
      // A repeated parameter is ambiguous: refuse it rather than pick one.
      if (Array.isArray(v)) throw invalid(`query parameter ${k} is repeated`);
      copy[k] = v;
    }
    const fn = this.fn('query', ref);
    if (!fn(copy)) throw invalid(describeSchemaError(fn.errors![0]!, 'query parameter').replace('query parameter.', 'query parameter '));
    return copy as T;
  }
}
