// What bin/postern runs: the bundle of bin/postern.ts (bin/cli-bundle.mjs), rebuilt first when a
// source changed since it was built.
import { pathToFileURL } from 'node:url';
import { buildBundle, freshBundle } from './cli-bundle.mjs';

const entry = freshBundle() ?? (await buildBundle());
await import(pathToFileURL(entry).href);
