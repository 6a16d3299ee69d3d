// Running external commands: to completion, or as starters of daemons.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import * as fs from 'node:fs/promises';

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  input?: string;
  env?: NodeJS.ProcessEnv;
  /** Run as this unprivileged user (a daemon that refuses root, such as PostgreSQL). */
  as?: { uid: number; gid: number };
  cwd?: string;
}

/** Runs a command to completion; never rejects on a non-zero exit (callers decide). */
export function runCommand(cmd: string, args: string[], opts: RunOptions = {}): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const input = opts.input;
    const child = spawn(cmd, args, {
      env: opts.env ?? process.env,
      stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
      ...(opts.as ? { uid: opts.as.uid, gid: opts.as.gid } : {}),
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on('data', (b: Buffer) => out.push(b));
    child.stderr?.on('data', (b: Buffer) => err.push(b));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({
        code: code ?? (signal ? 128 : 1),
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      }),
    );
    if (child.stdin) {
      child.stdin.on('error', () => undefined); // a command that exits without reading: EPIPE
      child.stdin.end(input);
    }
  });
}

/**
 * Runs a command that daemonizes. Its forked daemon inherits stdout/stderr, so pipes would
 * never close: the output goes to a file instead, and only the command's own exit is awaited.
 */
export async function runStarter(cmd: string, args: string[], outFile: string, what: string): Promise<void> {
  const fd = openSync(outFile, 'w', 0o644);
  let code: number;
  try {
    code = await new Promise<number>((resolve, reject) => {
      const child = spawn(cmd, args, { stdio: ['ignore', fd, fd] });
      child.on('error', reject);
      child.on('exit', (c, sig) => resolve(c ?? (sig ? 128 : 1)));
    });
  } finally {
    closeSync(fd);
  }
  if (code !== 0) throw new Error(`mailenv: ${what} failed (${cmd} ${args.join(' ')}, exit ${code}):\n${await fileTail(outFile)}`);
}

export async function mustRun(cmd: string, args: string[], what: string, opts: RunOptions = {}): Promise<CommandResult> {
  const res = await runCommand(cmd, args, opts);
  if (res.code !== 0)
    throw new Error(`mailenv: ${what} failed (${cmd} ${args.join(' ')}, exit ${res.code}):\n${tail(res.stdout + res.stderr)}`);
  return res;
}

export function tail(text: string, lines = 30): string {
  return text.trimEnd().split('\n').slice(-lines).join('\n');
}

export async function fileTail(file: string, lines = 30): Promise<string> {
  try {
    return tail(await fs.readFile(file, 'utf8'), lines);
  } catch {
    return `(no ${file})`;
  }
}
