// The JavaScript that bin/postern runs: bin/postern.ts and every source of this repository it
// imports, bundled by esbuild into dist/cli/<build>/ (packages stay in node_modules), so no
// command pays for compiling TypeScript. Built when missing, and again as soon as a file it was
// built from differs (modification time or size) from when it was built: an edited source never
// runs stale. Plain JavaScript, because it runs before anything is compiled.
// docs/operations.md, "The postern command".
//
//   node bin/cli-bundle.mjs        (npm run build:cli) builds it now unless it is current; npm test
//                                  and the test setup do, so no test spawns a build of its own
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = 'bin/postern.ts';
export const OUT_DIR = join(ROOT, 'dist', 'cli');
/** Which build is current and the signature of each file it was built from. */
const STAMP = join(OUT_DIR, 'current.json');
/** What the bundle depends on besides the sources esbuild reads: this file, and esbuild's settings. */
const ALSO_READ = ['bin/cli-bundle.mjs', 'tsconfig.json', 'package.json'];
/** Builds superseded are removed once this old, the newest few kept: a process may still load their chunks. */
const KEEP_MS = 60 * 60 * 1000;
const KEEP_NEWEST = 4;

/** `mtime:size` of a file under ROOT, or null when it is gone. */
function signature(file) {
  const s = statSync(join(ROOT, file), { throwIfNoEntry: false });
  return s === undefined ? null : `${s.mtimeMs}:${s.size}`;
}

/** The current bundle's entry, or null when there is none or a file it was built from changed. */
export function freshBundle() {
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(STAMP, 'utf8'));
  } catch {
    return null;
  }
  for (const [file, sig] of Object.entries(stamp.inputs)) {
    if (signature(file) !== sig) return null;
  }
  const entry = join(OUT_DIR, stamp.build, 'postern.mjs');
  return statSync(entry, { throwIfNoEntry: false }) ? entry : null;
}

/**
 * Each source sees its own location as import.meta.url, as when run from TypeScript: lib/paths.ts
 * finds the repository from it, scripts/mailenv.ts tells whether it is the program run, the SMTP
 * sink's starter finds scripts/sink.ts. Written relative to the chunk (every build directory is at
 * the same depth), so the checkout may move.
 */
const ownUrls = (outdir) => ({
  name: 'own-import-meta-url',
  setup(build) {
    build.onLoad({ filter: /\.ts$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      if (!source.includes('import.meta')) return undefined;
      if (/import\.meta\.(dirname|filename)/.test(source)) {
        return { errors: [{ text: 'import.meta.dirname and import.meta.filename are not rewritten for the bundle: use import.meta.url' }] };
      }
      const own = relative(outdir, args.path).split(sep).join('/');
      return { contents: source.replaceAll('import.meta.url', `new URL(${JSON.stringify(own)}, import.meta.url).href`), loader: 'ts' };
    });
  },
});

/**
 * Builds the bundle and makes it current; returns its entry. Safe to run in several processes at
 * once (the first runs after a clone): each builds in a directory of its own, renamed whole into
 * place under the hash of what it holds, and the stamp naming it is replaced by a rename, so no
 * process ever reads a half-written file.
 */
export async function buildBundle() {
  const { build, stop } = await import('esbuild');
  const started = Date.now();
  mkdirSync(OUT_DIR, { recursive: true });
  const tmp = mkdtempSync(join(OUT_DIR, '.build-'));
  // mkdtemp makes it private; whoever may run bin/postern may read its build.
  chmodSync(tmp, 0o755);
  let result;
  try {
    result = await build({
      absWorkingDir: ROOT,
      entryPoints: [ENTRY],
      outdir: tmp,
      bundle: true,
      splitting: true,
      format: 'esm',
      platform: 'node',
      target: 'node20',
      packages: 'external',
      outExtension: { '.js': '.mjs' },
      sourcemap: true,
      metafile: true,
      logLevel: 'error',
      plugins: [ownUrls(tmp)],
    });
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  } finally {
    // esbuild's service process would otherwise live as long as the command (a `serve`, say).
    await stop();
  }
  const hash = createHash('sha256');
  for (const name of readdirSync(tmp).sort()) hash.update(name).update(readFileSync(join(tmp, name)));
  const name = hash.digest('hex').slice(0, 16);
  try {
    renameSync(tmp, join(OUT_DIR, name));
  } catch (err) {
    // Another process built the same bundle first.
    if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
    rmSync(tmp, { recursive: true, force: true });
  }
  const inputs = {};
  const built = Date.now();
  for (const file of [...Object.keys(result.metafile.inputs), ...ALSO_READ]) {
    const sig = signature(file);
    // Changed while esbuild read it: this bundle may hold either version, so the next run rebuilds.
    const mtime = sig === null ? 0 : Number(sig.split(':')[0]);
    inputs[file] = mtime >= started && mtime <= built ? 'changed during the build' : sig;
  }
  const stampTmp = `${STAMP}.${process.pid}.${name}`;
  writeFileSync(stampTmp, `${JSON.stringify({ build: name, inputs }, null, 1)}\n`);
  renameSync(stampTmp, STAMP);
  removeOldBuilds(name);
  return join(OUT_DIR, name, 'postern.mjs');
}

function removeOldBuilds(current) {
  // Another process may be removing them too.
  const others = readdirSync(OUT_DIR, { withFileTypes: true })
    .filter((d) => d.isDirectory() && d.name !== current)
    .map((d) => ({ path: join(OUT_DIR, d.name), mtimeMs: statSync(join(OUT_DIR, d.name), { throwIfNoEntry: false })?.mtimeMs ?? 0 }))
    .sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const [i, d] of others.entries()) {
    if (i >= KEEP_NEWEST && Date.now() - d.mtimeMs > KEEP_MS) rmSync(d.path, { recursive: true, force: true });
  }
}

/** The current bundle's entry, built first unless it is current. */
export async function ensureBundle() {
  return freshBundle() ?? (await buildBundle());
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const started = Date.now();
  const fresh = freshBundle();
  const entry = fresh ?? (await buildBundle());
  process.stdout.write(`${JSON.stringify({ bundle: relative(ROOT, entry), built: fresh === null, ms: Date.now() - started })}\n`);
}
