// The client's transport: keep-alive, reconnects, timeouts.  RATELIMITD_URL_IDLE
// is a daemon closing idle connections after 300 ms.  The files run one at a
// time (--test-concurrency=1): the daemon's connections are counted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { Client } from '../index.js';
import { DAEMON, OK_TIMEOUT, SLOW, blackhole, fresh, metric, quiet } from './helpers.js';

const IDLE = process.env.RATELIMITD_URL_IDLE;

test('client: one kept-alive connection for many calls', async () => {
  const client = new Client({ url: DAEMON, timeout: OK_TIMEOUT, logger: quiet });
  const before = await metric(DAEMON, 'ratelimitd_connections_accepted_total');
  const key = fresh();
  const ds = [];
  for (let i = 0; i < 5; i++) ds.push(await client.check({ key, policy: 'conf' }));
  ds.push(await client.charge({ key: fresh(), policy: 'budget', cost: 3 }));
  assert.deepEqual(ds.map((d) => d.status), [200, 200, 200, 429, 429, 200]);
  // the calls' one connection and the metrics read's
  assert.equal(await metric(DAEMON, 'ratelimitd_connections_accepted_total') - before, 2);
  client.close();
});

// Node's Agent keeps a socket for the daemon's Keep-Alive timeout less a
// second (agentKeepAliveTimeoutBuffer): here (timeout=1) not at all.  The
// race with a daemon closing a kept socket is test_examples.py's (a relay
// dropping the connections of examples/node/server.js).
test('client: a daemon closing idle connections soon costs no failed call', async () => {
  const warnings = [];
  const client = new Client({ url: IDLE, timeout: OK_TIMEOUT, logger: { warn: (m) => warnings.push(m), error: (m) => warnings.push(m) } });
  assert.equal((await client.check({ key: fresh(), policy: 'conf' })).allowed, true);
  const deadline = Date.now() + 10000 * SLOW;
  while (await metric(IDLE, 'ratelimitd_connections_open') !== 1) {
    assert.ok(Date.now() < deadline, 'the daemon kept the idle connection');
    await new Promise((r) => setTimeout(r, 50));
  }
  const d = await client.check({ key: fresh(), policy: 'conf' });
  assert.equal(d.allowed, true);
  assert.equal(d.degraded, false, JSON.stringify(d));
  assert.deepEqual(warnings, []);
  client.close();
});

test('client: the timeout bounds a whole call to a hung daemon', async () => {
  const hole = await blackhole();
  const warnings = [];
  const client = new Client({ url: hole.url, timeout: 300, logger: { warn: (m) => warnings.push(m), error() {} } });
  const t0 = performance.now();
  const d = await client.check({ key: 'k' });
  const took = performance.now() - t0;
  assert.equal(d.allowed, true);
  assert.equal(d.degraded, true);
  assert.ok(took < 300 + 500 * SLOW, `took ${took} ms`);
  assert.match(warnings[0], /unavailable, allowing the request: \/check ETIMEDOUT after \d+ ms/);
  client.close();
  hole.close();
});

test('client: defaults: 200 ms, fail open, 127.0.0.1:8080; only http URLs', () => {
  const c = new Client();
  assert.deepEqual([c.timeout, c.failOpen, c.host, c.port], [200, true, '127.0.0.1', 8080]);
  c.close();
  assert.throws(() => new Client({ url: 'https://example.com' }), TypeError);
});

test('client: a charge the daemon kept (202 pending) is not a failure', async () => {
  // docs/API.md, "Charges the backend cannot take now": no daemon of this
  // tree answers it yet, so a listener answers as the contract says
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const body = '{"pending":true,"policy":"tokens","charged":1870}';
      res.writeHead(202, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const client = new Client({ url: `http://127.0.0.1:${server.address().port}`, timeout: OK_TIMEOUT, failOpen: false, logger: quiet });
  const d = await client.charge({ key: 'k', policy: 'tokens', cost: 1870 });
  assert.deepEqual([d.allowed, d.status, d.degraded, d.pending, d.charged, d.reason], [true, 202, false, true, 1870, null]);
  client.close();
  server.close();
});
