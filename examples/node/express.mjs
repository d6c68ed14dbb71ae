// The middleware in an Express app, mounted on a prefix: only /api is limited,
// and the check carries the whole path (/api/orders), not what Express leaves
// in req.url under the mount (/orders).  Debian: apt-get install node-express
// (then NODE_PATH=/usr/share/nodejs), or npm install express.
//   RATELIMITD_URL=http://127.0.0.1:8080 PORT=3000 node examples/node/express.mjs
// Env as server.mjs: FAIL_OPEN=0, TIMEOUT_MS, CLIENT_HEADER.
import http from 'node:http';
import { createRequire } from 'node:module';
import { limiterFromEnv, serve } from './server.mjs';

// require, not import: an ES import does not search NODE_PATH (Debian's node-express)
const express = createRequire(import.meta.url)('express');

const limiter = limiterFromEnv();
const app = express();
app.use('/api', limiter);
app.get('/api/:thing', (req, res) => res.type('text').send(`api ${req.params.thing}\n`));
app.get('/health', (req, res) => res.type('text').send('ok\n'));
serve(http.createServer(app), limiter);
