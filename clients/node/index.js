// ratelimitd: a client of the ratelimitd daemon's check listener, and Express
// and Fastify middleware.  Node's own http module only, no dependency.
// The contract is docs/API.md of ratelimitd; clients/conformance.json holds
// the scenarios this client and the Python one both pass.
//
//   import { Client } from 'ratelimitd';
//   const client = new Client({ url: 'http://127.0.0.1:8080', timeout: 200 });
//   const d = await client.check({ key: 'user-42', path: '/orders', method: 'POST' });
//
// - One keep-alive Agent: a connection per call would cost a handshake and a
//   TIME_WAIT socket each, and exhaust ports at real rates.  A call that fails
//   on a reused socket the daemon closed while idle goes once more on a fresh
//   one (the daemon never drops a request it read: docs/API.md, "draining").
// - A total timeout per call (ms, default 200), the retry included: the
//   limiter is never why a request hangs.  Every decision says how long the
//   call took (elapsedMs), and a failed one's warning too ("after N ms").
// - When the daemon cannot answer (refused, timeout, 5xx): failOpen true (the
//   default) allows, degraded, with a warning; false denies with 503 and
//   Retry-After 1.  A 4xx (a path the daemon cannot normalise, a bug) always
//   denies with 400: letting it through would let a client walk around every
//   limit.

import http from 'node:http';

export const QUOTA_HEADERS = ['retry-after', 'x-ratelimit-limit', 'x-ratelimit-remaining',
  'x-ratelimit-reset', 'ratelimit-policy', 'ratelimit', 'x-ratelimit-lease'];

const CHECK_FIELDS = ['key', 'policy', 'path', 'method', 'cost', 'limits', 'reserve'];

class TimeoutError extends Error {
  constructor(ms) {
    super(`timed out after ${ms} ms`);
    this.code = 'ETIMEDOUT';
  }
}

function decision(fields) {
  return {
    allowed: false, status: 0, degraded: false, retryAfter: null, headers: {}, body: {},
    reason: null, elapsedMs: 0, ...fields,
  };
}

// The fields every decision reads from the daemon's answer.
function withBody(d) {
  const b = d.body;
  return Object.assign(d, {
    policy: b.policy ?? null, limit: b.limit ?? null, remaining: b.remaining ?? null,
    lease: b.lease ?? null, charged: b.charged ?? null, overdraft: b.overdraft ?? null,
    released: b.released ?? null, reservation: b.reservation ?? null, settled: b.settled ?? null,
    pending: Boolean(b.pending),
  });
}

export class Client {
  constructor(opts = {}) {
    this.url = new URL(opts.url || 'http://127.0.0.1:8080');
    if (this.url.protocol !== 'http:') throw new TypeError(`url must be http://host[:port], got ${opts.url}`);
    this.timeout = opts.timeout ?? 200;
    this.failOpen = opts.failOpen ?? true;
    this.policy = opts.policy;
    this.logger = opts.logger || console;
    this.agent = opts.agent || new http.Agent({ keepAlive: true, maxSockets: opts.maxSockets || 16 });
    this.host = this.url.hostname.replace(/^\[(.*)\]$/, '$1');
    this.port = Number(this.url.port || 80);
  }

