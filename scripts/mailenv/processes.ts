// Processes, read from Linux /proc: alive or not, what they run, their descendants; signals.
import { readFileSync, readlinkSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import { errCode, sleep } from './util.ts';

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    return errCode(e) === 'EPERM';
  }
  // A zombie is as good as gone.
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true;
  }
}

export function procCmdline(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .filter((s) => s.length > 0);
  } catch {
    return [];
  }
}

export function procCwd(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/cwd`);
  } catch {
    return undefined;
  }
}

export function procEnviron(pid: number, name: string): string | undefined {
  try {
    const entry = readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .find((s) => s.startsWith(`${name}=`));
    return entry?.slice(name.length + 1);
  } catch {
    return undefined;
  }
}

/** pid -> parent pid, for every process. */
async function processTable(): Promise<Map<number, number>> {
  const table = new Map<number, number>();
  for (const name of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = await fs.readFile(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      table.set(Number(name), Number(fields[1]));
    } catch {
      // exited meanwhile
    }
  }
  return table;
}

export async function withDescendants(pid: number): Promise<number[]> {
  const table = await processTable();
  const found = [pid];
  for (let i = 0; i < found.length; i++) {
    for (const [child, parent] of table) if (parent === found[i] && !found.includes(child)) found.push(child);
  }
  return found;
}

export async function readPid(file: string): Promise<number | null> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/** Waits until the pids have exited; returns those still alive at the deadline. */
export async function waitGone(pids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let alive = pids.filter(isAlive);
  while (alive.length > 0 && Date.now() < deadline) {
    await sleep(50);
    alive = alive.filter(isAlive);
  }
  return alive;
}

export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (e) {
    if (errCode(e) !== 'ESRCH') throw e;
  }
}
