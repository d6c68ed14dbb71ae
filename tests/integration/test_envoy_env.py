#!/usr/bin/env python3
"""envoyproxy/ratelimit's environment (docs/envoy.md, "Moving from
envoyproxy/ratelimit"): the daemon started as `ratelimit`, with exactly the
environment Envoy Gateway gives its rate limit Deployment
(envoy_gateway.env), serves ShouldRateLimit over TLS on GRPC_PORT from the
rules its xDS server sends over mTLS (CONFIG_TYPE=GRPC_XDS_SOTW; a real ADS
server, harness_xds.py), GET /healthcheck and POST /json on PORT, and
names once, at start, every variable it reads without effect (never a
value); --envoy-env does the same for `ratelimitd`.  LIMIT_RESPONSE_HEADERS_ENABLED
puts envoyproxy/ratelimit's three headers (names from LIMIT_*_HEADER) on the
answer; a value envoyproxy/ratelimit would refuse stops the start, naming
the variable; a bad rule file at start is served as envoyproxy/ratelimit
serves it (rls.start_without_rules).  Redis Sentinel and Cluster come in its
REDIS_URL forms."""

import contextlib
import json
import os
import re
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
import harness_xds as X  # noqa: E402
from harness import check, eq  # noqa: E402

FIXTURE = os.path.join(H.HERE, "envoy_gateway.env")
# Redis's answers wait this long here (ours is 50 ms, then failure_mode
# answers open): under valgrind or on a loaded machine a check takes longer
SLOW_REDIS = "5s"
DOMAIN = "default/eg/http"
RULES = """\
domain: default/eg/http
descriptors:
  - key: rule-0-match-0
    value: rule-0-match-0
    descriptors:
      - key: masked_remote_address
        rate_limit: {unit: hour, requests_per_unit: 3}
"""


def gateway_env():
    """The fixture's variables, in order: [(name, value)]."""
    out = []
    with open(FIXTURE) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition("=")
                out.append((k, v))
    return out


VALUE_TO_METRIC = """\
domain: vtm
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: path
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
"""


def runtime_root(extra=None):
    """RUNTIME_ROOT with ratelimit/config/eg.yaml (Envoy Gateway's
    RUNTIME_SUBDIRECTORY, envoyproxy/ratelimit's RUNTIME_APPDIRECTORY), and
    extra.yaml when given."""
    root = os.path.join(H.tmpdir(), "runtime-%s" % uuid.uuid4().hex[:8])
    os.makedirs(os.path.join(root, "ratelimit", "config"))
    for name, text in (("eg.yaml", RULES), ("extra.yaml", extra)):
        if text is not None:
            with open(os.path.join(root, "ratelimit", "config", name), "w") as f:
                f.write(text)
    return root


def command_link():
    """A link named `ratelimit` to the daemon, as the image provides."""
    d = os.path.join(H.tmpdir(), "bin-%s" % uuid.uuid4().hex[:8])
    os.makedirs(d)
    link = os.path.join(d, "ratelimit")
    os.symlink(os.path.abspath(H.RATELIMITD), link)
    return link


def eg_descriptor(addr):
    return [[("rule-0-match-0", "rule-0-match-0"), ("masked_remote_address", addr)]]


def read(p):
    with open(p, "rb") as f:
        return f.read()


def told(log, var):
    """The start's lines naming var as without effect (logfmt or JSON lines)."""
    out = []
    for ln in log.splitlines():
        if ln.startswith("{"):
            o = json.loads(ln)
            if "without effect" in o.get("msg", "") and o.get("variable", "").startswith(var + ":"):
                out.append(ln)
        elif "without effect" in ln and re.search(r'variable="%s:' % re.escape(var), ln):
            out.append(ln)
    return out


