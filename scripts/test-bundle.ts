// The test files as JavaScript, for the suite's runner (scripts/run-tests.ts): each test file and
// the mocha setup bundled by esbuild with the repository's sources they import (packages stay in
// node_modules), shared code in common chunks so a process still holds one copy of each module.
// A test process then loads plain JavaScript instead of compiling TypeScript through tsx's
// loader hooks: about 2 s less CPU per file, and the suite runs over 300 files on two cores
// (docs/testing.md). A lone `npx mocha` still runs the sources as they are.
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Plugin } from 'esbuild';
import { ROOT } from '../lib/paths.ts';

export interface TestBundle {
  /** The bundled setup (what .mocharc.json requires) and each test file's bundle, by its path under ROOT. */
  setup: string;
  files: Map<string, string>;
  /** Removes the build. */
  remove(): void;
}

/**
 * Each source sees its own file as import.meta.url (and dirname, filename), as when tsx runs it:
 * lib/paths.ts finds the repository from it, tests find their fixtures beside them.
 */
const sourceLocations: Plugin = {
  name: 'source-locations',
  setup(build) {
    build.onLoad({ filter: /\.m?[jt]s$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      if (!source.includes('import.meta.')) return undefined;
      const contents = source
        .replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href))
        .replaceAll('import.meta.dirname', JSON.stringify(join(args.path, '..')))
        .replaceAll('import.meta.filename', JSON.stringify(args.path));
      return { contents, loader: args.path.endsWith('.ts') ? 'ts' : 'js' };
    });
  },
};

/** Bundles `files` (paths under ROOT) and `setup` into a fresh folder under dist/test/. */
export async function buildTestBundle(files: string[], setup: string): Promise<TestBundle> {
  const { build, stop } = await import('esbuild');
  const base = join(ROOT, 'dist', 'test');
  mkdirSync(base, { recursive: true });
  const outdir = mkdtempSync(join(base, 'run-'));
  const entries = [...new Set([setup, ...files])];
  try {
    await build({
      absWorkingDir: ROOT,
      entryPoints: entries,
      outdir,
      outbase: ROOT,
      entryNames: '[dir]/[name]',
      chunkNames: 'chunks/[name]-[hash]',
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      packages: 'external',
      outExtension: { '.js': '.mjs' },
      sourcemap: true,
      logLevel: 'error',
      plugins: [sourceLocations],
    });
  } catch (err) {
    rmSync(outdir, { recursive: true, force: true });
    throw err;
  } finally {
    await stop();
  }
  const bundled = (file: string) => join(outdir, relative(ROOT, join(ROOT, file)).replace(/\.ts$/, '.mjs'));
  return {
    setup: bundled(setup),
    files: new Map(files.map((f) => [f, bundled(f)])),
    remove: () => rmSync(outdir, { recursive: true, force: true }),
  };
}
