#!/usr/bin/env python3
"""The status page (docs/API.md, "Admin API": GET /admin/ui) in a real
browser: Debian's chromium, headless, driven by playwright-core (npm ci of
tests/integration/admin_ui), against the real daemon and a real Redis.  The
page loads with no console error under its Content-Security-Policy, asks for
the admin token once and keeps it in the tab's session only, shows every
policy, its chart and its heavy callers, the heaviest first; a click on
"block" blocks that caller (its next check is 429, blocked, for the 15
minutes picked by default); a caller whose key is markup is shown as text
and no script of it runs.  RLS rules (gRPC calls through grpcio) are
shown with their limits, charts and heavy callers, without actions (the
page says why); a rule name of markup, and a descriptor value of markup in
a detailed_metric rule's name, are text.  A screenshot is left in the build directory
(test_admin_ui.png, and test_admin_ui_no_token.png).

Not in VALGRIND_TESTS: the routes the page calls are test_top.py's, which
runs there; a browser polling a daemon slowed fifty times tells nothing
more."""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
import harness_grpc as G  # noqa: E402
from harness import check, eq, post  # noqa: E402

TOKEN = "ui-secret-0123456789"
UI_DIR = os.path.join(H.HERE, "admin_ui")
XSS = "<img src=x onerror=alert(1)>"
POLICIES = [
    {"name": "login", "limits": [{"algorithm": "token_bucket", "limit": 2, "window": "1h",
                                  "burst": 2}]},
    {"name": "api", "limits": [{"algorithm": "fixed_window", "limit": 3, "window": "1h"},
                               {"algorithm": "sliding_window_counter", "limit": 100,
                                "window": "24h"}]},
]
RLS_PORT = H.free_port()
# a rule name of markup; a descriptor value of markup, in the name of the
# detailed_metric rule (a caller's identity shows it escaped, %3Cimg...)
RULE = "<b>who</b>"
RULES = """\
domain: shop
descriptors:
  - key: "%s"
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: tag
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 1000
""" % RULE
RLS_XSS = "<img src=x onerror=alert(2)>"
SCREENSHOT = os.path.join(os.getcwd(), "test_admin_ui.png")
SCREENSHOT_NO_TOKEN = os.path.join(os.getcwd(), "test_admin_ui_no_token.png")


def chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p is not None:
            return p
    raise H.HarnessError("chromium not found in PATH (Debian package chromium)")


def browse(spec, timeout=240):
    d = H.node_project(UI_DIR, ("package.json", "package-lock.json", ".npmrc", "run.js"))
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    r = subprocess.run(["node", os.path.join(d, "run.js"), path], cwd=d, capture_output=True,
                       timeout=timeout * H.SLOW)
    if r.returncode != 0:
        raise H.HarnessError("node run.js failed (%d):\n%s" % (r.returncode,
                                                               r.stderr.decode()[-4000:]))
    return json.loads(r.stdout.decode())


