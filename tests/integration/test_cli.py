#!/usr/bin/env python3
"""The command line of docs/API.md: -t (every problem, with where it is), -V, -h,
bad arguments, environment variables and their precedence (flag > environment >
file > default), exit codes (0 clean stop, 1 bad config/arguments, 2 runtime
failure) and signals (SIGTERM/SIGINT stop with 0, SIGHUP reloads)."""

import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq, post  # noqa: E402


def fw(limit, window="60s"):
    return {"algorithm": "fixed_window", "limit": limit, "window": window}


VALID = {
    "listen": "127.0.0.1:8080",
    "workers": 1,
    "backend": "redis",
    "redis": {"url": "redis://127.0.0.1:6379/0", "timeout": "50ms", "connect_timeout": "1s", "key_prefix": "rl:"},
    "failure_mode": "open",
    "identity": ["body", "header:X-Api-Key", "forwarded", "peer"],
    "trusted_proxies": ["127.0.0.0/8", "::1/128"],
    "max_body": "64k",
    "shutdown_grace": "10s",
    "policies": [
        {"name": "login", "match": {"path_prefix": "/login", "methods": ["POST"]},
         "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "1s"},
                    {"algorithm": "fixed_window", "limit": 100, "window": "1h"}]},
        {"name": "default", "limits": [fw(100, "60s")], "shadow": False},
    ],
}

# several independent problems; each must be reported with its path
BROKEN = {
    "listen": "not an address",
    "bogus_option": 1,
    "policies": [
        {"name": "a", "limits": [{"algorithm": "leaky_bucket", "limit": 5, "window": "1s"}]},
        {"name": "b", "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "abc"},
                                 {"algorithm": "fixed_window", "limit": -5, "window": "1s"}]},
    ],
}
BROKEN_PATHS = ["listen", "bogus_option", "policies[0].limits[0].algorithm",
                "policies[1].limits[0].window", "policies[1].limits[1].limit"]

# a JSON syntax error on line 3 (the doubled comma)
MALFORMED = b'{\n  "listen": "127.0.0.1:8080",\n  "workers": 1,,\n  "backend": "redis"\n}\n'


def simple(name="p", limit=1):
    return {"identity": ["body", "peer"], "redis": {"timeout": "2s"},
            "policies": [{"name": name, "limits": [fw(limit)]}]}


def poll(fn, seconds, what):
    """fn() until it returns a true value, bounded; its last value."""
    deadline = time.monotonic() + seconds
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


# ---------------------------------------------------------------- -t and friends

def t_test_valid(r):
    path = H.write_config(VALID)
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 0, "exit code of -t on a valid config (output %r)" % (out + err))
    check("configuration OK" in out + err, "no 'configuration OK' in %r", out + err)


def t_test_every_problem(r):
    path = H.write_config(BROKEN)
    rc, out, err = H.run_cli(["-t", "-c", path])
    text = out + err
    eq(rc, 1, "exit code of -t on a broken config")
    check("configuration OK" not in text, "'configuration OK' for a broken config")
    lines = text.splitlines()
    missing = []
    for p in BROKEN_PATHS:
        pat = re.compile(r"^%s: %s: \S" % (re.escape(path), re.escape(p)))
        if not any(pat.match(line) for line in lines):
            missing.append(p)
    check(not missing, "not reported as 'FILE: path: message': %s; output:\n%s", missing, text)


def t_test_malformed_json(r):
    path = H.write_config(MALFORMED)
    rc, out, err = H.run_cli(["-t", "-c", path])
    text = out + err
    eq(rc, 1, "exit code of -t on malformed JSON")
    check(path in text, "the file is not named in %r", text)
    check(re.search(r"(line\s*3\b|:3:\d+)", text), "line 3 is not reported in %r", text)
    check(re.search(r"(col(umn)?\s*\d+|:3:\d+)", text, re.I), "no column is reported in %r", text)


def t_test_missing_file(r):
    path = os.path.join(H.tmpdir(), "no-such-config.json")
    rc, out, err = H.run_cli(["-t", "-c", path])
    eq(rc, 1, "exit code of -t on a missing file")
    check(path in out + err, "the missing file is not named in %r", out + err)


