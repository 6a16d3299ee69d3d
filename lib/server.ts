// The one place that wires adapters to the domain and starts the HTTP server.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { pino, type Logger } from 'pino';
import { openDb, type Db } from '../adapters/store/sqlite/db.ts';
import { SqliteDirectoryStore } from '../adapters/store/sqlite/directory.ts';
import { Access } from './auth/access.ts';
import type { Config } from './config.ts';
import { Admin } from './directory/admin.ts';
import { createApp } from './http/app.ts';
import { healthRoutes } from './http/routes/health.ts';
import { inboxRoutes } from './http/routes/inboxes.ts';
import { Validator } from './http/validate.ts';

export interface Postern {
  config: Config;
  log: Logger;
  db: Db;
  access: Access;
  admin: Admin;
  validator: Validator;
  /** Starts listening; resolves with the bound address. */
  listen(): Promise<{ url: string; port: number }>;
  close(): Promise<void>;
}

export function createPostern(config: Config, log: Logger = pino({ level: config.logLevel })): Postern {
  const db = openDb(config.dbFile);
  const directory = new SqliteDirectoryStore(db);
  const access = new Access(directory);
  const admin = new Admin(directory, { tokenTtlSeconds: config.tokenTtlSeconds, sessionTtlSeconds: config.sessionTtlSeconds });
  const validator = new Validator();

  const app = createApp({
    access,
    log,
    trustProxy: config.http.trustProxy,
    publicRoutes: [healthRoutes(() => void db.prepare('SELECT 1').get())],
    routes: [inboxRoutes(access)],
  });

  let server: Server | null = null;
  return {
    config,
    log,
    db,
    access,
    admin,
    validator,
    async listen() {
      server = app.listen(config.http.port, config.http.host);
      await once(server, 'listening');
      // Long-lived event streams must not be cut by Node's request timeouts.
      server.requestTimeout = 0;
      server.keepAliveTimeout = 65_000;
      const { port } = server.address() as AddressInfo;
      const host = config.http.host.includes(':') ? `[${config.http.host}]` : config.http.host;
      return { url: `http://${host}:${port}`, port };
    },
    async close() {
      if (server) {
        const closing = once(server, 'close');
        server.close();
        server.closeAllConnections();
        await closing;
        server = null;
      }
      db.close();
    },
  };
}
