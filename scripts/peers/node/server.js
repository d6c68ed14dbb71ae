'use strict';
// The Node.js peer of ratelimitd for scripts/bench --node: the usual way to
// put a Redis-backed rate limit in front of something in Node, written as a
// tiny sidecar with the same interface.
//
//   node server.js [--host H] [--port N] [--redis URL]
//   (or HOST, PORT, REDIS_URL; defaults 127.0.0.1, 8080, redis://127.0.0.1:6379/0)
//
// POST /check with a JSON body {"key": "...", ...}: consumes 1 point of key
// from one RateLimiterRedis (rate-limiter-flexible) on one ioredis
// connection, points 1e9 per 60 s: the bench's policy "bench" of ratelimitd
// (fixed_window, limit 1e9 per 60 s, everything allowed).  Answers
//   200 {"allowed":true,"policy":"bench","limit":..,"remaining":..,"reset_ms":..}
//   429 {"allowed":false,...,"retry_after_ms":..} with Retry-After
// and X-RateLimit-Limit/-Remaining/-Reset on both, like ratelimitd.  A Redis
// error is a 503 (no fail-open: a failure must show in the bench's non2xx).
// 400 for a body that is not JSON with a non-empty string "key", 413 past
// 64 kB (ratelimitd's max_body), 404/405 elsewhere.
//
// One process, one event loop (like ratelimitd -w 1); HTTP/1.1 keep-alive
// (node's default, idle timeout set explicitly below).  Every check is one
// EVALSHA of rate-limiter-flexible's script (ioredis defineCommand), on the
// client defaults recommended by rate-limiter-flexible's documentation
// (enableOfflineQueue false); no autopipelining, no in-memory shortcut.

const http = require('node:http');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

function option(name, env, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  if (i > 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  return process.env[env] || dflt;
}

const HOST = option('host', 'HOST', '127.0.0.1');
const PORT = Number(option('port', 'PORT', '8080'));
const REDIS_URL = option('redis', 'REDIS_URL', 'redis://127.0.0.1:6379/0');
const MAX_BODY = 64 * 1024;
const POINTS = 1e9;
const DURATION_S = 60;

if (!Number.isInteger(PORT) || PORT < 0 || PORT > 65535) {
  console.error(`node peer: not a port: ${PORT}`);
  process.exit(2);
}

const redis = new Redis(REDIS_URL, { enableOfflineQueue: false });
redis.on('error', (err) => console.error(`node peer: redis: ${err.message}`));

const limiter = new RateLimiterRedis({
  storeClient: redis,
  keyPrefix: 'rlflx:bench',
  points: POINTS,
  duration: DURATION_S,
});

function send(res, status, body, headers) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(data),
    ...headers,
  });
  res.end(data);
}

function limitHeaders(r) {
  return {
    'X-RateLimit-Limit': POINTS,
    'X-RateLimit-Remaining': r.remainingPoints,
    'X-RateLimit-Reset': Math.ceil(r.msBeforeNext / 1000),
  };
}

async function check(res, key) {
  try {
    const r = await limiter.consume(key, 1);
    send(res, 200, {
      allowed: true, policy: 'bench', limit: POINTS,
      remaining: r.remainingPoints, reset_ms: r.msBeforeNext,
    }, limitHeaders(r));
  } catch (rej) {
    if (rej instanceof Error) {
      send(res, 503, { error: `redis: ${rej.message}` });
      return;
    }
    send(res, 429, {
      allowed: false, policy: 'bench', limit: POINTS,
      remaining: rej.remainingPoints, reset_ms: rej.msBeforeNext,
      retry_after_ms: rej.msBeforeNext,
    }, { ...limitHeaders(rej), 'Retry-After': Math.max(1, Math.ceil(rej.msBeforeNext / 1000)) });
  }
}

const server = http.createServer((req, res) => {
  const path = req.url.split('?', 1)[0];
  if (path !== '/check') {
    send(res, 404, { error: 'not found' });
    req.resume();
    return;
  }
  if (req.method !== 'POST') {
    send(res, 405, { error: 'method: POST only' }, { Allow: 'POST' });
    req.resume();
    return;
  }
  const chunks = [];
  let size = 0;
  let tooLarge = false;
  req.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY) tooLarge = true;
    else chunks.push(chunk);
  });
  req.on('end', () => {
    if (tooLarge) {
      send(res, 413, { error: 'body: larger than max_body' });
      return;
    }
    let key;
    try {
      key = JSON.parse(Buffer.concat(chunks).toString('utf8')).key;
    } catch (e) {
      send(res, 400, { error: 'body: not JSON' });
      return;
    }
    if (typeof key !== 'string' || key === '') {
      send(res, 400, { error: 'body: no "key" string' });
      return;
    }
    check(res, key);
  });
});
server.keepAliveTimeout = 60 * 1000;

// Listen once Redis is there: a POST /check answered means ready.
redis.once('ready', () => {
  server.listen(PORT, HOST, () => {
    const a = server.address();
    console.error(`node peer: listening on ${a.address}:${a.port}, redis ${REDIS_URL}, ` +
      `node ${process.version}`);
  });
});
server.on('error', (err) => {
  console.error(`node peer: ${err.message}`);
  process.exit(1);
});
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.close();
    redis.disconnect();
    process.exit(0);
  });
}