def t_bad_config_at_start(r):
    d = H.Daemon(BROKEN, backend="memory", wait=False)
    rc = d.wait(timeout=15)
    eq(rc, 1, "exit code when starting with a broken config")
    check("policies[1].limits[0].window" in d.log(), "the problem is not printed: %r", d.log()[:500])


def t_version(r):
    rc, out, err = H.run_cli(["-V"])
    eq(rc, 0, "exit code of -V")
    check(re.search(r"\d+\.\d+", out + err), "no version number in %r", out + err)


def t_help(r):
    rc, out, err = H.run_cli(["-h"])
    eq(rc, 0, "exit code of -h")
    text = out + err
    for flag in ("-c", "-l", "-r", "-b", "-t"):
        check(flag in text, "help does not mention %s: %r", flag, text[:300])


def t_bad_arguments(r):
    for args in (["-Z"], ["--no-such-option"], ["-b", "postgres"], ["-L", "loud"], ["-w", "abc"],
                 ["-l", "not an address"], ["-c"]):
        rc, out, err = H.run_cli(args + ["-t"] if args != ["-c"] else args, timeout=10)
        eq(rc, 1, "exit code for %r (output %r)" % (args, (out + err)[:200]))
        check((out + err).strip(), "no message for %r", args)


def t_flag_and_env_problems_named(r):
    # a flag's or variable's bad value is its own problem, not the file's
    cfg = H.write_config(simple())
    for args, env, origin in ((["-l", "not an address"], None, "-l"),
                              ([], {"RATELIMITD_LISTEN": "1.2.3.4:99999"}, "RATELIMITD_LISTEN"),
                              (["-r", "http://nope"], None, "-r"),
                              (["-w", "abc"], None, "-w")):
        rc, out, err = H.run_cli(["-t", "-c", cfg] + args, env=env, timeout=10)
        eq(rc, 1, "exit code for %r %r" % (args, env))
        first = err.strip().splitlines()[0] if err.strip() else ""
        check(first.startswith(origin + ": "), "%r %r: the problem %r does not name %s", args, env, first, origin)
        check(cfg not in err, "%r %r: the file is blamed: %r", args, env, err)


# ---------------------------------------------------------------- environment

def t_env_listen(r):
    p = H.free_port()
    with H.Daemon(simple(), backend="memory", listen=False, port=p,
                  env={"RATELIMITD_LISTEN": "127.0.0.1:%d" % p}) as d:
        st, _, _ = H.request(p, "GET", "/healthz")
        eq(st, 200, "/healthz on RATELIMITD_LISTEN's port")
        eq(d.stop(), 0, "exit code on SIGTERM")


def t_flag_beats_env_listen(r):
    p_env = H.free_port()
    with H.Daemon(simple(), backend="memory", env={"RATELIMITD_LISTEN": "127.0.0.1:%d" % p_env}) as d:
        check(d.port != p_env, "test bug: same port")
        st, _, _ = H.request(d.port, "GET", "/healthz")
        eq(st, 200, "/healthz on the -l port")
        check(not H.port_open(p_env), "the daemon (also) listens on RATELIMITD_LISTEN's port %d" % p_env)


def t_env_beats_file_listen(r):
    p_file, p_env, p_flag = H.free_port(), H.free_port(), H.free_port()
    cfg = dict(simple(), listen="127.0.0.1:%d" % p_file)
    with H.Daemon(cfg, backend="memory", listen=False, port=p_env,
                  env={"RATELIMITD_LISTEN": "127.0.0.1:%d" % p_env}):
        check(not H.port_open(p_file), "listening on the file's port although RATELIMITD_LISTEN is set")
    with H.Daemon(cfg, backend="memory", listen=False, port=p_file) as d:
        st, _, _ = H.request(p_file, "GET", "/healthz")
        eq(st, 200, "/healthz on the file's listen port without environment")
        d.stop()
    with H.Daemon(cfg, backend="memory", port=p_flag,
                  env={"RATELIMITD_LISTEN": "127.0.0.1:%d" % p_env}):
        check(not H.port_open(p_file) and not H.port_open(p_env),
              "-l given but the file's or the environment's port is open too")


