"""An aggregated discovery server (ADS, state of the world) for rules over
xDS (rls.xds), on Debian's python3-grpcio with the classes harness_grpc
generates from src/proto: what Envoy Gateway's control plane serves to its
rate limit Deployment, one RateLimitConfig resource per domain.

  s = AdsServer(tls=None)       listening on 127.0.0.1:s.port; tls: (cert,
                                key, client_ca) for mTLS
  s.publish(configs, version)   every stream gets a DiscoveryResponse of them
                                (configs: RateLimitConfig messages, or dicts
                                made by config())
  s.requests                    every DiscoveryRequest read, in order
  s.wait_request(pred)          the first (after `since`) pred accepts
  s.stop(); s.start()           the server going away and back, same port
  config(name, domain, descs)   a RateLimitConfig from dicts
  gateway_config(listener, n)   Envoy Gateway's shape: the domain is the
                                listener, each rule a route descriptor with
                                rule-I-match-0 and masked_remote_address
  many(n, limit)                one resource "big" of n descriptors k=vI
  version_of(d)                 the version_info in force (daemon d's /metrics)
  swap_figures(d, ads, n)       what an update of n descriptors costs d:
                                peak memory of the swap against the rules'
                                steady size, its CPU (test_rls_xds, scripts/bench)
"""

import re
import threading
import time
from concurrent import futures

import harness as H
import harness_grpc as G

TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"


def descriptor(pb, d):
    """A RateLimitDescriptor from {"key", "value", "limit": (n, "MINUTE"),
    "descriptors": [...], "shadow_mode", ...}."""
    m = pb.rls_conf.RateLimitDescriptor(key=d["key"], value=d.get("value", ""))
    if "limit" in d:
        n, unit = d["limit"]
        m.rate_limit.requests_per_unit = n
        m.rate_limit.unit = pb.rls_conf.RateLimitUnit.Value(unit) if isinstance(unit, str) \
            else unit
    if d.get("unlimited"):
        m.rate_limit.unlimited = True
    for f in ("shadow_mode", "detailed_metric", "quota_mode"):
        if d.get(f):
            setattr(m, f, True)
    for sub in d.get("descriptors", ()):
        m.descriptors.append(descriptor(pb, sub))
    return m


def config(name, domain, descs):
    pb = G.protos()
    c = pb.rls_conf.RateLimitConfig(name=name, domain=domain)
    for d in descs:
        c.descriptors.append(descriptor(pb, d))
    return c


def gateway_config(listener, limits):
    """Envoy Gateway's resource for one listener: rule i limited to
    limits[i] requests per hour for each client address (a sourceCIDR
    selector of type Distinct: masked_remote_address without a value),
    under its route."""
    descs = []
    for i, n in enumerate(limits):
        route = "httproute/default/backend/rule/%d/match/0/*" % i
        descs.append({"key": route, "value": route, "descriptors": [
            {"key": "rule-%d-match-0" % i, "value": "rule-%d-match-0" % i, "descriptors": [
                {"key": "masked_remote_address", "limit": (n, "HOUR")}]}]})
    return config(listener, listener, descs)


def gateway_request(i, client):
    """The descriptor Envoy sends for rule i of gateway_config."""
    route = "httproute/default/backend/rule/%d/match/0/*" % i
    return [[(route, route), ("rule-%d-match-0" % i, "rule-%d-match-0" % i),
             ("masked_remote_address", client)]]


def many(n, limit, name="big"):
    """One resource of n descriptors k = v0 ... v<n-1>, each `limit` an hour."""
    return config(name, name, [{"key": "k", "value": "v%d" % i, "limit": (limit, "HOUR")}
                               for i in range(n)])


def version_of(d):
    """The version_info in force, as /metrics says it (None: none)."""
    st, _, text = H.request(d.port, "GET", "/metrics")
    for line in str(text).splitlines():
        if line.startswith("ratelimitd_rls_xds_version_info{"):
            return H._labels(line)["version"] or None
    return None


def status_kb(pid, field):
    """VmRSS or VmHWM of pid, in kB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise H.HarnessError("no %s in /proc/%d/status" % (field, pid))


def accepted(d, version):
    """The fields of daemon d's log line accepting `version` ({} : none)."""
    for line in d.log().splitlines():
        if "rules over xDS accepted" in line and 'version="%s"' % version in line:
            return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}
    return {}


