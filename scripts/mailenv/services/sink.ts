// The SMTP sink (scripts/sink.ts): "the internet" behind Postfix's relayhost.
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Layout } from '../layout.ts';
import { HOST, ports } from '../ports.ts';
import { procCmdline } from '../processes.ts';
import type { Service } from './service.ts';

const SELF_FILE = fileURLToPath(import.meta.url);
/** scripts/sink.(ts|js), two folders up, with this file's own extension (tsx or built). */
const SINK_SCRIPT = path.join(path.dirname(SELF_FILE), '..', '..', `sink${path.extname(SELF_FILE)}`);

export const sink: Service<'sink'> = {
  name: 'sink',
  packages: [],

  async prepare(l: Layout): Promise<void> {
    for (const d of [l.sinkDir, l.sinkMessagesDir]) await fs.mkdir(d, { recursive: true, mode: 0o755 });
  },

  probes(l: Layout) {
    return [{ what: 'SMTP', port: ports(l.basePort).sink, expect: '220 ', quit: 'QUIT\r\n' }];
  },

  log: (l) => l.sinkLog,
  pidFile: (l) => l.sinkPidFile,
  isOurs: (l, pid) => procCmdline(pid).includes(l.sinkMessagesDir),

  /** Run the way this process runs (tsx for .ts, plain node for .js). */
  async start(l: Layout): Promise<void> {
    const execArgv = process.execArgv.filter((a) => !/^--(inspect|debug)/.test(a));
    // bin/postern runs its sources bundled, without tsx (docs/operations.md, "The postern
    // command"), yet this file still names the TypeScript sink: give that one tsx's loader.
    if (SINK_SCRIPT.endsWith('.ts') && !execArgv.some((a) => a.includes('tsx'))) execArgv.push('--import', import.meta.resolve('tsx'));
    const log = openSync(l.sinkLog, 'a');
    try {
      const child = spawn(
        process.execPath,
        [...execArgv, SINK_SCRIPT, '--host', HOST, '--port', String(ports(l.basePort).sink), '--dir', l.sinkMessagesDir],
        {
          detached: true,
          stdio: ['ignore', log, log],
          // `--import tsx` in execArgv resolves against the working directory, so keep ours.
        },
      );
      if (child.pid === undefined) throw new Error(`mailenv: could not spawn ${process.execPath} ${SINK_SCRIPT}`);
      await fs.writeFile(l.sinkPidFile, `${child.pid}\n`);
      child.unref();
    } finally {
      closeSync(log);
    }
  },

  // Nobody else removes the pid file the start wrote.
  async afterStop(l: Layout): Promise<void> {
    await fs.rm(l.sinkPidFile, { force: true });
  },
};