def t_envoy_gateway(redis):
    pki = H.Pki()
    ca = pki.ca("eg-ca")
    crt, key = pki.leaf("eg-ratelimit", ca)
    xds_crt, xds_key = pki.leaf("envoy-gateway", ca)
    certs = os.path.join(H.tmpdir(), "certs-%s" % uuid.uuid4().hex[:8])
    os.makedirs(certs)
    for src, name in ((crt, "tls.crt"), (key, "tls.key"), (ca[0], "ca.crt")):
        os.symlink(src, os.path.join(certs, name))
    root = runtime_root()
    os.remove(os.path.join(root, "ratelimit", "config", "eg.yaml"))  # the rules come over xDS
    port, grpc_port = H.free_port(), H.free_port()
    # Envoy Gateway's control plane: mTLS, its CA, the rules of RULES
    ads = X.AdsServer(tls=(xds_crt, xds_key, ca[0]))
    ads.publish([X.config(DOMAIN, DOMAIN, [
        {"key": "rule-0-match-0", "value": "rule-0-match-0", "descriptors": [
            {"key": "masked_remote_address", "limit": (3, "HOUR")}]}])], "eg-1")
    env = {}
    for k, v in gateway_env():
        v = v.replace("/certs/", certs + "/")
        if k == "RUNTIME_ROOT":
            v = root
        if k == "REDIS_URL":
            v = "127.0.0.1:%d" % redis.port
        if k == "CONFIG_GRPC_XDS_SERVER_URL":
            v = "127.0.0.1:%d" % ads.port
        env[k] = v
    env.update(PORT=str(port), GRPC_PORT=str(grpc_port), REDIS_TIMEOUT=SLOW_REDIS)
    with ads, H.Daemon(None, env=env, exact_env=True, binary=command_link(), listen=False,
                       port=port, ready=True) as d:
        H.wait_for(lambda: H.metric(port, "ratelimitd_rls_xds_version_info",
                                    {"version": "eg-1"}, default=0) == 1,
                   "the rules over xDS (mTLS)")
        ack = ads.wait_request(lambda r: r.version_info == "eg-1", "ACKing eg-1")
        eq(ack.node.id, "envoy-ratelimit", "CONFIG_GRPC_XDS_NODE_ID")
        st, h, b = H.request(port, "GET", "/healthcheck")
        eq((st, b), (200, "OK"), "GET /healthcheck")
        # TLS with the server's files; GRPC_SERVER_TLS_CA_CERT is not
        # envoyproxy/ratelimit's variable: no client certificate is asked
        creds = G.grpc.ssl_channel_credentials(root_certificates=read(ca[0]))
        addr = "10.1.%d.0/24" % (uuid.uuid4().int % 250)
        with G.Client(grpc_port, creds=creds, name="localhost") as c:
            eq(c.health("ratelimit"), "SERVING", "Health/Check over TLS")
            codes = []
            for _ in range(4):
                r = c.check(DOMAIN, eg_descriptor(addr))
                codes.append(G.protos().rls.RateLimitResponse.Code.Name(r.overall_code))
            eq(codes, ["OK", "OK", "OK", "OVER_LIMIT"], "ShouldRateLimit over TLS, limit 3 an hour")
            eq(r.statuses[0].current_limit.requests_per_unit, 3, "the rule's limit")
            eq(len(r.response_headers_to_add), 0, "no headers without LIMIT_RESPONSE_HEADERS_ENABLED")
        # h2c on the TLS port: refused
        with G.Client(grpc_port) as c:
            eq(G.status_of(c.health, "", timeout=3)[0], "UNAVAILABLE", "h2c on the TLS port")
        st, _, b = H.request(port, "POST", "/json", {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "rule-0-match-0", "value": "rule-0-match-0"},
                         {"key": "masked_remote_address", "value": addr}]}]})
        eq((st, b.get("overallCode")), (429, "OVER_LIMIT"), "POST /json on PORT, the same count")
        # envoyproxy/ratelimit's metric names beside ours, its labels
        ours = {"domain": DOMAIN, "rule": "rule-0-match-0_rule-0-match-0.masked_remote_address"}
        theirs = {"domain": DOMAIN, "key1": "rule-0-match-0_rule-0-match-0",
                  "key2": "masked_remote_address"}
        for stat, mine, want in (("total_hits", "hits_total", 5), ("within_limit", "within_limit_total", 3),
                                 ("over_limit", "over_limit_total", 2)):
            eq(H.metric(port, "ratelimitd_rls_" + mine, ours), want, "ratelimitd_rls_" + mine)
            eq(H.metric(port, "ratelimit_service_rate_limit_" + stat, theirs), want,
               "ratelimit_service_rate_limit_%s{domain,key1,key2}" % stat)
        log = d.log()
        for var in ("GRPC_SERVER_TLS_CA_CERT", "USE_PROMETHEUS", "PROMETHEUS_ADDR",
                    "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"):
            eq(len(told(log, var)), 1, "%s told once at start (log:\n%s)" % (var, log))
        for var in ("USE_STATSD", "REDIS_URL", "GRPC_SERVER_TLS_CERT", "LOG_LEVEL", "CONFIG_TYPE",
                    "CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_NODE_ID",
                    "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                    "FORCE_START_WITHOUT_INITIAL_CONFIG"):
            eq(told(log, var), [], "%s, read, not told" % var)
        check("envoy-gateway:18001" not in log and certs not in log,
              "a variable's value in the log:\n%s", log)


def t_flag_and_headers(redis):
    root = runtime_root(VALUE_TO_METRIC)
    port, grpc_port = H.free_port(), H.free_port()
    env = {"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "HOST": "127.0.0.1",
           "PORT": port, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpc_port,
           "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % redis.port,
           "REDIS_TIMEOUT": SLOW_REDIS,
           "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_RESET_HEADER": "X-Reset-In",
           "REDIS_POOL_SIZ": "5", "LOG_FORMAT": "json", "LOG_LEVEL": "debug"}
    with H.Daemon(None, env=env, exact_env=True, args=["--envoy-env"], listen=False, port=port,
                  ready=True) as d:
        addr = "10.2.%d.0/24" % (uuid.uuid4().int % 250)
        with G.Client(grpc_port) as c:
            for want in (2, 1, 0, 0):
                r = c.check(DOMAIN, eg_descriptor(addr))
                hdrs = {hv.key: hv.value for hv in r.response_headers_to_add}
                eq(sorted(hdrs), ["RateLimit-Limit", "RateLimit-Remaining", "X-Reset-In"],
                   "envoyproxy/ratelimit's headers, LIMIT_RESET_HEADER's name")
                eq((hdrs["RateLimit-Limit"], hdrs["RateLimit-Remaining"]), ("3", str(want)),
                   "limit and remaining")
                check(1 <= int(hdrs["X-Reset-In"]) <= 3600, "reset in the hour: %r", hdrs)
            # a descriptor no rule answers: no headers (no current_limit)
            r = c.check(DOMAIN, [[("other", "x")]])
            eq(len(r.response_headers_to_add), 0, "no rule, no headers")
        st, _, b = H.request(port, "POST", "/json", {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "rule-0-match-0", "value": "rule-0-match-0"},
                         {"key": "masked_remote_address", "value": addr + "x"}]}]})
        names = sorted(hv["key"] for hv in b.get("responseHeadersToAdd", []))
        eq((st, names), (200, ["RateLimit-Limit", "RateLimit-Remaining", "X-Reset-In"]),
           "POST /json's headers")
        eq(len(told(d.log(), "REDIS_POOL_SIZ")), 1, "an unknown REDIS_ variable told once")
        # value_to_metric: a level with an empty value is named by its key alone
        for route in ("", "r1"):
            st, _, b = H.request(port, "POST", "/json", {"domain": "vtm", "descriptors": [
                {"entries": [{"key": "route", "value": route}, {"key": "path", "value": "/x"}]}]})
            eq(st, 200, "a value_to_metric rule (%r)" % (b,))
        for rule in ("route.path_/x", "route_r1.path_/x"):
            eq(H.metric(port, "ratelimitd_rls_hits_total", {"domain": "vtm", "rule": rule}), 1,
               "value_to_metric's label %s" % rule)
        eq(H.metric(port, "ratelimitd_rls_hits_total", {"domain": "vtm", "rule": "route_.path_/x"}, default=-1),
           -1, "no route_. label")
        # LOG_FORMAT=json: every line the daemon wrote is a JSON object
        lines = [ln for ln in d.log().splitlines() if ln and not ln.startswith("==")]
        check(len(lines) >= 3, "only %d log lines", len(lines))
        for ln in lines:
            try:
                o = json.loads(ln)
            except ValueError:
                raise H.Fail("LOG_FORMAT=json: not a JSON line: %r" % ln)
            check(isinstance(o, dict) and {"ts", "level", "msg"} <= set(o), "fields of %r", ln)


