// The Express middleware (express from npm, pinned in package-lock.json),
// against the real daemon.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import express from 'express';
import { expressMiddleware } from '../index.js';
import { DAEMON, OK_TIMEOUT, downUrl, fresh, quiet, request } from './helpers.js';

async function serve(app) {
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  return { port: server.address().port, close: () => server.close() };
}

function expect429(r, policy) {
  assert.equal(r.status, 429);
  const ra = r.headers['retry-after'];
  assert.ok(/^\d+$/.test(ra) && Number(ra) >= 1 && Number(ra) <= 60, `Retry-After ${ra}`);
  assert.equal(r.headers['x-ratelimit-remaining'], '0');
  assert.ok(r.headers['ratelimit-policy'].startsWith(`"${policy}"`), r.headers['ratelimit-policy']);
  assert.deepEqual(JSON.parse(r.body), { error: 'too many requests', retry_after: Number(ra) });
}

test('express: the limit, then 429 with the daemon\'s headers; callers by key', async () => {
  const app = express();
  app.use(expressMiddleware({ url: DAEMON, timeout: OK_TIMEOUT, policy: 'conf', logger: quiet,
    key: (req) => req.get('x-api-key') }));
  app.post('/orders', (req, res) => res.type('text').send('hello from express\n'));
  const s = await serve(app);
  const key = fresh();
  const rs = [];
  for (let i = 0; i < 4; i++) rs.push(await request(s.port, { method: 'POST', path: '/orders', headers: { 'x-api-key': key } }));
  assert.deepEqual(rs.map((r) => r.status), [200, 200, 200, 429]);
  assert.equal(rs[0].body, 'hello from express\n');
  expect429(rs[3], 'conf');
  assert.equal((await request(s.port, { method: 'POST', path: '/orders', headers: { 'x-api-key': fresh() } })).status, 200);
  s.close();
});

test('express: mounted on /api the whole path is checked; quota headers on allowed answers', async () => {
  const app = express();
  const seen = [];
  const mw = expressMiddleware({ url: DAEMON, timeout: OK_TIMEOUT, logger: quiet, headers: true,
    key: () => fresh(), cost: (req) => { seen.push(req.originalUrl); return 0; } });
  app.use('/api', mw);
  app.get('/api/:thing', (req, res) => res.type('text').send(`api ${req.params.thing}\n`));
  const s = await serve(app);
  const r = await request(s.port, { path: '/api/orders?x=1' });
  assert.equal(r.status, 200);
  assert.deepEqual(seen, ['/api/orders?x=1']);
  s.close();
  // the daemon's answer to a path it cannot normalise: 400, the route never runs
  const app2 = express();
  let ran = 0;
  app2.use(expressMiddleware({ url: DAEMON, timeout: OK_TIMEOUT, logger: quiet }));
  app2.get('*', (req, res) => { ran++; res.send('ran'); });
  const s2 = await serve(app2);
  for (const p of ['/api%2Fitems', '/api/it%00ems']) {
    const r2 = await request(s2.port, { path: p });
    assert.deepEqual([r2.status, r2.body], [400, '{"error":"bad request"}'], p);
  }
  assert.equal(ran, 0);
  s2.close();
});

test('express: daemon down, fail open and fail closed', async () => {
  const url = await downUrl();
  for (const [failOpen, want] of [[true, 200], [false, 503]]) {
    const app = express();
    app.use(expressMiddleware({ url, failOpen, timeout: 1000, logger: quiet }));
    app.get('/x', (req, res) => res.send('ok'));
    const s = await serve(app);
    const r = await request(s.port, { path: '/x' });
    assert.equal(r.status, want);
    if (want === 503) assert.equal(r.headers['retry-after'], '1');
    s.close();
  }
});
