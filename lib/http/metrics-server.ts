// The internal metrics listener (POSTERN_METRICS_LISTEN): GET /metrics in Prometheus's text
// format, and nothing else. It is its own server on its own address, never a route of the public
// API, so a public port cannot reach it whatever proxies forward there.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Exposition {
  text(): Promise<string>;
  contentType: string;
}

export interface MetricsServer {
  /** http://host:port of the bound listener. */
  url: string;
  close(): Promise<void>;
}

export async function listenMetrics(
  listen: { host: string; port: number },
  exposition: Exposition,
  onError: (err: unknown) => void,
): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not found: metrics are at /metrics' }));
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res
        .writeHead(405, { allow: 'GET, HEAD', 'content-type': 'application/json' })
        .end(JSON.stringify({ error: 'metrics are read with GET' }));
      return;
    }
    exposition.text().then(
      (text) =>
        res
          .writeHead(200, { 'content-type': exposition.contentType, 'cache-control': 'no-store' })
          .end(req.method === 'HEAD' ? undefined : text),
      (err: unknown) => {
        onError(err);
        res
          .writeHead(503, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: 'metrics could not be gathered; try again' }));
      },
    );
  });
  server.listen(listen.port, listen.host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const host = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  return {
    url: `http://${host}:${port}`,
    async close() {
      const closing = once(server, 'close');
      server.close();
      server.closeAllConnections();
      await closing;
    },
  };
}
