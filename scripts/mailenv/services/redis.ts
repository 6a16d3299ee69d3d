// A private Redis (no persistence) for Postern's event bus.
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { runStarter } from '../commands.ts';
import type { Layout } from '../layout.ts';
import { HOST, ports } from '../ports.ts';
import { procCmdline, procCwd } from '../processes.ts';
import { sleep } from '../util.ts';
import type { Service } from './service.ts';

export const redis: Service<'redis'> = {
  name: 'redis',
  packages: [{ pkg: 'redis-server', files: ['/usr/bin/redis-server'] }],

  async prepare(l: Layout): Promise<void> {
    await fs.mkdir(l.redisDir, { recursive: true, mode: 0o755 });
  },

  probes(l: Layout) {
    return [{ what: 'RESP', port: ports(l.basePort).redis, expect: '+PONG', send: 'PING\r\n', quit: 'QUIT\r\n' }];
  },

  log: (l) => l.redisLog,
  pidFile: (l) => l.redisPidFile,
  // redis-server rewrites its title to "redis-server HOST:PORT"; it works in its --dir.
  isOurs: (l, pid) =>
    procCmdline(pid)
      .join(' ')
      .includes(`redis-server ${HOST}:${ports(l.basePort).redis}`) && procCwd(pid) === l.redisDir,

  async start(l: Layout): Promise<void> {
    await runStarter(
      'redis-server',
      [
        '--bind',
        HOST,
        '--port',
        String(ports(l.basePort).redis),
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'yes',
        '--pidfile',
        l.redisPidFile,
        '--logfile',
        l.redisLog,
        '--dir',
        l.redisDir,
      ],
      path.join(l.redisDir, 'start.out'),
      `starting redis-server (log: ${l.redisLog})`,
    );
    // The pid file appears just after the daemon forks.
    for (let i = 0; i < 50 && !existsSync(l.redisPidFile); i++) await sleep(20);
  },
  // redis-server shuts down cleanly on SIGTERM: the default stop.
};
