// Debian's Chromium, for the web app's browser tests: installed with apt-get when missing (as
// scripts/mailenv installs Dovecot and Postfix), never downloaded by Playwright.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';

export const CHROMIUM = '/usr/bin/chromium';

const run = promisify(execFile);

/** The path of a Chromium binary, installing the Debian package first when it is missing. */
export async function ensureChromium(): Promise<string> {
  if (existsSync(CHROMIUM)) return CHROMIUM;
  if (process.getuid?.() !== 0) throw new Error(`chromium is missing: run as root, or apt-get install -y chromium`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    run('apt-get', ['install', '-y', '-q', '--no-install-recommends', '-o', 'DPkg::Lock::Timeout=300', 'chromium'], {
      env,
      maxBuffer: 64 * 1024 * 1024,
    });
  try {
    await install();
  } catch {
    // Stale package lists are the usual reason: refresh them once.
    await run('apt-get', ['update', '-q', '-o', 'DPkg::Lock::Timeout=300'], { env, maxBuffer: 64 * 1024 * 1024 });
    await install();
  }
  if (!existsSync(CHROMIUM)) throw new Error('apt-get install chromium left no /usr/bin/chromium');
  return CHROMIUM;
}
