// What bin/postern runs: the bundle of bin/postern.ts (bin/cli-bundle.mjs), rebuilt first when a
// source changed since it was built.
import { pathToFileURL } from 'node:url';
import { ensureBundle } from './cli-bundle.mjs';

await import(pathToFileURL(await ensureBundle()).href);
