// Builds the web app (web/) into dist/web/, which Postern serves under /app/. The output is not
// committed: `npm test`, `npm run demo` and `npm run build` build it first. esbuild bundles the
// TypeScript and its npm dependencies into one script file: no CDN, nothing fetched at run time.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { ROOT } from '../lib/paths.ts';
import { WEB_APP_DIR } from '../lib/http/routes/web-app.ts';

const SOURCE = join(ROOT, 'web');
const STATIC = ['index.html', 'style.css'];

/** True when both folders hold the same files with the same bytes. */
function sameFiles(a: string, b: string): boolean {
  if (!existsSync(b)) return false;
  const names = readdirSync(a).sort();
  const others = readdirSync(b).sort();
  return (
    names.length === others.length && names.every((n, i) => n === others[i] && readFileSync(join(a, n)).equals(readFileSync(join(b, n))))
  );
}

/**
 * Builds into a folder of its own, then puts it in place only if it differs from what is there:
 * test files in other lanes (docs/testing.md) build the app while Postern serves it from `out`,
 * and a build that deleted `out` first left their pages without their script.
 */
export async function buildApp(out = WEB_APP_DIR): Promise<string> {
  const fresh = `${out}.build-${process.pid}-${Date.now()}`;
  mkdirSync(fresh, { recursive: true });
  try {
    await build({
      entryPoints: [join(SOURCE, 'main.ts')],
      outfile: join(fresh, 'main.js'),
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      minify: true,
      sourcemap: 'linked',
      legalComments: 'external',
      logLevel: 'warning',
    });
    for (const file of STATIC) copyFileSync(join(SOURCE, file), join(fresh, file));
    if (sameFiles(fresh, out)) return out;
    // Two renames: `out` is missing only between them.
    const old = `${fresh}.old`;
    if (existsSync(out)) renameSync(out, old);
    renameSync(fresh, out);
    rmSync(old, { recursive: true, force: true });
    return out;
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.stdout.write(`${JSON.stringify({ built: await buildApp() })}\n`);
}