def t_env_config(r):
    env_cfg = H.write_config(simple("from_env", 2))
    with H.Daemon(None, redis=r, env={"RATELIMITD_CONFIG": env_cfg}) as d:
        st, h, b = post(d.port, {"key": "e"})
        H.expect_json(st, h, b, 200, "check")
        eq(b.get("policy"), "from_env", "policy from RATELIMITD_CONFIG's file")
        eq(b.get("limit"), 2, "limit from RATELIMITD_CONFIG's file")
    # -c beats RATELIMITD_CONFIG
    with H.Daemon(simple("from_flag", 3), redis=r, env={"RATELIMITD_CONFIG": env_cfg}) as d:
        st, h, b = post(d.port, {"key": "e"})
        H.expect_json(st, h, b, 200, "check")
        eq(b.get("policy"), "from_flag", "policy with -c and RATELIMITD_CONFIG")


def t_env_backend(r):
    dead = "redis://127.0.0.1:%d/0" % H.free_port()
    # RATELIMITD_BACKEND=memory: counts without any Redis (a dead URL is ignored)
    with H.Daemon(simple(), env={"RATELIMITD_BACKEND": "memory", "RATELIMITD_REDIS_URL": dead}) as d:
        st, _, b = H.request(d.port, "GET", "/readyz")
        eq(st, 200, "/readyz with RATELIMITD_BACKEND=memory and a dead Redis URL (%r)" % (b,))
        st, h, b = post(d.port, {"key": "m"})
        H.expect_json(st, h, b, 200, "first check")
        check(not b.get("degraded"), "memory backend answered degraded: %r", b)
        st, h, b = post(d.port, {"key": "m"})
        H.expect_json(st, h, b, 429, "second check with limit 1 (memory backend counts)")
    # -b redis beats RATELIMITD_BACKEND=memory: with a dead Redis it is not ready
    with H.Daemon(simple(), args=["-b", "redis", "-r", dead], env={"RATELIMITD_BACKEND": "memory"}) as d:
        st, _, b = H.request(d.port, "GET", "/readyz")
        eq(st, 503, "/readyz with -b redis and a dead Redis despite RATELIMITD_BACKEND=memory (%r)" % (b,))


def t_env_redis_url(r):
    dead = "redis://127.0.0.1:%d/0" % H.free_port()
    r.cli("FLUSHALL")
    with H.Daemon(simple(), env={"RATELIMITD_REDIS_URL": r.url}) as d:
        ready = poll(lambda: H.request(d.port, "GET", "/readyz")[0] == 200, 10, "readyz")
        check(ready, "/readyz not 200 with RATELIMITD_REDIS_URL set to a live Redis")
        st, h, b = post(d.port, {"key": "u"})
        H.expect_json(st, h, b, 200, "check")
        check(not b.get("degraded"), "degraded answer with a live Redis: %r", b)
        check(int(r.cli("DBSIZE")) > 0, "nothing written to the Redis of RATELIMITD_REDIS_URL")
    # -r beats RATELIMITD_REDIS_URL
    r.cli("FLUSHALL")
    with H.Daemon(simple(), redis=r, env={"RATELIMITD_REDIS_URL": dead}) as d:
        ready = poll(lambda: H.request(d.port, "GET", "/readyz")[0] == 200, 10, "readyz")
        check(ready, "/readyz not 200 with -r live and RATELIMITD_REDIS_URL dead")
        st, h, b = post(d.port, {"key": "u"})
        H.expect_json(st, h, b, 200, "check")
        check(int(r.cli("DBSIZE")) > 0, "nothing written to the Redis of -r")
    # the environment's dead URL alone: not ready
    with H.Daemon(simple(), env={"RATELIMITD_REDIS_URL": dead}) as d:
        st, _, _ = H.request(d.port, "GET", "/readyz")
        eq(st, 503, "/readyz with RATELIMITD_REDIS_URL pointing to nothing")


