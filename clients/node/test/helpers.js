// What the tests share: the daemons tests/integration/test_clients.py
// started (RATELIMITD_URL: a daemon with clients/conformance.json's
// configuration over a real redis-server; RATELIMITD_URL_503: one answering
// 503), the conformance file, and stand-ins for a daemon down or hung.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import crypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through tests/integration/test_clients.py`);
  return v;
}

export const DAEMON = need('RATELIMITD_URL');
export const UNAVAILABLE = need('RATELIMITD_URL_503');
export const CONFORMANCE = JSON.parse(fs.readFileSync(
  process.env.RL_CONFORMANCE || path.join(here, '..', '..', 'conformance.json'), 'utf8'));
// towards a working daemon: a loaded machine must not make a call fail open
export const OK_TIMEOUT = 5000 * Number(process.env.RL_SLOW || 1);
export const SLOW = Number(process.env.RL_SLOW || 1);

export const fresh = (p = 'k') => `${p}-${crypto.randomBytes(6).toString('hex')}`;
export const quiet = { warn() {}, error() {} };

/** A listener that accepts and never answers: a stopped or overloaded daemon. */
export async function blackhole() {
  const held = [];
  const server = net.createServer((s) => held.push(s));
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => { for (const s of held) s.destroy(); server.close(); },
  };
}

/** A loopback URL nothing listens on (connection refused). */
export async function downUrl() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return `http://127.0.0.1:${port}`;
}

/** One request to a listening server: { status, headers, body }. */
export function request(port, { method = 'GET', path: p = '/', headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers, agent: false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** A sample of the daemon's /metrics. */
export async function metric(url, name) {
  const r = await request(Number(new URL(url).port), { path: '/metrics' });
  const m = r.body.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  if (!m) throw new Error(`no ${name} in /metrics`);
  return Number(m[1]);
}
