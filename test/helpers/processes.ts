// Child processes for the tests and the benchmarks: a free port, a command that prints a JSON
// line with "listening" once it serves (as `postern serve` does), and a clean stop.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ROOT } from '../../lib/paths.ts';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

export interface Listening {
  child: ChildProcess;
  /** The URL from the process's {"listening": …} line. */
  url: string;
}

/** Starts `cmd` (in `cwd`, else this process's) and resolves once it prints its {"listening": url} line. */
export async function spawnListening(
  cmd: string,
  argv: string[],
  env: Record<string, string>,
  timeoutMs = 30_000,
  cwd?: string,
): Promise<Listening> {
  const child = spawn(cmd, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], ...(cwd ? { cwd } : {}) });
  let out = '';
  let err = '';
  // Drained for the life of the child, so a chatty one never blocks on a full pipe.
  child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4096)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${cmd} did not start listening: ${out} ${err}`)), timeoutMs);
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      const line = out.split('\n').find((l) => l.includes('"listening"'));
      if (line) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { listening: string }).listening);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${cmd} exited with ${code}: ${out} ${err}`));
    });
  });
  return { child, url };
}

/** What a one-shot `postern` command did: its exit code, its last stdout line as JSON (or {}), and its output. */
export interface PosternRun {
  code: number;
  out: Record<string, unknown>;
  stdout: string;
  stderr: string;
}

/** Runs `bin/postern ARGS…` to its end with `env` over this process's environment. */
export function runPostern(args: readonly string[], env: Record<string, string>): Promise<PosternRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(ROOT, 'bin', 'postern'), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      let out: Record<string, unknown> = {};
      try {
        out = JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as Record<string, unknown>;
      } catch {
        // Left empty: the assertion on `out` reports it.
      }
      resolve({ code: code ?? -1, out, stdout, stderr });
    });
  });
}

/**
 * `postern serve` as bin/postern runs it (the bundle of the current sources, bin/launch.mjs),
 * optionally with extra node flags (a profiler, say: it names the bundle's chunks and functions),
 * in its own working directory `cwd` (a machine of its own: a relative POSTERN_DB would land there).
 */
export function spawnPostern(env: Record<string, string>, nodeArgs: string[] = [], cwd?: string): Promise<Listening> {
  return spawnListening(process.execPath, [...nodeArgs, join(ROOT, 'bin/launch.mjs'), 'serve'], env, 30_000, cwd);
}

export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

/** Whether a process exists (signal 0 checks without sending anything). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A process's children, those whose command line contains `matching` if given. */
export function childPids(pid: number, matching?: string): number[] {
  try {
    const args = ['-P', String(pid), ...(matching ? ['-f', matching] : [])];
    return execFileSync('pgrep', args, { encoding: 'utf8' }).trim().split('\n').filter(Boolean).map(Number);
  } catch {
    return []; // pgrep exits 1 when there are none
  }
}
