// Whether a process that once wrote to the store still runs, for the outbox's recovery: a row's
// owner is this process's identity (host, pid and the pid's start time), so a process restarted
// in the same place (a container's pid 1 again, a pid reused) is not taken for its predecessor.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';

export interface ProcessIdentity {
  /** The hostname and, on Linux, the kernel's boot id: pids compare only within one. */
  host: string;
  pid: number;
  /** When the kernel started the pid (clock ticks since boot, /proc/<pid>/stat); '' where unknown. */
  pidStart: string;
}

function bootId(): string {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return '';
  }
}

/** The start time of a pid, null when no such process runs, '' when it cannot be read. */
function startOf(pid: number): string | null {
  try {
    // Field 22, counted after the command name's closing parenthesis (the name may hold spaces).
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return process.platform === 'linux' ? null : signalled(pid);
    return '';
  }
}

/** Without /proc: whether signal 0 reaches the pid (EPERM: it exists, as another user's). */
function signalled(pid: number): string | null {
  try {
    process.kill(pid, 0);
    return '';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM' ? '' : null;
  }
}

export function thisProcess(): ProcessIdentity {
  return { host: `${hostname()}/${bootId()}`, pid: process.pid, pidStart: startOf(process.pid) ?? '' };
}

/**
 * Whether the process `other` names is running, as far as this host can tell; null when it ran
 * on another host (the caller then judges by how recently it was seen).
 */
export function stillRuns(other: ProcessIdentity, self: ProcessIdentity): boolean | null {
  if (other.host !== self.host) return null;
  const start = startOf(other.pid);
  if (start === null) return false;
  // Both known and different: the pid is another process's now.
  return !(start !== '' && other.pidStart !== '' && start !== other.pidStart);
}
