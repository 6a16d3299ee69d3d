// GET /docs: an interactive API reference (Swagger UI) built in the browser from the OpenAPI
// document Postern serves. Everything the page loads comes from Postern itself (the swagger-ui-dist
// package's files and ours in api-reference/), under a CSP that allows no inline script and no
// other origin. Public, like the document it renders.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { ROOT } from '../paths.ts';
import type { AppRouter } from './context.ts';

export const DOCS_PATH = '/docs';

/** What the page may load: Postern's own files; Swagger UI's stylesheet uses data: images. */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

interface Asset {
  file: string;
  type: string;
}

const OWN_DIR = join(ROOT, 'lib', 'http', 'api-reference');
const UI_DIR = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));

const ASSETS: Record<string, Asset> = {
  '': { file: join(OWN_DIR, 'index.html'), type: 'text/html; charset=utf-8' },
  '/init.js': { file: join(OWN_DIR, 'init.js'), type: 'text/javascript; charset=utf-8' },
  '/page.css': { file: join(OWN_DIR, 'page.css'), type: 'text/css; charset=utf-8' },
  '/assets/swagger-ui-bundle.js': { file: join(UI_DIR, 'swagger-ui-bundle.js'), type: 'text/javascript; charset=utf-8' },
  '/assets/swagger-ui.css': { file: join(UI_DIR, 'swagger-ui.css'), type: 'text/css; charset=utf-8' },
  '/assets/favicon-32x32.png': { file: join(UI_DIR, 'favicon-32x32.png'), type: 'image/png' },
};

/** The file's bytes, without a trailing source map comment (the maps are not served). */
function load(asset: Asset): Buffer {
  const bytes = readFileSync(asset.file);
  if (asset.type.startsWith('image/')) return bytes;
  return Buffer.from(bytes.toString('utf8').replace(/\n?\/[*/]# sourceMappingURL=\S+?(\s*\*\/)?\s*$/, '\n'));
}

export function apiReferenceRoutes() {
  // Read on first use, then kept: the bundle is 1.7 MB that most processes never serve.
  const cache = new Map<string, Buffer>();
  return (router: AppRouter): void => {
    for (const [suffix, asset] of Object.entries(ASSETS)) {
      router.get(`${DOCS_PATH}${suffix}`, (ctx) => {
        let body = cache.get(suffix);
        if (!body) cache.set(suffix, (body = load(asset)));
        ctx.type = asset.type;
        ctx.set('Content-Security-Policy', DOCS_CSP);
        // Shared caches never store Postern's responses (docs/api.md, "What the service does"); the files change only with a release.
        ctx.set('Cache-Control', 'private, max-age=300');
        ctx.body = body;
      });
    }
  };
}