BAD_RULES = """\
domain: default/eg/http
descriptors:
  - key: rule-0-match-0
    rate_limit: {unit: fortnight, requests_per_unit: 3}
"""


def t_bad_rules_at_start(redis):
    """envoyproxy/ratelimit keeps running on a bad rule file and answers
    every call with an error; so does rls.start_without_rules (on in its
    environment), until a good file is picked up.  Our own mode exits 1."""
    root = runtime_root()
    eg = os.path.join(root, "ratelimit", "config", "eg.yaml")
    with open(eg, "w") as f:
        f.write(BAD_RULES)
    port, grpc_port = H.free_port(), H.free_port()
    env = {"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "HOST": "127.0.0.1",
           "PORT": port, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpc_port,
           "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % redis.port,
           "REDIS_TIMEOUT": SLOW_REDIS}
    rc, _, err = H.run_cli(["--envoy-env", "-t"], env=env)
    eq(rc, 1, "-t on a bad rule file, in its environment too")
    check("descriptors[0].rate_limit.unit: invalid rate limit unit" in err,
          "-t names the problem: %r", err)
    with H.Daemon(None, env=env, exact_env=True, args=["--envoy-env"], listen=False, port=port,
                  ready=True) as d:
        check("serving without rules" in d.log() and "invalid rate limit unit" in d.log(),
              "the problem logged at start:\n%s", d.log())
        eq(H.request(port, "GET", "/healthcheck")[:3:2], (200, "OK"), "GET /healthcheck")
        with G.Client(grpc_port) as c:
            eq(c.health(""), "SERVING", "gRPC health")
            code, details = G.status_of(c.check, DOMAIN, eg_descriptor("10.9.0.0/24"))
            eq((code, details), ("UNKNOWN", "no rate limit configuration loaded"),
               "ShouldRateLimit without rules")
            st, _, b = H.request(port, "POST", "/json", {"domain": DOMAIN, "descriptors": [
                {"entries": [{"key": "k", "value": "v"}]}]})
            eq(st, 500, "POST /json without rules (%r)" % (b,))
            with open(eg + ".new", "w") as f:
                f.write(RULES)
            os.rename(eg + ".new", eg)
            H.wait_for(lambda: G.status_of(c.check, DOMAIN, eg_descriptor("10.9.0.0/24"))[0] ==
                       "OK", "the fixed file picked up")
            r = c.check(DOMAIN, eg_descriptor("10.9.1.0/24"))
            eq(r.statuses[0].current_limit.requests_per_unit, 3, "the fixed file's rule")
    # our own mode: exit 1, the problem printed
    with open(eg, "w") as f:
        f.write(BAD_RULES)
    d = H.Daemon({"rls": {"listen": "127.0.0.1:%d" % H.free_port(), "config": eg}},
                 redis=redis, wait=False)
    eq(d.wait(60), 1, "our default: a bad rule file stops the start")
    check("invalid rate limit unit" in d.log(), "the problem printed: %s", d.log())