  post(route, body, headers, ms) {
    return new Promise((resolve, reject) => {
      const req = http.request({
        host: this.host, port: this.port, path: route, method: 'POST', agent: this.agent,
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), ...headers },
      }, (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      });
      // the whole exchange is bounded, not only the socket's idle time
      const timer = setTimeout(() => req.destroy(new TimeoutError(ms)), ms);
      req.on('close', () => clearTimeout(timer));
      req.on('error', (err) => { err.reusedSocket = req.reusedSocket; reject(err); });
      req.end(body);
    });
  }

  failed(route, reason, elapsedMs) {
    if (this.failOpen) {
      this.logger.warn(`rate limiter unavailable, allowing the request: ${route} ${reason}`);
      return withBody(decision({ allowed: true, status: 200, degraded: true, reason, elapsedMs }));
    }
    this.logger.warn(`rate limiter unavailable, refusing the request: ${route} ${reason}`);
    return withBody(decision({
      allowed: false, status: 503, degraded: true, retryAfter: 1, headers: { 'retry-after': '1' },
      reason, elapsedMs,
    }));
  }

  async call(route, fields, clientIp, extraHeaders) {
    const body = JSON.stringify(fields);
    const headers = { ...(clientIp ? { 'X-Forwarded-For': clientIp } : {}), ...extraHeaders };
    const start = performance.now();
    const took = () => performance.now() - start;
    let res;
    for (let attempt = 0; ; attempt++) {
      try {
        // one deadline for the call, whatever the attempt
        res = await this.post(route, body, headers, Math.max(1, this.timeout - took()));
        break;
      } catch (err) {
        if (attempt === 0 && err.reusedSocket && err.code !== 'ETIMEDOUT' && took() < this.timeout) continue;
        return this.failed(route, `${err.code || err.message} after ${Math.round(took())} ms`, took());
      }
    }
    const elapsedMs = took();
    let answer = {};
    try {
      const v = res.body.length ? JSON.parse(res.body.toString()) : {};
      if (v && typeof v === 'object' && !Array.isArray(v)) answer = v;
    } catch { /* not JSON: the status decides */ }
    const quota = {};
    for (const h of QUOTA_HEADERS) if (res.headers[h] !== undefined) quota[h] = res.headers[h];
    if (res.status === 202) {
      // kept by the daemon, applied once its backend answers again
      // (docs/API.md, "Charges the backend cannot take now"): not a failure
      return withBody(decision({ allowed: true, status: 202, headers: quota, body: answer, elapsedMs }));
    }
    if (res.status === 200 || res.status === 429) {
      let retryAfter = null;
      if (res.status === 429) {
        const ra = res.headers['retry-after'];
        retryAfter = /^\d+$/.test(ra || '') ? Number(ra) : 1;
      }
      const allowed = route === '/check' ? res.status === 200 : (answer.allowed ?? true);
      return withBody(decision({
        allowed, status: res.status, degraded: Boolean(answer.degraded), retryAfter, headers: quota,
        body: answer, elapsedMs,
      }));
    }
    const what = answer.error || res.body.toString().slice(0, 200);
    const reason = `ratelimitd answered ${res.status} after ${Math.round(elapsedMs)} ms: ${what}`;
    if (res.status >= 400 && res.status < 500) {
      // this call's doing: denied, never the failure policy (issue 24)
      this.logger.error(`${route} ${reason}: the request is refused`);
      return withBody(decision({ allowed: false, status: 400, body: answer, reason, elapsedMs }));
    }
    return this.failed(route, reason, elapsedMs);
  }

  static fields(args, policy) {
    const b = {};
    for (const f of CHECK_FIELDS) if (args[f] !== undefined && args[f] !== null) b[f] = args[f];
    if (b.policy === undefined && policy) b.policy = policy;
    return b;
  }

  /** POST /check: may this request go on?  Never rejects for the daemon's sake. */
  check(args = {}) {
    return this.call('/check', Client.fields(args, this.policy), args.clientIp, args.headers);
  }

  /** POST /charge: count args.cost now, past the limit too (work already done). */
  charge(args = {}) {
    return this.call('/charge', Client.fields(args, this.policy), args.clientIp, args.headers);
  }

  /**
   * POST /check with "reserve": true, taking args.cost (the estimate) now.
   * The Reservation says whether the request may go on (allowed) and settles
   * once: settle(cost), run(fn), or settleOnClose(res) for a streamed answer.
   */
  async reserve(args = {}) {
    const d = await this.call('/check', Client.fields({ ...args, reserve: true }, this.policy), args.clientIp, args.headers);
    return new Reservation(this, d, args.cost, args.errorCost);
  }

  /**
   * POST /settle: a reservation's real cost.  settled true: the difference
   * applied (charged, negative when given back); false: not held (settled
   * already, expired, unknown); null: unknown (settling again is safe).
   */
  settle(reservation, cost) {
    return this.call('/settle', { reservation, cost }, undefined, undefined);
  }

  /** POST /release: give back a concurrency slot; `released` says whether it was held. */
  release(lease) {
    return this.call('/release', { lease }, undefined, undefined);
  }

  close() {
    this.agent.destroy();
  }
}

/**
 * A budget taken at its estimate before the work, settled at the real cost
 * after it, exactly once.  The work reports its cost as it learns it (cost =
 * n, or add(n) per chunk of a stream); the settle takes that, else the
 * estimate on success and errorCost (default: the estimate) on failure.
 */
export class Reservation {
  constructor(client, decision, estimate, errorCost) {
    this.client = client;
    this.decision = decision;
    this.estimate = estimate;
    this.errorCost = errorCost ?? null;
    this.cost = null;
    this.result = null;
    this.inflight = null;
  }

  get allowed() { return this.decision.allowed; }

  /** The reservation; null when the check took none (denied, failed open, cost 0). */
  get id() { return this.decision.reservation; }

  add(units) { this.cost = (this.cost ?? 0) + units; }

  finalCost(failed) {
    if (this.cost !== null) return this.cost;
    if (failed && this.errorCost !== null) return this.errorCost;
    return this.estimate;
  }

  /** POST /settle, once; resolves to null when there is nothing to settle. */
  settle(cost) {
    if (!this.id) return Promise.resolve(null);
    if (this.result) return Promise.resolve(this.result);
    if (!this.inflight) {
      this.inflight = this.client.settle(this.id, cost ?? this.finalCost(false)).then((d) => {
        this.inflight = null;
        // a definite answer ends it; a failed call may be tried again (the daemon settles once)
        if (!d.degraded) this.result = d;
        return d;
      });
    }
    return this.inflight;
  }

