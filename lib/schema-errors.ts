// One way to say what is wrong with a value that failed a JSON Schema, for request validation
// and for event data alike: the path in the caller's terms, then the rule it broke.
import type { ErrorObject } from 'ajv/dist/2020.js';

export function describeSchemaError(e: ErrorObject, root: string): string {
  const at = e.instancePath ? `${root}${e.instancePath.replace(/\/(\d+)/g, '[$1]').replace(/\//g, '.')}` : root;
  switch (e.keyword) {
    case 'enum':
      return `${at} must be one of ${(e.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
    case 'additionalProperties':
      return `${at} has an unknown field "${(e.params as { additionalProperty: string }).additionalProperty}"`;
    case 'required':
      return `${at} is missing the required field "${(e.params as { missingProperty: string }).missingProperty}"`;
    default:
      return `${at} ${e.message ?? 'is invalid'}`;
  }
}
