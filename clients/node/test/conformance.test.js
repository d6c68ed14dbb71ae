// clients/conformance.json through the Node client (the Python client runs
// the same file: clients/python/tests/test_conformance.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '../index.js';
import { CONFORMANCE, DAEMON, UNAVAILABLE, OK_TIMEOUT, blackhole, downUrl, fresh, quiet } from './helpers.js';

const FIELDS = {
  allowed: 'allowed', status: 'status', degraded: 'degraded', charged: 'charged', released: 'released', settled: 'settled',
};

function hold(d, expect, what) {
  for (const [f, prop] of Object.entries(FIELDS)) {
    if (f in expect) assert.equal(d[prop], expect[f], `${what}: ${f} (${JSON.stringify(d)})`);
  }
  if ('reservation' in expect) assert.equal(Boolean(d.reservation), expect.reservation, `${what}: reservation ${d.reservation}`);
  if ('retry_after' in expect) {
    const want = expect.retry_after;
    if (want === null) assert.equal(d.retryAfter, null, `${what}: retryAfter`);
    else assert.ok(d.retryAfter !== null && want[0] <= d.retryAfter && d.retryAfter <= want[1],
      `${what}: retryAfter ${d.retryAfter}, want ${want}`);
  }
  for (const [k, v] of Object.entries(expect.body || {})) {
    assert.ok(k in d.body, `${what}: no ${k} in ${JSON.stringify(d.body)}`);
    if (v !== true) assert.deepEqual(d.body[k], v, `${what}: body ${k}`);
  }
  for (const [k, v] of Object.entries(expect.headers || {})) {
    assert.ok(d.headers[k] !== undefined, `${what}: no header ${k} in ${JSON.stringify(d.headers)}`);
    if (v !== true) assert.equal(d.headers[k], v, `${what}: header ${k}`);
  }
  if ('reason' in expect) assert.ok((d.reason || '').includes(expect.reason), `${what}: reason ${d.reason}`);
  if ('max_elapsed_ms' in expect) assert.ok(d.elapsedMs < expect.max_elapsed_ms, `${what}: took ${d.elapsedMs} ms`);
}

async function invoke(client, call, args) {
  if (call === 'release') return client.release(args.lease);
  if (call === 'settle') return client.settle(args.reservation, args.cost);
  if (call === 'reserve') return (await client.reserve(args)).decision;
  return client[call](args);
}

for (const sc of CONFORMANCE.scenarios) {
  test(`conformance: ${sc.name}`, async () => {
    let hole = null;
    let url;
    if (sc.target === 'daemon') url = DAEMON;
    else if (sc.target === 'unavailable') url = UNAVAILABLE;
    else if (sc.target === 'down') url = await downUrl();
    else { hole = await blackhole(); url = hole.url; }
    const o = sc.client || {};
    const client = new Client({ url, failOpen: o.fail_open ?? true, timeout: o.timeout_ms ?? OK_TIMEOUT, logger: quiet });
    const key = fresh();
    const saved = {};
    try {
      for (const [i, step] of sc.steps.entries()) {
        for (let rep = 0; rep < (step.repeat || 1); rep++) {
          const args = {};
          for (const [k, v] of Object.entries(step.args || {})) {
            args[k] = v === '$key' ? key : typeof v === 'string' && v.startsWith('$') ? saved[v.slice(1)] : v;
          }
          const d = await invoke(client, step.call, args);
          hold(d, step.expect || {}, `step ${i + 1} (${step.call}) #${rep + 1}`);
          for (const [name, field] of Object.entries(step.save || {})) saved[name] = d.body[field];
        }
      }
    } finally {
      client.close();
      if (hole) hole.close();
    }
  });
}