def t_env_log_level(r):
    d = H.Daemon(simple(), backend="memory", env={"RATELIMITD_LOG_LEVEL": "shouting"}, wait=False)
    eq(d.wait(timeout=15), 1, "exit code with RATELIMITD_LOG_LEVEL=shouting")
    with H.Daemon(simple(), backend="memory", env={"RATELIMITD_LOG_LEVEL": "debug"}) as d:
        st, _, _ = H.request(d.port, "GET", "/healthz")
        eq(st, 200, "serving with RATELIMITD_LOG_LEVEL=debug")


# ---------------------------------------------------------------- runtime

def t_bind_in_use(r):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        d = H.Daemon(simple(), backend="memory", port=port, wait=False)
        rc = d.wait(timeout=15)
        eq(rc, 2, "exit code when the listen port is in use (log %r)" % d.log()[-300:])
    finally:
        s.close()


def t_sigterm(r):
    with H.Daemon(simple(), redis=r) as d:
        st, _, _ = post(d.port, {"key": "t"})
        eq(st, 200, "a check before SIGTERM")
        with H.Client(d.port) as idle:   # an idle keep-alive connection must not hold the exit
            idle.request("GET", "/healthz")
            eq(d.stop(signal.SIGTERM), 0, "exit code on SIGTERM")


def t_sigint(r):
    with H.Daemon(simple(), backend="memory") as d:
        eq(d.stop(signal.SIGINT), 0, "exit code on SIGINT")


def inflight(port):
    """The in-flight checks gauge of /metrics, None when not found."""
    st, _, text = H.request(port, "GET", "/metrics")
    if st != 200 or not isinstance(text, str):
        return None
    m = re.search(r"^ratelimitd_\w*in_?flight\w*(?:\{[^}]*\})?\s+([0-9.eE+]+)\s*$", text, re.M)
    return float(m.group(1)) if m else None


def slow_check(d, r, key):
    """Pause Redis and start a check that waits for it; (thread, result list)."""
    out = []

    def go():
        try:
            out.append(H.request(d.port, "POST", "/check", {"key": key}, timeout=90))
        except Exception as e:  # noqa: BLE001
            out.append(e)

    r.pause()
    t = threading.Thread(target=go, daemon=True)
    t.start()
    seen = poll(lambda: (inflight(d.port) or 0) >= 1, 5, "inflight")
    check(seen, "no in-flight check in /metrics while Redis is paused (gauge %r)", inflight(d.port))
    return t, out


def drain_config(grace, timeout="60s"):
    return dict(simple("p", 5), shutdown_grace=grace, redis={"timeout": timeout})


def t_sigterm_drains(r):
    with H.Daemon(drain_config("30s"), redis=r) as d:
        try:
            t, out = slow_check(d, r, "drain")
            d.send_signal(signal.SIGTERM)

            def refused():
                try:
                    st, _, _ = H.request(d.port, "POST", "/check", {"key": "late"}, timeout=2)
                    return st == 503
                except OSError:
                    return True
            check(poll(refused, 5, "stop accepting"), "new checks still served after SIGTERM")
            check(d.alive(), "the daemon exited with a check in flight (code %r)", d.proc.poll())
        finally:
            r.resume()
        t.join(30)
        check(out, "the in-flight check got no answer")
        check(not isinstance(out[0], Exception), "the in-flight check failed: %r", out[0])
        st, h, b = out[0]
        H.expect_json(st, h, b, 200, "the in-flight check")
        check(b.get("degraded") is not True, "the in-flight check was answered degraded: %r", b)
        eq(b.get("remaining"), 4, "remaining of the in-flight check")
        eq(d.wait(15), 0, "exit code after draining")


def t_grace_bounds_drain(r):
    with H.Daemon(drain_config("1s"), redis=r) as d:
        try:
            t, out = slow_check(d, r, "grace")
            d.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            rc = d.wait(20)
            took = time.monotonic() - t0
        finally:
            r.resume()
        eq(rc, 0, "exit code when shutdown_grace ends with a check in flight")
        check(took < 15, "exit took %.1f s with shutdown_grace 1s and redis.timeout 60s", took)


