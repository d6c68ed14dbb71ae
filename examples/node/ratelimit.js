'use strict';
// ratelimitd from a Node.js service: a client and a connect/Express-style
// middleware.  node:http only, no npm package.  Copy this file into your project.
//
//   const { rateLimit } = require('./ratelimit');
//   app.use(rateLimit({ url: 'http://127.0.0.1:8080', key: (req) => req.get('x-api-key') }));
//
// - One keep-alive Agent: connections are reused (a connection per check means
//   a handshake and a TIME_WAIT socket per request, and port exhaustion at
//   real rates).  A request that fails on a reused socket the daemon closed
//   (it drops idle connections after 60 s) is retried once on a fresh one.
// - A timeout (default 200 ms) on the whole check, the retry below included:
//   the limiter must never be why a request hangs.  A check that fails says
//   how long it took ("after N ms").
// - A stated policy when the daemon cannot answer (refused, timeout, 5xx):
//   failOpen true (default) lets the request through with a warning; false
//   answers 503.
// - A 4xx but 429 denies the request (400 to the client), never the failure
//   policy: the daemon refused what this request made of its client's (a path
//   it cannot normalise, /api%2Fitems), and letting it through would let a
//   client walk around every limit.  Logged as an error.
// - The client's address is forwarded (X-Forwarded-For) so anonymous callers
//   are told apart; override clientIp(req) behind a proxy.
// - The path checked is the request's own, req.originalUrl: mounted on a
//   prefix (app.use('/api', rateLimit(...))) Express strips the prefix from
//   req.url, and a policy of /api/... would never match.
// - A 429 is passed through with the daemon's Retry-After and quota headers.

const http = require('node:http');

const QUOTA_HEADERS = ['retry-after', 'x-ratelimit-limit', 'x-ratelimit-remaining',
  'x-ratelimit-reset', 'ratelimit-policy', 'ratelimit'];

function createClient(opts = {}) {
  const url = new URL(opts.url || 'http://127.0.0.1:8080');
  const timeout = opts.timeout ?? 200;
  const failOpen = opts.failOpen ?? true;
  const logger = opts.logger || console;
  const agent = opts.agent || new http.Agent({ keepAlive: true, maxSockets: opts.maxSockets || 16 });

  function post(body, headers, ms) {
    return new Promise((resolve, reject) => {
      const req = http.request({
        host: url.hostname, port: url.port || 80, path: '/check', method: 'POST', agent,
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers },
      }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      // the whole exchange, not only idle time, is bounded
      const timer = setTimeout(() => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })), ms);
      req.on('close', () => clearTimeout(timer));
      req.on('error', (err) => { err.reusedSocket = req.reusedSocket; reject(err); });
      req.end(body);
    });
  }

  function failed(reason) {
    if (failOpen) {
      logger.warn(`rate limiter unavailable, allowing the request: ${reason}`);
      return { allowed: true, status: 200, headers: {}, degraded: true, reason };
    }
    logger.warn(`rate limiter unavailable, refusing the request: ${reason}`);
    return { allowed: false, status: 503, headers: { 'retry-after': '1' }, degraded: true, reason };
  }

  async function check({ key, path = '/', method = 'GET', clientIp, policy, cost } = {}) {
    const b = { path, method };
    if (key != null) b.key = String(key);
    if (policy || opts.policy) b.policy = policy || opts.policy;
    if (cost != null) b.cost = cost;
    const headers = clientIp ? { 'X-Forwarded-For': clientIp } : {};
    const body = JSON.stringify(b);
    const start = Date.now();
    const took = () => `after ${Date.now() - start} ms`;
    let res;
    for (let attempt = 0; ; attempt++) {
      try {
        // one deadline for the check, whatever the attempt
        res = await post(body, headers, Math.max(1, timeout - (Date.now() - start)));
        break;
      } catch (err) {
        // only a kept-alive socket the daemon had closed is worth a second try
        if (attempt === 0 && err.reusedSocket && err.code !== 'ETIMEDOUT' &&
            Date.now() - start < timeout) continue;
        return failed(`${err.code || err.message} ${took()}`);
      }
    }
    const quota = {};
    for (const h of QUOTA_HEADERS) if (res.headers[h] !== undefined) quota[h] = res.headers[h];
    if (res.status === 200) return { allowed: true, status: 200, headers: quota, degraded: false };
    if (res.status === 429) {
      return { allowed: false, status: 429, retryAfter: res.headers['retry-after'] || '1', headers: quota, degraded: false };
    }
    const reason = `ratelimitd answered ${res.status} ${took()}: ${res.body.toString().slice(0, 200)}`;
    if (res.status >= 400 && res.status < 500) {
      // the client's doing or a bug here: denied, never the failure policy
      logger.error(`${reason}: the request is refused`);
      return { allowed: false, status: 400, headers: {}, degraded: false, reason };
    }
    return failed(reason);
  }

  return { check, agent, close: () => agent.destroy() };
}

// Middleware: (req, res, next).  key(req) names the caller (API key, user id)
// or returns undefined for anonymous ones; clientIp(req) gives the address.
function rateLimit(opts = {}) {
  const client = opts.client || createClient(opts);
  const key = opts.key || (() => undefined);
  const clientIp = opts.clientIp || ((req) => req.socket.remoteAddress);
  const mw = async function ratelimitMiddleware(req, res, next) {
    // originalUrl: a mount prefix (Express's app.use('/api', ...)) is cut from req.url
    const d = await client.check({ key: key(req), path: (req.originalUrl || req.url || '/').split('?')[0],
      method: req.method, clientIp: clientIp(req) });
    if (d.allowed) return next();
    const body = JSON.stringify(d.status === 429
      ? { error: 'too many requests', retry_after: Number(d.retryAfter) }
      : d.status === 400 ? { error: 'bad request' } : { error: 'rate limiter unavailable' });
    res.writeHead(d.status, { ...d.headers, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  };
  mw.client = client;
  return mw;
}

module.exports = { createClient, rateLimit };