def t_refused_values(_):
    root = runtime_root()
    base = {"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit"}
    for var, value in (("GRPC_SERVER_USE_TLS", "yes"), ("REDIS_TIMEOUT", "10"),
                       ("PORT", "80800"), ("REDIS_URL", "mymaster"), ("BACKEND_TYPE", "memcache")):
        env = dict(base, **{var: value})
        if var == "REDIS_URL":
            env["REDIS_TYPE"] = "sentinel"
        rc, _, err = H.run_cli(["--envoy-env", "-t"], env=env)
        eq(rc, 1, "%s=%s: refused at start" % (var, value))
        check(err.startswith(var + ":"), "%s: the problem names it: %r", var, err)
    # no rule files where RUNTIME_ROOT says: nothing to serve
    rc, _, err = H.run_cli(["--envoy-env", "-t"], env={"RUNTIME_ROOT": root + "-missing"})
    eq(rc, 1, "no directory of rule files")
    check("RUNTIME_ROOT:" in err, "names RUNTIME_ROOT: %r", err)
    # without --envoy-env and as ratelimitd, its variables are not read
    rc, _, err = H.run_cli(["-t"], env={"GRPC_SERVER_USE_TLS": "yes"})
    eq(rc, 0, "ratelimitd reads none of them: %r" % (err,))


