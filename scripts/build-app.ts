// Builds the web app (web/) into dist/web/, which Postern serves under /app/. The output is not
// committed: `npm test`, `npm run demo` and `npm run build` build it first. esbuild bundles the
// TypeScript and its npm dependencies into one script file: no CDN, nothing fetched at run time.
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { ROOT } from '../lib/paths.ts';
import { WEB_APP_DIR } from '../lib/http/routes/web-app.ts';

const SOURCE = join(ROOT, 'web');
const STATIC = ['index.html', 'style.css'];

export async function buildApp(out = WEB_APP_DIR): Promise<string> {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  await build({
    entryPoints: [join(SOURCE, 'main.ts')],
    outfile: join(out, 'main.js'),
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    minify: true,
    sourcemap: 'linked',
    legalComments: 'external',
    logLevel: 'warning',
  });
  for (const file of STATIC) copyFileSync(join(SOURCE, file), join(out, file));
  return out;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.stdout.write(`${JSON.stringify({ built: await buildApp() })}\n`);
}