def swap_figures(d, ads, n=10000, updates=2, timeout=120):
    """What an update of n descriptors costs daemon d, whose rules come from
    ads (nothing published yet, nothing else asked of d meanwhile): n
    descriptors published, then `updates` times new limits for all of them.

      steady_kb    VmRSS with the first rules in force, less VmRSS before them
      peak_kb      the highest VmHWM during an update (reset before each by
                   writing 5 to /proc/PID/clear_refs), less VmRSS before rules
      ratio        peak_kb / steady_kb: at its peak a swap holds the rules in
                   force (checks in flight end under them), the new ones and
                   what reading them takes
      rules_bytes  what the set keeps (its log line), and per_rule of it
      apply_cpu_us, apply_us  each update's, from its log line: CPU of the
                   thread that applies it (decoded, validated, swapped in), wall

    Bytes, not times: the load of the machine does not move them.  The
    process's RSS is valgrind's or ASan's under them (H.RSS_MEANINGFUL)."""
    pid = d.proc.pid
    H.wait_for(lambda: H.metric(d, "ratelimitd_rls_xds_connected") == 1, "the xDS stream open")
    msgs = [many(n, 100 * (i + 1)) for i in range(updates + 1)]
    base = status_kb(pid, "VmRSS")
    ads.publish([msgs[0]], "u0")
    H.wait_for(lambda: version_of(d) == "u0", "%d descriptors in force" % n, timeout=timeout)
    steady = status_kb(pid, "VmRSS") - base
    # the line is logged just after the swap that /metrics shows
    first = H.wait_for(lambda: accepted(d, "u0"), "the log line of u0")
    f = {"n": n, "base_kb": base, "steady_kb": steady, "peaks_kb": [], "apply_cpu_us": [],
         "apply_us": [], "rules_bytes": int(first.get("rules_bytes", 0)),
         "rls_rules": int(first.get("rls_rules", 0))}
    for i in range(1, updates + 1):
        v = "u%d" % i
        with open("/proc/%d/clear_refs" % pid, "w") as cr:
            cr.write("5")
        ads.publish([msgs[i]], v)
        H.wait_for(lambda: version_of(d) == v, "update %s in force" % v, timeout=timeout)
        f["peaks_kb"].append(status_kb(pid, "VmHWM") - base)
        a = H.wait_for(lambda: accepted(d, v), "the log line of %s" % v)
        f["apply_cpu_us"].append(int(a.get("apply_cpu_us", -1)))
        f["apply_us"].append(int(a.get("apply_us", -1)))
    f["peak_kb"] = max(f["peaks_kb"])
    f["ratio"] = f["peak_kb"] / float(steady) if steady > 0 else float("inf")
    f["per_rule"] = f["rules_bytes"] / float(f["rls_rules"]) if f["rls_rules"] else 0.0
    return f


class AdsServer:
    def __init__(self, tls=None, port=None):
        self.pb = G.protos()
        self.tls = tls
        self.port = port or H.free_port()
        self.cond = threading.Condition()
        self.configs, self.version, self.gen = [], None, 0
        self.requests = []
        self.responses = []  # (nonce, version) sent
        self.streams = 0
        self.nonce = 0
        self.server = None
        self.start()

    # ---- the service
    def _reader(self, it):
        try:
            for req in it:
                with self.cond:
                    self.requests.append(req)
                    self.cond.notify_all()
        except Exception:
            pass

    def _stream(self, it, ctx):
        with self.cond:
            self.streams += 1
        threading.Thread(target=self._reader, args=(it,), daemon=True).start()
        sent = 0
        while ctx.is_active():
            with self.cond:
                self.cond.wait_for(lambda: self.gen != sent or not ctx.is_active(), timeout=0.2)
                if self.gen == sent or self.version is None:
                    sent = self.gen
                    continue
                sent = self.gen
                self.nonce += 1
                resp = self.pb.discovery.DiscoveryResponse(
                    version_info=self.version, type_url=TYPE_URL, nonce=str(self.nonce))
                for c in self.configs:
                    a = resp.resources.add()
                    a.type_url = TYPE_URL
                    a.value = c.SerializeToString() if not isinstance(c, bytes) else c
                self.responses.append((str(self.nonce), self.version))
            yield resp

    def start(self):
        G._need_grpc()
        grpc = G.grpc
        handler = grpc.method_handlers_generic_handler(
            "envoy.service.discovery.v3.AggregatedDiscoveryService",
            {"StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                self._stream, request_deserializer=self.pb.discovery.DiscoveryRequest.FromString,
                response_serializer=lambda m: m.SerializeToString())})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                                  options=[("grpc.max_receive_message_length", 64 << 20),
                                           ("grpc.so_reuseport", 0)])
        self.server.add_generic_rpc_handlers((handler,))
        addr = "127.0.0.1:%d" % self.port
        if self.tls:
            cert, key, ca = self.tls
            creds = grpc.ssl_server_credentials([(open(key, "rb").read(),
                                                  open(cert, "rb").read())],
                                                root_certificates=open(ca, "rb").read(),
                                                require_client_auth=True)
            bound = self.server.add_secure_port(addr, creds)
        else:
            bound = self.server.add_insecure_port(addr)
        if bound != self.port:
            raise H.HarnessError("the ADS server cannot bind %s" % addr)
        self.server.start()
        with self.cond:
            self.gen += 1  # a new stream gets what is published

    def stop(self):
        self.server.stop(grace=0).wait(10)
        with self.cond:
            self.cond.notify_all()

    # ---- what the tests drive
    def publish(self, configs, version):
        with self.cond:
            self.configs, self.version = list(configs), version
            self.gen += 1
            self.cond.notify_all()

    def last_nonce(self, version):
        with self.cond:
            for nonce, v in reversed(self.responses):
                if v == version:
                    return nonce
        return None

    def wait_request(self, pred, what, since=0, timeout=60.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for r in self.requests[since:]:
                    if pred(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise H.Fail("no DiscoveryRequest %s in %.0fs; got %r" % (
                        what, timeout, [(r.version_info, r.response_nonce,
                                         r.error_detail.message[:200]) for r in self.requests]))
                self.cond.wait(min(left, 0.5))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
