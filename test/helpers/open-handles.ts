// After the suite, nothing of the tests may keep the process alive (.mocharc has no "exit": a
// forgotten socket, server, child or timer would hang the run). Rather than hang without a
// word, a run still alive some seconds after the last teardown lists what holds it and fails.
import type { ChildProcess } from 'node:child_process';
import type { Server, Socket } from 'node:net';

/** What an active handle is, in words: its kind, and its addresses or command line when known. */
function describeHandle(handle: unknown): string {
  const kind = (handle as { constructor?: { name?: string } } | null)?.constructor?.name ?? typeof handle;
  if (kind === 'Socket' || kind === 'TLSSocket') {
    const s = handle as Socket;
    return `${kind} ${s.localAddress ?? '?'}:${s.localPort ?? '?'} -> ${s.remoteAddress ?? '?'}:${s.remotePort ?? '?'}`;
  }
  if (kind === 'Server') return `Server ${JSON.stringify((handle as Server).address())}`;
  if (kind === 'ChildProcess') return `ChildProcess ${(handle as ChildProcess).pid} ${(handle as ChildProcess).spawnargs.join(' ')}`;
  return kind;
}

/** Arms a check that fires only if the process is still alive after `ms` (the timer itself holds nothing). */
export function failIfStillAliveAfter(ms: number): void {
  setTimeout(() => {
    // Undocumented but long-standing: the handle objects, for addresses and command lines.
    const handles = (process as unknown as { _getActiveHandles?: () => unknown[] })._getActiveHandles?.() ?? [];
    const own = new Set<unknown>([process.stdin, process.stdout, process.stderr]);
    const held = handles.filter((h) => !own.has(h)).map(describeHandle);
    process.stderr.write(
      `\nThe test process is still alive ${ms / 1000} s after the suite ended; something a test opened was not closed.\n` +
        `Active resources: ${process.getActiveResourcesInfo().join(', ')}\n${held.map((h) => `  ${h}`).join('\n')}\n`,
    );
    // Mocha's own 'exit' listener sets the exit code from the test results; this one runs after it.
    process.on('exit', () => (process.exitCode = 1));
    process.exit(1);
  }, ms).unref();
}
