// An OpenAI-compatible proxy that holds each tenant to a token budget, with
// the ratelimitd package (clients/node), node:http only:
//   RATELIMITD_URL=http://127.0.0.1:8080 UPSTREAM_URL=http://127.0.0.1:9000 \
//     RATELIMIT_POLICY=tokens PORT=8000 node examples/node/openai_proxy.mjs
// As examples/python/openai_proxy.py: per POST /v1/chat/completions (or
// /v1/completions) it reserves the prompt's estimate (4 characters a token)
// plus max_tokens, forwards, relays the answer (a stream chunk by chunk) and
// settles at usage.total_tokens — a stream's last SSE chunk's (asked for with
// stream_options.include_usage) — or, when the client goes away or the
// upstream breaks mid-stream, at the prompt plus a token per chunk relayed.
import crypto from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { pathToFileURL } from 'node:url';
import { Client } from '../../clients/node/index.js';

const ROUTES = new Set(['/v1/chat/completions', '/v1/completions']);
const DEFAULT_MAX_TOKENS = Number(process.env.DEFAULT_MAX_TOKENS || 1024);

export function promptTokens(req) {
  const text = Array.isArray(req.messages)
    ? req.messages.map((m) => String(m?.content ?? '')).join('')
    : String(req.prompt ?? '');
  return Math.ceil(text.length / 4);
}

function tenant(req) {
  const auth = req.headers.authorization || '';
  // the key itself never leaves the proxy: the daemon counts its hash
  if (auth.startsWith('Bearer ')) return `key-${crypto.createHash('sha256').update(auth.slice(7)).digest('hex').slice(0, 32)}`;
  return req.headers['x-tenant'];
}

function json(res, status, body, headers = {}) {
  const data = JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

export function createProxy({ client, upstream }) {
  const up = new URL(upstream);
  const transport = up.protocol === 'https:' ? https : http;
  return http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (req.method !== 'POST' || !ROUTES.has(req.url.split('?')[0])) return json(res, 404, { error: { message: 'not proxied here' } });
    let body;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString());
      if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
    } catch {
      return json(res, 400, { error: { message: 'the body must be a JSON object' } });
    }
    const prompt = promptTokens(body);
    const estimate = prompt + Number(body.max_tokens || DEFAULT_MAX_TOKENS);
    const streaming = Boolean(body.stream);
    if (streaming) body.stream_options = { ...(body.stream_options || {}), include_usage: true };
    const r = await client.reserve({ key: tenant(req), path: req.url, method: 'POST', clientIp: req.socket.remoteAddress, cost: estimate });
    if (!r.allowed) {
      const d = r.decision;
      return json(res, d.status, { error: { message: d.status === 429 ? 'token budget exceeded' : `rate limiter: ${d.reason}`, type: 'rate_limit_exceeded' } }, d.headers);
    }
    // settled when the answer closes: relayed to its end, or the client gone
    r.settleOnClose(res);
    const data = JSON.stringify(body);
    const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) };
    if (req.headers.authorization) headers.authorization = req.headers.authorization;
    const upReq = transport.request({ host: up.hostname, port: up.port, path: req.url, method: 'POST', headers }, (upRes) => {
      if (upRes.statusCode !== 200 || !streaming) {
        const parts = [];
        upRes.on('data', (c) => parts.push(c));
        upRes.on('end', () => {
          const text = Buffer.concat(parts);
          let usage = {};
          try { usage = JSON.parse(text).usage || {}; } catch { /* no usage: the status decides */ }
          r.cost = Number(usage.total_tokens ?? (upRes.statusCode === 200 ? estimate : 0));
          res.writeHead(upRes.statusCode, { 'content-type': upRes.headers['content-type'] || 'application/json', 'content-length': text.length });
          res.end(text);
        });
        return;
      }
      // a stream: the cost so far is the prompt and a token per chunk, until
      // the last chunk's usage says it exactly
      r.cost = prompt;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      let buf = '';
      upRes.setEncoding('utf8');
      upRes.on('data', (text) => {
        buf += text;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i + 1);
          buf = buf.slice(i + 1);
          if (line.startsWith('data: ') && line.trim() !== 'data: [DONE]') {
            let chunk = {};
            try { chunk = JSON.parse(line.slice(6)); } catch { /* not JSON: relayed as it is */ }
            if (chunk?.usage?.total_tokens !== undefined) r.cost = Number(chunk.usage.total_tokens);
            else if (chunk?.choices?.length) r.cost += 1;
          }
          res.write(line);
        }
      });
      upRes.on('end', () => res.end(buf));
    });
    upReq.on('error', (err) => {
      if (!res.headersSent) { r.cost = 0; json(res, 502, { error: { message: `upstream: ${err.message}` } }); } else res.destroy();
    });
    // the client gone: stop the upstream's work too
    res.on('close', () => { if (!res.writableFinished) upReq.destroy(); });
    upReq.end(data);
  });
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client({
    url: process.env.RATELIMITD_URL || 'http://127.0.0.1:8080',
    timeout: Number(process.env.TIMEOUT_MS || 200),
    failOpen: process.env.FAIL_OPEN !== '0',
    policy: process.env.RATELIMIT_POLICY || 'tokens',
  });
  const server = createProxy({ client, upstream: process.env.UPSTREAM_URL || 'https://api.openai.com' });
  server.listen(Number(process.env.PORT || 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
  process.on('SIGTERM', () => { client.close(); server.close(() => process.exit(0)); });
}
