// Compiles event data schemas and caches them by content, so a registered type's schema is
// compiled the first time it is used and not again while it stays in use (docs/events.md, "Registered types"). Keyed
// by a hash of the schema itself: another instance updating a type compatibly changes the key,
// so a stale compiled schema is never used.
//
// Bounded for real. Ajv keeps every schema it compiled (its own cache, and each validator and
// schema in its code scope, which removeSchema() does not clear), so evicting from a map of
// ours frees nothing. Instead each Ajv compiles at most GENERATION_SIZE schemas; then a fresh
// Ajv starts an empty generation and the old one, with everything it compiled, is garbage once
// no caller holds its validators (they are only used synchronously). A schema still in use is
// compiled again in the new generation on its next use: once per GENERATION_SIZE new schemas.
//
// Ajv is loaded with the first generation, synchronously (it is CommonJS), so what only reads
// events (the staff commands) never loads it (docs/operations.md, "The postern command").
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type * as Ajv from 'ajv/dist/2020.js';
import { describeSchemaError } from '../schema-errors.ts';
import type { JsonSchemaObject } from './types.ts';

/** Compiled schemas kept at most (about 7 KB of heap each). */
export const GENERATION_SIZE = 2_000;

interface Generation {
  ajv: Ajv.Ajv2020;
  compiled: Map<string, Ajv.ValidateFunction>;
}

const requireHere = createRequire(import.meta.url);

function newGeneration(): Generation {
  const { Ajv2020 } = requireHere('ajv/dist/2020.js') as typeof Ajv;
  return {
    ajv: new Ajv2020({ allErrors: false, strict: true, coerceTypes: false, useDefaults: false, addUsedSchema: false }),
    compiled: new Map(),
  };
}

let generation: Generation | null = null;

// Catalog entries are built once and reused: their key is found by identity, no hashing on the
// hot path. Only the key is kept here, never a validator, so this holds no generation alive.
const keys = new WeakMap<JsonSchemaObject, string>();

function compile(schema: JsonSchemaObject): Ajv.ValidateFunction {
  let key = keys.get(schema);
  if (key === undefined) {
    const { $id: _ignored, ...rest } = schema;
    key = createHash('sha256').update(JSON.stringify(rest)).digest('base64url');
    keys.set(schema, key);
  }
  let fn = generation?.compiled.get(key);
  if (!fn) {
    if (generation === null || generation.compiled.size >= GENERATION_SIZE) generation = newGeneration();
    const { $id: _ignored, ...rest } = schema;
    fn = generation.ajv.compile(rest);
    generation.compiled.set(key, fn);
  }
  return fn;
}

/** null when `data` matches the schema, otherwise what is wrong, in words. */
export function checkData(schema: JsonSchemaObject, data: unknown): string | null {
  const fn = compile(schema);
  return fn(data) ? null : describeSchemaError(fn.errors![0]!, 'data');
}