def t_page_in_a_browser(f):
    d = f.d
    # heavy: denied 30 times; the markup key 5 times; a few others once
    for key, n in (("heavy", 33), (XSS, 8), ("bob", 4), ("carol", 4)):
        st = H.pipelined(d.port, [H.http_bytes("POST", "/check", json.dumps(
            {"policy": "api", "key": key}).encode(), {"Content-Type": "application/json"})] * n)
        eq(st.count(429), n - 3, "denials of %r" % key)
    eq(post(d.port, {"policy": "login", "key": "mallory"})[0], 200, "a login check")
    # the RLS rule: the markup value over its limit 8 times, another once
    pb = G.protos()
    with G.Client(RLS_PORT) as c:
        codes = [pb.rls.RateLimitResponse.Code.Name(c.check("shop", [[(RULE, v)]]).overall_code)
                 for v in [RLS_XSS] * 10 + ["alice"] * 3]
        eq(c.check("shop", [[("tag", RLS_XSS)]]).overall_code, 1, "the tag allowed (OK)")
    eq(codes.count("OVER_LIMIT"), 9, "OVER_LIMIT answers")
    st, h, top = H.request(f.aport, "GET", "/admin/top?domain=shop&rule=%3Cb%3Ewho%3C%2Fb%3E",
                           headers={"Authorization": "Bearer " + TOKEN})
    H.expect_json(st, h, top, 200, "the rule's heavy callers")
    rls_heavy = top["callers"][0]["identity"]
    eq(rls_heavy, "d:shop%1E%3Cb%3Ewho%3C/b%3E%1F%3Cimg%20src=x%20onerror=alert%282%29%3E",
       "the heavy descriptor as its key shows it")
    got = browse({"url": "http://127.0.0.1:%d/admin/ui" % f.aport, "token": TOKEN,
                  "executable": chromium(), "policies": ["login", "api"], "policy": "api",
                  "heavy": "k:heavy", "xss": "k:" + XSS, "screenshot": SCREENSHOT,
                  "rule": {"domain": "shop", "rule": RULE, "heavy": rls_heavy,
                           "detailed": "tag_" + RLS_XSS},
                  "timeout_ms": int(60000 * H.SLOW)})
    eq(got["status"], 200, "the page")
    eq(got["steps"], ["asked for the token", "policies shown", "heavy callers shown",
                      "rule shown", "screenshot", "blocked"], "what the browser did")
    eq(got["console_errors"], [], "console errors (a CSP violation is one)")
    eq(got["page_errors"], [], "script errors")
    eq(got["dialogs"], [], "dialogs opened: no script of a caller's key ran")
    eq((got["imgs"], got["imgs_after"]), (0, 0), "no <img> in the page: the key is text")
    check("k:" + XSS in got["identities"], "the markup key shown as text: %r",
          got["identities"])
    eq(got["policies"], ["login", "api"], "every policy, in the file's order")
    eq(got["first_caller"], "k:heavy", "the heaviest caller first")
    eq(got["charts"], 4, "a chart per policy and per RLS rule")
    eq(got["rules"], [["shop", RULE], ["shop", "tag_" + RLS_XSS]],
       "the RLS rules, the most hit first, their names as text")
    eq(got["detailed_limits"], "limits not shown: the name is made of a request's values "
       "(detailed_metric, value_to_metric), or is a descriptor's own limit",
       "a detailed_metric rule's name is no one rule's")
    eq(got["rule_limits"], "2 per hour", "its limit")
    eq(got["rule_first_caller"], rls_heavy, "its heaviest caller, the markup value as text")
    eq(got["rule_buttons"], 0, "no action on an RLS caller")
    check("block it at Envoy" in got["rule_note"], "the page says why: %r", got["rule_note"])
    eq(got["header"]["config"], d.config_path, "the config file shown")
    check(got["header"]["backend"].startswith("redis: connected"), "backend %r",
          got["header"]["backend"])
    eq(got["token_in_session"], TOKEN, "the token kept in the tab's session")
    eq(got["local_storage"], 0, "nothing kept past the tab")
    eq(got["block_duration"], "15m", "the block's default duration")
    check(got["msg"].startswith("block k:heavy: done"), "the page says %r", got["msg"])
    eq(got["answer"]["identity"], "k:heavy", "the block's answer")
    # the block as the admin API and the check listener see it
    ms = got["answer"]["blocked_ms"]
    check(14 * 60000 <= ms <= 15 * 60000, "blocked for 15 minutes: %r ms", ms)
    st, h, b = post(d.port, {"policy": "api", "key": "heavy"})
    eq((st, b.get("blocked")), (429, True), "the next check of the blocked caller")
    eq(post(d.port, {"policy": "api", "key": "dave"})[0], 200, "another caller still allowed")
    check(os.path.getsize(SCREENSHOT) > 10000, "the screenshot %s", SCREENSHOT)


def t_page_without_token(f):
    # no admin_token_file: the page asks for none and shows the data at once
    a = H.AdminDaemon(f.r, POLICIES, workers=1)
    d, aport = a.d, a.aport
    try:
        st = H.pipelined(d.port, [H.http_bytes("POST", "/check", json.dumps(
            {"policy": "api", "key": "k%d" % i}).encode(), {"Content-Type": "application/json"})
            for i in (1, 1, 1, 1, 2, 2, 2, 2, 2, 2)])
        eq(st.count(429), 4, "denials")
        got = browse({"url": "http://127.0.0.1:%d/admin/ui" % aport, "token": None,
                      "executable": chromium(), "policies": ["login", "api"], "policy": "api",
                      "heavy": "k:k2", "xss": "k:k1", "screenshot": SCREENSHOT_NO_TOKEN,
                      "timeout_ms": int(60000 * H.SLOW)})
        eq(got["steps"][0], "policies shown", "no token asked")
        eq(got["console_errors"] + got["page_errors"], [], "errors")
        eq(got["token_in_session"], None, "no token kept")
        eq(post(d.port, {"policy": "api", "key": "k2"})[2].get("blocked"), True, "k2 blocked")
    finally:
        a.close()


CASES = [
    ("the page in chromium: token asked once, policies, heavy callers, no console error; "
     "block from the page; a markup key is text", t_page_in_a_browser),
    ("without admin_token_file the page asks for no token", t_page_without_token),
]


def fixture():
    rules = os.path.join(H.tmpdir(), "admin-ui-rules")
    os.makedirs(rules, exist_ok=True)
    with open(os.path.join(rules, "rules.yaml"), "w") as fh:
        fh.write(RULES)
    return H.admin_fixture(POLICIES, TOKEN,
                           rls={"listen": "127.0.0.1:%d" % RLS_PORT, "config": rules})


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=600)
