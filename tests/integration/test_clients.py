#!/usr/bin/env python3
"""clients/: the Python and the Node client's own suites, reported case by case.

  - clients/python/tests, run by pytest (Debian's python3-pytest, with
    python3-flask, python3-django, python3-starlette, python3-httpx,
    python3-fastapi and python3-uvicorn); its
    conftest starts the daemon and redis-server through this harness;
  - clients/node/test, run by `node --test` in a copy of clients/node whose
    devDependencies (express, fastify) `npm ci` installs from its
    package-lock.json; the daemons it talks to are started here: one with
    clients/conformance.json's configuration over a real redis-server
    (RATELIMITD_URL), one answering 503 (RATELIMITD_URL_503), one closing idle
    connections after 300 ms (RATELIMITD_URL_IDLE).

Both run every scenario of clients/conformance.json.  Each case of either
suite is one TAP result here ("python: FILE::CASE", "node: FILE: CASE"),
read from their JUnit XML.  A missing pytest, framework, node or npm is a
failure, never a skip, and so is a case either runner skipped.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402

CLIENTS = os.path.join(H.RL_SRCDIR, "clients")
with open(os.path.join(CLIENTS, "conformance.json")) as f:
    CONFORMANCE = json.load(f)
# Debian's pytest and frameworks live in the system Python's path: its own
# pytest-3 runs them, whatever python3 runs this file
PYTEST = os.environ.get("PYTEST", "pytest-3")


def junit_cases(path, classname=True):
    """[(name, failure text or None)] of a JUnit XML file's test cases."""
    out = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = "%s: %s" % (tc.get("classname"), tc.get("name")) if classname else tc.get("name")
        bad = None
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                text = (el.get("message") or "") + "\n" + (el.text or "")
                bad = ("skipped (a skip is a failure here): " if tag == "skipped" else "") + text.strip()
                break
        out.append((name, bad))
    return out


def report(t, prefix, cases, what):
    if not cases:
        t.fail("%s: the suite ran" % prefix, "no case reported by %s" % what)
    for name, bad in cases:
        full = "%s: %s" % (prefix, name)
        if not t.wanted(full):
            continue
        if bad is None:
            t.ok(full)
        else:
            t.fail(full, "\n".join(bad.splitlines()[-40:]))


def run_python(t):
    if shutil.which(PYTEST) is None:
        t.fail("python: the suite ran", "%s not found (Debian package python3-pytest)" % PYTEST)
        return
    xml = os.path.join(H.tmpdir(), "python-junit.xml")
    env = dict(os.environ, RL_SRCDIR=H.RL_SRCDIR, RATELIMITD=H.RATELIMITD)
    r = subprocess.run([PYTEST, "-p", "no:cacheprovider", "-q", "-rfEs", "--junitxml", xml,
                        "-o", "junit_family=xunit1", os.path.join(CLIENTS, "python", "tests")],
                       env=env, capture_output=True, text=True, timeout=600 * H.SLOW)
    if not os.path.exists(xml):
        t.fail("python: the suite ran", "pytest exit %d:\n%s%s" % (r.returncode, r.stdout[-3000:],
                                                                  r.stderr[-2000:]))
        return
    report(t, "python", junit_cases(xml), "pytest")
    if r.returncode not in (0, 1):
        t.fail("python: pytest's exit", "exit %d:\n%s" % (r.returncode, r.stdout[-3000:]))


def npm_ci():
    """A copy of clients/node with its devDependencies installed (npm ci)."""
    d = os.path.join(H.tmpdir(), "node")
    shutil.copytree(os.path.join(CLIENTS, "node"), d, ignore=shutil.ignore_patterns("node_modules"))
    r = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=d,
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise H.HarnessError("npm ci in %s failed:\n%s" % (d, r.stderr[-2000:]))
    return d


def run_node(t):
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            t.fail("node: the suite ran", "%s not found (Debian packages nodejs, npm)" % tool)
            return
    try:
        d = npm_ci()
    except H.HarnessError as e:
        t.fail("node: the suite ran", str(e))
        return
    config = CONFORMANCE["config"]
    dead = "redis://127.0.0.1:%d/0" % H.free_port()
    with H.Redis(topology="standalone") as r, H.Daemon(config, redis=r) as daemon, \
            H.Daemon(dict(config, http={"idle_timeout": "300ms"}), redis=r) as idle, \
            H.Daemon(dict(config, failure_mode="closed"), args=["-r", dead], ready=False) as unavailable:
        H.wait_for(lambda: H.request(unavailable.port, "POST", "/check", {"policy": "conf"})[0] == 503,
                   "the 503 daemon answering 503")
        xml = os.path.join(H.tmpdir(), "node-junit.xml")
        env = dict(os.environ, RATELIMITD_URL="http://127.0.0.1:%d" % daemon.port,
                   RATELIMITD_URL_IDLE="http://127.0.0.1:%d" % idle.port,
                   RATELIMITD_URL_503="http://127.0.0.1:%d" % unavailable.port,
                   RL_CONFORMANCE=os.path.join(CLIENTS, "conformance.json"), RL_SLOW=str(H.SLOW))
        files = sorted(glob.glob(os.path.join(d, "test", "*.test.js")))
        # one file at a time: the transport cases count the daemon's connections
        # a case that hangs fails alone (--test-timeout), not the whole file
        p = subprocess.run(["node", "--test", "--test-concurrency=1", "--test-timeout=%d" % (60000 * H.SLOW),
                            "--test-reporter=junit",
                            "--test-reporter-destination=" + xml] + files,
                           cwd=d, env=env, capture_output=True, text=True, timeout=600 * H.SLOW)
    if not os.path.exists(xml):
        t.fail("node: the suite ran", "node --test exit %d:\n%s%s" % (p.returncode, p.stdout[-3000:],
                                                                     p.stderr[-2000:]))
        return
    report(t, "node", junit_cases(xml, classname=False), "node --test")


def main():
    t = H.Tests(timeout=900)
    if t.listing:
        print("python: ... (the cases of clients/python/tests)\nnode: ... (the cases of clients/node/test)")
        sys.exit(0)
    run_python(t)
    run_node(t)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
