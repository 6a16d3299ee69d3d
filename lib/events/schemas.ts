// Compiles event data schemas once and caches them by content, so a registered type's schema is
// compiled the first time it is used in this process and never again (DESIGN.md 6). Keyed by a
// hash of the schema itself: another instance updating a type compatibly changes the key, so a
// stale compiled schema is never used.
import { createHash } from 'node:crypto';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { describeSchemaError } from '../schema-errors.ts';
import type { JsonSchemaObject } from './types.ts';

const ajv = new Ajv2020({ allErrors: false, strict: true, coerceTypes: false, useDefaults: false, addUsedSchema: false });
const cache = new Map<string, ValidateFunction>();
const MAX_CACHED = 10_000;

const bySchemaObject = new WeakMap<JsonSchemaObject, ValidateFunction>();

function compile(schema: JsonSchemaObject): ValidateFunction {
  // Catalog entries are built once and reused: found by identity, no hashing on the hot path.
  const known = bySchemaObject.get(schema);
  if (known) return known;
  const { $id: _ignored, ...rest } = schema;
  const key = createHash('sha256').update(JSON.stringify(rest)).digest('base64url');
  let fn = cache.get(key);
  if (!fn) {
    // Bounded: a pathological number of distinct types evicts the oldest, it is not a leak.
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value!);
    fn = ajv.compile(rest);
    cache.set(key, fn);
  }
  bySchemaObject.set(schema, fn);
  return fn;
}

/** null when `data` matches the schema, otherwise what is wrong, in words. */
export function checkData(schema: JsonSchemaObject, data: unknown): string | null {
  const fn = compile(schema);
  return fn(data) ? null : describeSchemaError(fn.errors![0]!, 'data');
}