def t_sentinel_url(_):
    with H.SentinelRedis() as s:
        # the sentinels ask for a password (REDIS_SENTINEL_AUTH), the master none
        for x in s.sentinels:
            eq(x.cli("ACL", "SETUSER", "default", "resetpass", ">sentinel-pw"), "OK",
               "a password on the sentinel")
        root = runtime_root()
        nodes = ",".join("127.0.0.1:%d" % x.port for x in s.sentinels)
        for auth in ("sentinel-pw", None):
            port, grpc_port = H.free_port(), H.free_port()
            env = {"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "HOST": "127.0.0.1",
                   "PORT": port, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpc_port,
                   "REDIS_TYPE": "sentinel", "REDIS_URL": "%s,%s" % (s.MASTER, nodes),
                   "LOG_LEVEL": "debug", "REDIS_TIMEOUT": SLOW_REDIS}
            if auth:
                env["REDIS_SENTINEL_AUTH"] = auth
            with H.Daemon(None, env=env, exact_env=True, binary=command_link(), listen=False,
                          port=port, ready=bool(auth)) as d:
                addr = "10.3.%d.0/24" % (uuid.uuid4().int % 250)
                if auth:
                    with G.Client(grpc_port) as c:
                        r = c.check(DOMAIN, eg_descriptor(addr))
                        eq(r.statuses[0].limit_remaining, 2, "counted through the sentinels' master")
                    check(s.cli("KEYS", "*rls:d:*"), "no key in the master named by the sentinels")
                else:
                    # refused by every sentinel: no master, not ready
                    H.wait_for(lambda: "a sentinel did not name the master" in d.log(),
                               "the daemon to be refused by the sentinels")
                    eq(H.request(port, "GET", "/readyz")[0], 503, "not ready without the password")
                    check("sentinel-pw" not in d.log(), "the password in the log")


def configmap_rules(config_dir, name, limit):
    """A Kubernetes ConfigMap's update as the kubelet makes it: the files in a
    new ..<timestamp> directory, a ..data_tmp symlink to it renamed over
    ..data, and each file a symlink through ..data."""
    d = "..%s" % name
    os.makedirs(os.path.join(config_dir, d))
    with open(os.path.join(config_dir, d, "eg.yaml"), "w") as f:
        f.write(RULES.replace("requests_per_unit: 3", "requests_per_unit: %s" % limit))
    os.symlink(d, os.path.join(config_dir, "..data_tmp"))
    os.rename(os.path.join(config_dir, "..data_tmp"), os.path.join(config_dir, "..data"))
    if not os.path.lexists(os.path.join(config_dir, "eg.yaml")):
        os.symlink("..data/eg.yaml", os.path.join(config_dir, "eg.yaml"))


def t_files_watched(redis):
    root = os.path.join(H.tmpdir(), "runtime-%s" % uuid.uuid4().hex[:8])
    config_dir = os.path.join(root, "ratelimit", "config")
    os.makedirs(config_dir)
    configmap_rules(config_dir, "2026_01", 3)
    port, grpc_port = H.free_port(), H.free_port()
    env = {"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "HOST": "127.0.0.1",
           "PORT": port, "GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpc_port,
           "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:%d" % redis.port,
           "REDIS_TIMEOUT": SLOW_REDIS}

    def limit():
        st, _, b = H.request(port, "POST", "/json", {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "rule-0-match-0", "value": "rule-0-match-0"},
                         {"key": "masked_remote_address", "value": uuid.uuid4().hex}]}]})
        eq(st, 200, "a check (%r)" % (b,))
        return b["statuses"][0]["currentLimit"]["requestsPerUnit"]

    def reloads(result):
        return H.metric(port, "ratelimitd_config_reloads_total", {"result": result}, default=0)

    with H.Daemon(None, env=env, exact_env=True, args=["--envoy-env"], listen=False, port=port,
                  ready=True):
        eq(limit(), 3, "the first rules")
        # a ConfigMap update: ..data swapped, no SIGHUP
        configmap_rules(config_dir, "2026_02", 7)
        H.wait_for(lambda: limit() == 7, "the swapped ConfigMap's rules")
        # a bad file: refused, the running rules stay
        ok = reloads("ok")
        configmap_rules(config_dir, "2026_03", "seven")
        H.wait_for(lambda: reloads("failed") >= 1, "the bad file's reload to be refused")
        eq(limit(), 7, "the running rules after a bad file")
        # a file written in place (not through ..data)
        with open(os.path.join(config_dir, "more.yaml"), "w") as f:
            f.write("domain: more\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 9}\n")
        configmap_rules(config_dir, "2026_04", 5)
        H.wait_for(lambda: limit() == 5 and reloads("ok") > ok, "the fixed rules and the new file")
        st, _, b = H.request(port, "POST", "/json", {"domain": "more", "descriptors": [
            {"entries": [{"key": "k", "value": "v"}]}]})
        eq(b["statuses"][0]["currentLimit"]["requestsPerUnit"], 9, "the file written in place")