  /** fn(this), then the settle, on success and on failure alike. */
  async run(fn) {
    let v;
    try {
      v = await fn(this);
    } catch (err) {
      await this.settle(this.finalCost(true));
      throw err;
    }
    await this.settle(this.finalCost(false));
    return v;
  }

  /**
   * Settle when the response `res` (a node:http ServerResponse) closes: after
   * its last byte, or when the client went away mid-stream (then the cost
   * counted so far, else errorCost).  Resolves to the settle's decision.
   */
  settleOnClose(res) {
    return new Promise((resolve) => {
      res.once('close', () => resolve(this.settle(this.finalCost(!res.writableFinished))));
    });
  }
}

export function createClient(opts = {}) {
  return new Client(opts);
}

// ------------------------------------------------------------- middleware

function denial(d) {
  const status = [400, 429, 503].includes(d.status) ? d.status : 503;
  const body = JSON.stringify(status === 429 ? { error: 'too many requests', retry_after: d.retryAfter ?? 1 }
    : status === 400 ? { error: 'bad request' } : { error: 'rate limiter unavailable' });
  const headers = { ...d.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) };
  return { status, headers, body };
}

function allowedHeaders(d) {
  const h = { ...d.headers };
  delete h['retry-after'];
  delete h['x-ratelimit-lease'];
  return h;
}

function middlewareOptions(opts) {
  return {
    client: opts.client || new Client(opts),
    key: opts.key || (() => undefined),
    clientIp: opts.clientIp || ((req) => req.socket?.remoteAddress),
    cost: opts.cost || (() => undefined),
    reserve: opts.reserve || null,
    policy: opts.policy,
    headers: Boolean(opts.headers),
  };
}

/**
 * Express (or any connect-style) middleware: (req, res, next).  key(req)
 * names the caller (an API key, a user id) or gives undefined for the
 * daemon's identity chain; clientIp(req) the client's address.  The check
 * carries req.originalUrl's path: mounted on a prefix (app.use('/api', ...))
 * Express cuts it from req.url, and a policy of /api/... would never match.
 * reserve(req), given, makes the check a reservation of that estimate:
 * req.ratelimitd is then the Reservation (the route sets its cost, or add()s
 * a stream's), settled when the response closes — ended or aborted.
 */
export function expressMiddleware(opts = {}) {
  const o = middlewareOptions(opts);
  const mw = async function ratelimitd(req, res, next) {
    const args = {
      key: o.key(req), path: (req.originalUrl || req.url || '/').split('?')[0], method: req.method,
      clientIp: o.clientIp(req), policy: o.policy, cost: o.cost(req),
    };
    let d;
    if (o.reserve) {
      const r = await o.client.reserve({ ...args, cost: o.reserve(req) });
      d = r.decision;
      // req.ratelimitd: the Reservation, whose cost the route reports; settled
      // when the response closes, streamed to its end or aborted
      req.ratelimitd = r;
      if (r.id) r.settleOnClose(res);
    } else {
      d = await o.client.check(args);
      req.ratelimitd = d;
    }
    if (d.allowed) {
      if (o.headers) for (const [k, v] of Object.entries(allowedHeaders(d))) res.setHeader(k, v);
      return next();
    }
    const { status, headers, body } = denial(d);
    res.writeHead(status, headers);
    res.end(body);
  };
  mw.client = o.client;
  return mw;
}

/**
 * Fastify plugin: fastify.register(fastifyPlugin, { client, key, ... }).  An
 * onRequest hook checks every route of the instance it is registered on (and
 * its children: it is not encapsulated, as fastify-plugin would make it).
 */
export async function fastifyPlugin(fastify, opts = {}) {
  const o = middlewareOptions(opts);
  fastify.decorateRequest('ratelimitd', null);
  fastify.addHook('onRequest', async (request, reply) => {
    const args = {
      key: o.key(request), path: request.raw.url.split('?')[0], method: request.method,
      clientIp: opts.clientIp ? o.clientIp(request) : request.ip, policy: o.policy, cost: o.cost(request),
    };
    let d;
    if (o.reserve) {
      const r = await o.client.reserve({ ...args, cost: o.reserve(request) });
      d = r.decision;
      request.ratelimitd = r;
      if (r.id) r.settleOnClose(reply.raw);
    } else {
      d = await o.client.check(args);
      request.ratelimitd = d;
    }
    if (d.allowed) {
      if (o.headers) reply.headers(allowedHeaders(d));
      return;
    }
    const { status, headers, body } = denial(d);
    delete headers['content-length'];
    return reply.code(status).headers(headers).send(body);
  });
}
fastifyPlugin[Symbol.for('skip-override')] = true;
fastifyPlugin[Symbol.for('fastify.display-name')] = 'ratelimitd';

export const rateLimit = expressMiddleware;
export default Client;
