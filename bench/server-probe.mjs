// Loaded into a benchmarked server with `--import` (bench/tenants.ts, --probe=FILE): writes JSON
// lines to $POSTERN_BENCH_PROBE that say where a slow answer waited. Plain JavaScript, no
// dependency on the server's code; it only listens on node's diagnostics channels.
//   {"loop":…}  every 250 ms: the event loop's delay (max and p99, ms), its utilization, the heap;
//   {"req":…}   each request from $POSTERN_BENCH_PROBE_FROM (an address): when its connection was
//               accepted, when node parsed its head (the request event), when its answer finished.
import { subscribe } from 'node:diagnostics_channel';
import { appendFileSync, writeFileSync } from 'node:fs';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';

const file = process.env.POSTERN_BENCH_PROBE;
const from = process.env.POSTERN_BENCH_PROBE_FROM ?? '';
if (file) {
  // The monotonic clock's microseconds at one wall-clock instant: a --cpu-prof profile's times are on it.
  writeFileSync(
    file,
    JSON.stringify({ sync: performance.timeOrigin + performance.now(), hr: Number(process.hrtime.bigint() / 1000n) }) + '\n',
  );
  const now = () => performance.timeOrigin + performance.now();
  const lines = [];
  const flush = () => {
    if (lines.length) appendFileSync(file, lines.splice(0).join('\n') + '\n');
  };
  const accepted = new WeakMap();
  subscribe('net.server.socket', ({ socket }) => {
    accepted.set(socket, now());
  });
  // Every answer in the tick, by the caller's address and status.
  let answers = {};
  subscribe('http.server.request.start', ({ request, response, socket }) => {
    const address = String(socket.remoteAddress).replace(/^::ffff:/, '');
    response.once('finish', () => {
      const k = `${address} ${response.statusCode}`;
      answers[k] = (answers[k] ?? 0) + 1;
    });
    if (from && !address.endsWith(from)) return;
    const start = now();
    const acc = accepted.get(socket);
    // Only a connection's first request is timed from its accept.
    accepted.delete(socket);
    response.once('finish', () => {
      lines.push(
        JSON.stringify({
          req: request.url.slice(0, 200),
          id: request.headers['x-request-id'],
          m: request.method,
          acc,
          start,
          end: now(),
          st: response.statusCode,
        }),
      );
    });
  });
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  let elu = performance.eventLoopUtilization();
  const timer = setInterval(() => {
    const e = performance.eventLoopUtilization(elu);
    elu = performance.eventLoopUtilization();
    lines.push(
      JSON.stringify({
        loop: now(),
        max: h.max / 1e6,
        p99: h.percentile(99) / 1e6,
        elu: Math.round(e.utilization * 100) / 100,
        heap: Math.round(process.memoryUsage().heapUsed / 1e6),
        answers,
      }),
    );
    answers = {};
    h.reset();
    flush();
  }, 250);
  timer.unref();
  process.on('exit', flush);
}