def t_tls_files_watched(redis):
    """Our own mode: watch_files in the file; rls.tls's files replaced by
    rename (cert-manager's way) are taken for new handshakes."""
    import shutil
    import socket
    import ssl
    pki = H.Pki()
    ca = pki.ca("watch-ca")
    a = pki.leaf("watch-a", ca)
    b = pki.leaf("watch-b", ca)
    tls_dir = os.path.join(H.tmpdir(), "tls-%s" % uuid.uuid4().hex[:8])
    os.makedirs(tls_dir)
    crt, key = os.path.join(tls_dir, "tls.crt"), os.path.join(tls_dir, "tls.key")
    shutil.copy(a[0], crt)
    shutil.copy(a[1], key)
    rules = os.path.join(runtime_root(), "ratelimit", "config")
    grpc_port = H.free_port()
    cfg = {"watch_files": True, "redis": {"timeout": SLOW_REDIS},
           "rls": {"listen": "127.0.0.1:%d" % grpc_port, "config": rules,
                   "tls": {"cert_file": crt, "key_file": key}}}

    def served_cn():
        ctx = ssl.create_default_context(cafile=ca[0])
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as t:
                subject = dict(x[0] for x in t.getpeercert()["subject"])
        return subject["commonName"]

    with H.Daemon(cfg, redis=redis) as d:
        eq(served_cn(), "watch-a", "the first certificate")
        for src, dst in ((b[1], key), (b[0], crt)):
            shutil.copy(src, dst + ".new")
            os.replace(dst + ".new", dst)
        H.wait_for(lambda: served_cn() == "watch-b", "the renamed certificate to be served")
        check("files changed on disk, reloading" in d.log(), "the reload not logged:\n%s", d.log())


CASES = [
    ("Envoy Gateway's environment, started as ratelimit: ShouldRateLimit over TLS from rules "
     "over xDS (mTLS), /healthcheck, /json, its metric names; each variable without effect told "
     "once", 
     t_envoy_gateway),
    ("--envoy-env: LIMIT_RESPONSE_HEADERS_ENABLED's three headers with LIMIT_*_HEADER names; "
     "an unknown REDIS_ variable told; LOG_FORMAT=json lines; value_to_metric's empty value",
     t_flag_and_headers),
    ("values envoyproxy/ratelimit refuses stop the start, naming the variable", t_refused_values),
    ("a bad rule file at start, in its environment: served as it serves it (UNKNOWN \"no rate "
     "limit configuration loaded\", /json 500, healthy), the fixed file picked up; -t and our "
     "own mode: exit 1", t_bad_rules_at_start),
    ("rule files changed on disk (a ConfigMap's ..data swap, a file written in place) reload them; "
     "a bad one keeps the running rules", t_files_watched),
    ("watch_files in our own mode: rls.tls's files renamed over are served", t_tls_files_watched),
    ("REDIS_TYPE=sentinel with REDIS_URL master,sentinel,..., REDIS_SENTINEL_AUTH to sentinels "
     "with a password (none: refused)", t_sentinel_url),
]


@contextlib.contextmanager
def fixture():
    with H.Redis(topology="standalone") as r:
        yield r


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=180)
