// Baseline for the live-delivery benchmark: the least an SSE server can do on this machine.
// GET /sse holds a stream open; POST /pub writes the posted text as one frame to every stream.
// No auth, no store, no bus: what is left is Node's own socket writes.
import { createServer, type ServerResponse } from 'node:http';

const clients = new Set<ServerResponse>();
const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/sse') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store' });
    res.socket?.setNoDelay(true);
    res.write('retry: 2000\n\n');
    clients.add(res);
    req.on('close', () => clients.delete(res));
    return;
  }
  if (req.method === 'POST' && req.url === '/pub') {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const frame = `event: bench\ndata: ${Buffer.concat(chunks).toString()}\n\n`;
      for (const c of clients) c.write(frame);
      res.writeHead(201).end();
    });
    return;
  }
  res.writeHead(404).end();
});
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as { port: number };
  process.stdout.write(`${JSON.stringify({ listening: `http://127.0.0.1:${port}` })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
