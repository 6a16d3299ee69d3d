// The Debian packages the environment needs, installed with apt-get when missing.
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { mustRun, runCommand, tail, type CommandResult } from './commands.ts';
import { errCode } from './util.ts';

/** A Debian package and files it provides; a missing file means the package is missing. */
export interface PackageNeed {
  pkg: string;
  files: string[];
}

const POLICY_RC_D = '/usr/sbin/policy-rc.d';

function missingPackages(needs: readonly PackageNeed[]): string[] {
  return [...new Set(needs.filter((p) => p.files.some((f) => !existsSync(f))).map((p) => p.pkg))];
}

/**
 * Installs the Debian packages the environment needs, when missing; returns what it installed.
 * Maintainer scripts must not start system-wide daemons (they would take ports 25/143/6379), so
 * a policy-rc.d that denies every start is in place for the duration, unless one already is.
 */
export async function installMissing(needs: readonly PackageNeed[]): Promise<string[]> {
  const missing = missingPackages(needs);
  if (missing.length === 0) return [];
  if (process.getuid?.() !== 0) {
    throw new Error(`mailenv: packages missing (${missing.join(' ')}); run as root, or apt-get install them`);
  }
  const env: NodeJS.ProcessEnv = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  await mustRun('debconf-set-selections', [], 'preseeding postfix', {
    env,
    input: 'postfix postfix/main_mailer_type select No configuration\n',
  });
  let createdPolicy = false;
  try {
    await fs.writeFile(POLICY_RC_D, '#!/bin/sh\n# Postern scripts/mailenv: no daemon starts during apt-get install\nexit 101\n', {
      mode: 0o755,
      flag: 'wx',
    });
    createdPolicy = true;
  } catch (e) {
    if (errCode(e) !== 'EEXIST') throw e;
  }
  try {
    const install = (): Promise<CommandResult> =>
      runCommand(
        'apt-get',
        [
          'install',
          '-y',
          '-q',
          '--no-install-recommends',
          '-o',
          'DPkg::Lock::Timeout=300',
          '-o',
          'Dpkg::Options::=--force-confdef',
          '-o',
          'Dpkg::Options::=--force-confold',
          ...missing,
        ],
        { env },
      );
    let res = await install();
    // Only refresh the package lists when they are what is missing.
    if (
      res.code !== 0 &&
      /Unable to locate package|has no installation candidate|Failed to fetch|404\s+Not Found/i.test(res.stdout + res.stderr)
    ) {
      await mustRun('apt-get', ['update', '-q', '-o', 'DPkg::Lock::Timeout=300'], 'apt-get update', { env });
      res = await install();
    }
    if (res.code !== 0) throw new Error(`mailenv: apt-get install ${missing.join(' ')} failed:\n${tail(res.stdout + res.stderr)}`);
  } finally {
    if (createdPolicy) await fs.rm(POLICY_RC_D, { force: true });
  }
  const still = missingPackages(needs);
  if (still.length > 0) throw new Error(`mailenv: still missing after apt-get install: ${still.join(' ')}`);
  return missing;
}