def t_second_signal(r):
    with H.Daemon(drain_config("60s"), redis=r) as d:
        try:
            t, out = slow_check(d, r, "second")
            d.send_signal(signal.SIGTERM)
            check(poll(lambda: not H.port_open(d.port) or not d.alive(), 5, "draining"),
                  "still accepting connections after SIGTERM")
            d.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            d.wait(20)
            took = time.monotonic() - t0
        finally:
            r.resume()
        check(took < 15, "a second SIGTERM took %.1f s to stop the daemon (grace 60 s)", took)


def t_sighup_reload(r):
    with H.Daemon(simple("first", 1), redis=r) as d:
        st, h, b = post(d.port, {"key": "h1"})
        H.expect_json(st, h, b, 200, "check before reload")
        eq(b.get("policy"), "first", "policy before reload")
        d.rewrite_config(simple("second", 5))
        d.reload()
        got = poll(lambda: post(d.port, {"key": "h2"})[2].get("policy") == "second", 5, "reload")
        check(got, "the new config is not in force within 5 s of SIGHUP")
        st, h, b = post(d.port, {"key": "h3"})
        eq((b.get("policy"), b.get("limit")), ("second", 5), "policy and limit after reload")
        # a bad config is logged and the old one kept
        before = len(d.log())
        d.rewrite_config(BROKEN)
        d.reload()
        logged = poll(lambda: "policies[1].limits[0].window" in d.log()[before:], 5, "log")
        check(logged, "the bad config's problems are not logged after SIGHUP: %r", d.log()[before:][:500])
        check(d.alive(), "the daemon died on a bad reload")
        st, h, b = post(d.port, {"key": "h4"})
        H.expect_json(st, h, b, 200, "check after a bad reload")
        eq((b.get("policy"), b.get("limit")), ("second", 5), "policy and limit kept after a bad reload")
        eq(d.stop(), 0, "exit code on SIGTERM after reloads")


# ---------------------------------------------------------------- papercuts

def t_unix_refuses_regular_file(r):
    d = H.tmpdir()
    path = os.path.join(d, "precious.txt")
    with open(path, "w") as f:
        f.write("not a socket\n")
    daemon = H.Daemon(simple(), backend="memory", listen=False, port=0,
                      args=["-l", "unix:" + path], wait=False)
    eq(daemon.wait(timeout=15), 2, "exit code for -l unix:<regular file> (log %r)" % daemon.log()[-300:])
    with open(path) as f:
        eq(f.read(), "not a socket\n", "the regular file at the -l path")
    check("not a socket" in daemon.log() and path in daemon.log(),
          "the refusal does not name the file: %r", daemon.log()[-300:])
    # a stale socket of a dead daemon is still replaced
    sock_path = os.path.join(d, "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock_path)
    s.close()
    with H.Daemon(simple(), backend="memory", listen=False, port=0, args=["-l", "unix:" + sock_path],
                  wait=False) as daemon:
        def answers():
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(2)
            try:
                c.connect(sock_path)
                c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return c.recv(64).startswith(b"HTTP/1.1 200")
            except OSError:
                return False
            finally:
                c.close()
        check(poll(lambda: not daemon.alive() or answers(), 20, "serving on the stale socket's path")
              and daemon.alive(), "not serving on a stale socket's path: %r", daemon.log()[-300:])


def t_no_policies_warns(r):
    with H.Daemon(None, backend="memory") as d:
        st, _, body = post(d.port, {"key": "alice"})
        eq((st, body.get("policy", "missing")), (200, None), "a check with no policies")
        check(re.search(r"level=warn msg=\"no policies: every check is allowed", d.log()),
              "no warning that nothing is limited: %r", d.log()[:600])
    with H.Daemon(simple(), backend="memory") as d:
        check("no policies" not in d.log(), "warned with policies: %r", d.log()[:600])


def acl_user(r, user, pw):
    r.cli("ACL", "SETUSER", user, "on", ">" + pw, "~*", "+@all")


def t_password_file(r):
    user, pw = "rl-file", "s3cret-from-a-file"
    acl_user(r, user, pw)
    pwfile = os.path.join(H.tmpdir(), "redis-password")
    with open(pwfile, "w") as f:
        f.write(pw + "\n")             # as `echo` writes it
    cfg = dict(simple("pf", 2), redis={"timeout": "2s", "username": user,
                                            "password_file": pwfile})
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(cfg)])
    eq(rc, 0, "-t with a readable password_file (%r)" % (out + err))
    both = dict(cfg, redis={"username": user, "password": pw, "password_file": pwfile})
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(both)])
    check(rc == 1 and "not both" in out + err, "password and password_file together: %r", (rc, out + err))
    missing = dict(cfg, redis={"username": user, "password_file": pwfile + ".nope"})
    rc, out, err = H.run_cli(["-t", "-c", H.write_config(missing)])
    check(rc == 1 and "redis.password_file" in out + err and pwfile + ".nope" in out + err,
          "a missing password_file is not named: %r", (rc, out + err))

    with H.Daemon(cfg, redis=r) as d:
        eq([post(d.port, {"key": "k"})[0] for _ in range(3)], [200, 200, 429],
           "checks authenticated with the password from the file")
        # a reload reads the file again: gone, the reload is refused and names it
        os.rename(pwfile, pwfile + ".moved")
        d.reload()
        check(poll(lambda: "reload rejected" in d.log(), 20, "the reload refused"),
              "no refused reload in the log: %r", d.log()[-500:])
        check(pwfile in d.log(), "the refused reload does not name the file: %r", d.log()[-500:])
        eq(post(d.port, {"key": "k2"})[0], 200, "a check after the refused reload")
        check(pw not in d.log(), "the password reached the log")
        os.rename(pwfile + ".moved", pwfile)

    with open(pwfile, "w") as f:
        f.write("wrong")
    with H.Daemon(cfg, redis=r, ready=False) as d:
        st, _, body = H.request(d.port, "GET", "/readyz")
        eq(st, 503, "GET /readyz with a wrong password in the file (%r)" % (body,))
        check("wrong" not in d.log(), "the wrong password reached the log")


