// A node:http app behind ratelimitd, with the ratelimitd package (clients/node),
// the way tests/integration/test_examples.py runs it:
//   RATELIMITD_URL=http://127.0.0.1:8080 PORT=3000 node examples/node/server.mjs
// Env: FAIL_OPEN=0 fails closed; TIMEOUT_MS; CLIENT_HEADER names a request
// header that carries the client's address (a trusted proxy's, in this demo).
// In a project: npm install ./clients/node, then import from 'ratelimitd'.
import http from 'node:http';
import { pathToFileURL } from 'node:url';
import { expressMiddleware } from '../../clients/node/index.js';

// The demos' middleware, from the environment (express.mjs uses it too).
export function limiterFromEnv() {
  const clientHeader = (process.env.CLIENT_HEADER || '').toLowerCase();
  return expressMiddleware({
    url: process.env.RATELIMITD_URL || 'http://127.0.0.1:8080',
    timeout: Number(process.env.TIMEOUT_MS || 200),
    failOpen: process.env.FAIL_OPEN !== '0',
    key: (req) => req.headers['x-api-key'],
    clientIp: clientHeader ? (req) => req.headers[clientHeader] : undefined,
  });
}

// Listen on PORT (0: any), say where, stop on SIGTERM.
export function serve(server, limiter) {
  server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
    console.log(`listening ${server.address().port}`);
  });
  process.on('SIGTERM', () => { limiter.client.close(); server.close(() => process.exit(0)); });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const limiter = limiterFromEnv();
  serve(http.createServer((req, res) => {
    limiter(req, res, () => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      res.end('hello from the app\n');
    });
  }), limiter);
}
