// The second gRPC client of tests/integration/test_rls_grpc.py: @grpc/grpc-js
// with the messages of src/proto (loaded by @grpc/proto-loader), so the
// daemon is checked against an HTTP/2 and gRPC implementation that is not
// Python's.
//
//   node client.js SPEC.json
//
// SPEC: {"target": "127.0.0.1:PORT", "protos": "<src/proto>",
//        "tls": {"ca": FILE, "cert": FILE, "key": FILE, "name": NAME} (optional),
//        "channels": N (default 1), "deadline_ms": MS (default 5000),
//        "calls": [{"method": "ShouldRateLimit" | "Check", "request": {...}}, ...]}
// The calls are spread over the channels and all sent at once.  Prints one
// JSON array: per call {"code": grpc status, "details": text,
// "response": the answer as an object (enums as names) or null}.
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const loader = require('@grpc/proto-loader');

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const files = ['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'];
const defs = loader.loadSync(files, {
  keepCase: true, longs: Number, enums: String, defaults: true, includeDirs: [spec.protos],
});
const pkg = grpc.loadPackageDefinition(defs);

function credentials() {
  if (!spec.tls) return grpc.credentials.createInsecure();
  const read = (f) => (f ? fs.readFileSync(f) : null);
  return grpc.credentials.createSsl(read(spec.tls.ca), read(spec.tls.key), read(spec.tls.cert));
}

const options = spec.tls && spec.tls.name ? {'grpc.ssl_target_name_override': spec.tls.name} : {};
const nch = spec.channels || 1;
const clients = [];
for (let i = 0; i < nch; i++) {
  // a channel of its own each: grpc-js shares subchannels unless told not to
  const opts = Object.assign({'grpc.use_local_subchannel_pool': 1, 'channel-index': i}, options);
  clients.push({
    rls: new pkg.envoy.service.ratelimit.v3.RateLimitService(spec.target, credentials(), opts),
    health: new pkg.grpc.health.v1.Health(spec.target, credentials(), opts),
  });
}

function call(i, c) {
  const cl = clients[i % nch];
  const deadline = new Date(Date.now() + (spec.deadline_ms || 5000));
  return new Promise((resolve) => {
    const done = (err, resp) => resolve({
      code: err ? err.code : 0,
      details: err ? err.details : '',
      response: err ? null : resp,
    });
    if (c.method === 'Check') cl.health.Check(c.request, {deadline}, done);
    else cl.rls.ShouldRateLimit(c.request, {deadline}, done);
  });
}

Promise.all(spec.calls.map((c, i) => call(i, c))).then((results) => {
  process.stdout.write(JSON.stringify(results) + '\n');
  for (const cl of clients) {
    cl.rls.close();
    cl.health.close();
  }
});
