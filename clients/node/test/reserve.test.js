// Reservations in Express and Fastify: settled when a streamed response ends
// or the client goes away mid-stream, at the cost the route counted; the
// daemon's own numbers say what was settled.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import express from 'express';
import Fastify from 'fastify';
import { Client, expressMiddleware, fastifyPlugin } from '../index.js';
import { DAEMON, OK_TIMEOUT, SLOW, fresh, quiet } from './helpers.js';

const client = new Client({ url: DAEMON, timeout: OK_TIMEOUT, policy: 'budget', logger: quiet });
after(() => client.close());

async function remaining(key) {
  return (await client.check({ key, cost: 0 })).remaining;
}

async function until(cond, what) {
  const deadline = Date.now() + 10000 * SLOW;
  for (;;) {
    const v = await cond();
    if (v) return v;
    assert.ok(Date.now() < deadline, `waited 10 s for ${typeof what === 'function' ? what() : what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// A route streaming `chunks` chunks of 10 units each (an LLM's tokens), the
// last after `release` resolves.
function streamer(chunks, gate) {
  return async (req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < chunks; i++) {
      if (i === chunks - 1 && gate) await gate;
      if (res.destroyed) return;
      res.write(`data: chunk ${i}\n\n`);
      req.ratelimitd.add(10);
    }
    res.end();
  };
}

function listen(app) {
  const server = http.createServer(app);
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r(server)));
}

test('express: a streamed answer settles at its end, at the cost it counted', async () => {
  const key = fresh();
  const app = express();
  app.use(expressMiddleware({ client, key: () => key, reserve: () => 400 }));
  app.get('/stream', streamer(3));
  const server = await listen(app);
  const body = await new Promise((resolve) => http.get({ host: '127.0.0.1', port: server.address().port, path: '/stream' },
    (res) => { let b = ''; res.on('data', (c) => { b += c; }); res.on('end', () => resolve(b)); }));
  assert.equal(body.split('data:').length - 1, 3);
  await until(async () => (await remaining(key)) === 970, 'the settle at 30 (1000 - 30 remaining)');
  server.close();
});

test('express: a client gone mid-stream settles at what was streamed', async () => {
  const key = fresh();
  let open;
  const gate = new Promise((r) => { open = r; });
  const app = express();
  app.use(expressMiddleware({ client, key: () => key, reserve: () => 500 }));
  app.get('/stream', streamer(5, gate));
  const server = await listen(app);
  const req = await new Promise((resolve) => {
    let seen = 0;
    const rq = http.get({ host: '127.0.0.1', port: server.address().port, path: '/stream' }, (res) => {
      res.on('data', (c) => {
        seen += String(c).split('data:').length - 1;
        if (seen === 4) resolve(rq);
      });
    });
    rq.on('error', () => {});
  });
  assert.equal(await remaining(key), 500, 'the estimate held while streaming');
  req.destroy();
  // settled on the abort itself, while the route still waits for its last chunk
  let last;
  await until(async () => (last = await remaining(key)) === 960, () => `the settle at 40 after the abort (remaining ${last})`);
  open();
  server.close();
});

test('express: denied, the route never runs and nothing is reserved', async () => {
  const key = fresh();
  const app = express();
  let ran = 0;
  app.use(expressMiddleware({ client, key: () => key, reserve: () => 1001 }));
  app.get('/x', (req, res) => { ran++; res.end(); });
  const server = await listen(app);
  const st = await new Promise((resolve) => http.get({ host: '127.0.0.1', port: server.address().port, path: '/x' },
    (res) => { res.resume(); resolve(res.statusCode); }));
  assert.equal(st, 429);
  assert.equal(ran, 0);
  assert.equal(await remaining(key), 1000);
  server.close();
});

test('fastify: a streamed reply settles when it ends', async () => {
  const key = fresh();
  const app = Fastify();
  await app.register(fastifyPlugin, { client, key: () => key, reserve: () => 300 });
  app.get('/stream', (request, reply) => {
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'text/event-stream' });
    for (let i = 0; i < 7; i++) { reply.raw.write(`data: ${i}\n\n`); request.ratelimitd.add(10); }
    reply.raw.end();
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const body = await new Promise((resolve) => http.get({ host: '127.0.0.1', port: app.server.address().port, path: '/stream' },
    (res) => { let b = ''; res.on('data', (c) => { b += c; }); res.on('end', () => resolve(b)); }));
  assert.equal(body.split('data:').length - 1, 7);
  await until(async () => (await remaining(key)) === 930, 'the settle at 70');
  await app.close();
});

test('client: run() settles on success and on a thrown error, once', async () => {
  const key = fresh();
  const r = await client.reserve({ key, cost: 200, errorCost: 0 });
  await assert.rejects(r.run(async (rr) => { rr.add(15); throw new Error('upstream broke'); }), /upstream broke/);
  assert.deepEqual([r.result.settled, r.result.charged], [true, -185]);
  assert.equal(await r.settle(0), r.result);
  assert.equal((await client.settle(r.id, 0)).settled, false);
  const r2 = await client.reserve({ key, cost: 100 });
  assert.equal(await r2.run(async () => 'done'), 'done');
  assert.deepEqual([r2.result.settled, r2.result.charged], [true, 0]);
  assert.equal(await remaining(key), 1000 - 15 - 100);
});
