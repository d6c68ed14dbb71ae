// The Fastify plugin (fastify from npm, pinned in package-lock.json),
// against the real daemon.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import Fastify from 'fastify';
import { Client, fastifyPlugin } from '../index.js';
import { DAEMON, OK_TIMEOUT, downUrl, fresh, quiet } from './helpers.js';

test('fastify: the limit, then 429 with the daemon\'s headers', async () => {
  const app = Fastify();
  const client = new Client({ url: DAEMON, timeout: OK_TIMEOUT, policy: 'conf', logger: quiet });
  await app.register(fastifyPlugin, { client, key: (req) => req.headers['x-api-key'], headers: true });
  app.post('/orders', async () => 'hello from fastify\n');
  const key = fresh();
  const rs = [];
  for (let i = 0; i < 4; i++) rs.push(await app.inject({ method: 'POST', url: '/orders', headers: { 'x-api-key': key } }));
  assert.deepEqual(rs.map((r) => r.statusCode), [200, 200, 200, 429]);
  assert.equal(rs[0].body, 'hello from fastify\n');
  assert.equal(rs[0].headers['x-ratelimit-remaining'], '2');
  const ra = rs[3].headers['retry-after'];
  assert.ok(/^\d+$/.test(ra) && Number(ra) >= 1 && Number(ra) <= 60, `Retry-After ${ra}`);
  assert.equal(rs[3].headers['x-ratelimit-remaining'], '0');
  assert.ok(rs[3].headers['ratelimit-policy'].startsWith('"conf"'));
  assert.deepEqual(JSON.parse(rs[3].body), { error: 'too many requests', retry_after: Number(ra) });
  await app.close();
  client.close();
});

test('fastify: callers told apart by address; a path the daemon refuses is a 400', async () => {
  const app = Fastify();
  const client = new Client({ url: DAEMON, timeout: OK_TIMEOUT, policy: 'conf', logger: quiet });
  await app.register(fastifyPlugin, { client });
  let ran = 0;
  app.get('/*', async () => { ran++; return 'ran'; });
  const b = crypto.randomBytes(2);
  const a = `198.51.${b[0]}.${b[1] || 1}`;
  const sts = [];
  for (let i = 0; i < 4; i++) sts.push((await app.inject({ url: `/orders-${a}`, remoteAddress: a })).statusCode);
  // the policy is named: every request of one address is one caller
  assert.deepEqual(sts, [200, 200, 200, 429]);
  assert.equal((await app.inject({ url: '/x', remoteAddress: '198.51.100.8' })).statusCode, 200);
  await app.close();
  client.close();
  const app2 = Fastify();
  const client2 = new Client({ url: DAEMON, timeout: OK_TIMEOUT, logger: quiet });
  await app2.register(fastifyPlugin, { client: client2 });
  app2.get('/*', async () => { ran++; return 'ran'; });
  const before = ran;
  const r = await app2.inject({ url: '/api/it%00ems' });
  assert.deepEqual([r.statusCode, r.body], [400, '{"error":"bad request"}']);
  assert.equal(ran, before);
  await app2.close();
  client2.close();
});

test('fastify: daemon down, fail closed', async () => {
  const app = Fastify();
  const client = new Client({ url: await downUrl(), failOpen: false, timeout: 1000, logger: quiet });
  await app.register(fastifyPlugin, { client });
  app.get('/x', async () => 'ok');
  const r = await app.inject({ url: '/x' });
  assert.equal(r.statusCode, 503);
  assert.equal(r.headers['retry-after'], '1');
  await app.close();
  client.close();
});