CASES = [
    ("-t on a valid config: 'configuration OK', exit 0", t_test_valid),
    ("-t reports every problem as FILE: path: message, exit 1", t_test_every_problem),
    ("-t on malformed JSON reports line and column, exit 1", t_test_malformed_json),
    ("-t on a missing file, exit 1", t_test_missing_file),
    ("starting with a bad config exits 1", t_bad_config_at_start),
    ("-V prints a version, exit 0", t_version),
    ("-h prints help, exit 0", t_help),
    ("unknown flags and bad values exit 1", t_bad_arguments),
    ("RATELIMITD_LISTEN is honoured", t_env_listen),
    ("-l beats RATELIMITD_LISTEN", t_flag_beats_env_listen),
    ("RATELIMITD_LISTEN beats the file; -l beats both", t_env_beats_file_listen),
    ("RATELIMITD_CONFIG is honoured; -c beats it", t_env_config),
    ("a bad -l, RATELIMITD_LISTEN, -r or -w names itself, not the file", t_flag_and_env_problems_named),
    ("RATELIMITD_BACKEND is honoured; -b beats it", t_env_backend),
    ("RATELIMITD_REDIS_URL is honoured; -r beats it", t_env_redis_url),
    ("RATELIMITD_LOG_LEVEL is honoured", t_env_log_level),
    ("listen port in use: exit 2", t_bind_in_use),
    ("SIGTERM: exit 0 (idle keep-alive connection open)", t_sigterm),
    ("SIGINT: exit 0", t_sigint),
    ("SIGHUP reloads; a bad new config is logged and the old kept", t_sighup_reload),
    ("SIGTERM finishes an in-flight check, then exits 0", t_sigterm_drains),
    ("shutdown_grace bounds the drain, exit 0", t_grace_bounds_drain),
    ("a second SIGTERM exits at once", t_second_signal),
    ("-l unix:PATH refuses a regular file, keeps it; a stale socket is replaced",
     t_unix_refuses_regular_file),
    ("no policies: a warning that nothing is limited", t_no_policies_warns),
    ("redis.password_file: read at start and reload, named in errors, never logged",
     t_password_file),
]


@contextlib.contextmanager
def fixture():
    with H.Redis() as r:
        yield r


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=180)
