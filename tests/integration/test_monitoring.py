#!/usr/bin/env python3
"""deploy/prometheus/ and deploy/grafana/: the alert rules and the dashboard.

- `promtool check rules` passes on deploy/prometheus/ratelimitd.rules.yml and
  `promtool test rules` on its unit tests (each alert fires for a sick
  instance only, and only after its `for:`);
- every expression of the dashboard is valid PromQL (promtool checks them as
  recording rules, Grafana's $variables replaced);
- every ratelimitd_* metric the rules and the dashboard name exists in a real
  /metrics scrape of the daemon (with a real Redis), with the label values
  they match on (result="degraded", status=~"down|timeout", ...) and the
  labels they aggregate by.

A missing promtool is a failure, never a skip (Debian package prometheus).
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

PROM = os.path.join(H.RL_SRCDIR, "deploy", "prometheus")
RULES = os.path.join(PROM, "ratelimitd.rules.yml")
RULE_TESTS = os.path.join(PROM, "ratelimitd.rules.test.yml")
DASHBOARD = os.path.join(H.RL_SRCDIR, "deploy", "grafana", "ratelimitd.json")
# labels Prometheus adds at scrape time, and the histogram's own
SCRAPE_LABELS = {"instance", "job", "le"}


def promtool():
    p = shutil.which("promtool")
    if p is None:
        raise H.Fail("promtool not found: it is required (Debian package prometheus)")
    return p


def run(argv, cwd=None):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


def yaml_load(path):
    try:
        import yaml
    except ImportError:
        raise H.Fail("python3-yaml is required (Debian package python3-yaml)")
    with open(path) as f:
        return yaml.safe_load(f)


def rule_exprs():
    doc = yaml_load(RULES)
    return [(r["alert"], r["expr"]) for g in doc["groups"] for r in g["rules"]]


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def dashboard_exprs():
    out = []
    for p in dashboard()["panels"]:
        for t in p.get("targets", []):
            out.append(("%s/%s" % (p["title"], t["refId"]), t["expr"]))
    return out


def scrape(port):
    """{metric name: {label: {values}}} from the daemon's /metrics (histograms
    also under name_bucket/_sum/_count)."""
    return H.scrape_metrics(port)[1]


SELECTOR = re.compile(r"\b(ratelimitd_\w+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def check_expr(where, expr, metrics):
    used = SELECTOR.findall(expr)
    names = {n for n, _ in used}
    if not names:
        check("up{" in expr, "%s names no ratelimitd metric: %s", where, expr)
        return set()
    for name, sel in used:
        check(name in metrics, "%s: %s is not in /metrics (%s)", where, name, expr)
        for label, op, value in MATCHER.findall(sel or ""):
            if label in SCRAPE_LABELS or value.startswith("$"):
                continue
            have = metrics[name].get(label)
            check(have, "%s: %s has no label %s in /metrics", where, name, label)
            if op in ("=", "!="):
                check(value in have, "%s: %s{%s=%r}: /metrics has only %s", where, name, label, value,
                      sorted(have))
            else:
                for alt in value.split("|"):
                    if re.fullmatch(r"[\w.]+", alt):
                        check(alt in have, "%s: %s{%s=~...%r...}: /metrics has only %s", where, name,
                              label, alt, sorted(have))
    labels_there = set(SCRAPE_LABELS)
    for n in names:
        labels_there |= set(metrics[n])
    for group in BY.findall(expr):
        for label in (x.strip() for x in group.split(",") if x.strip()):
            check(label in labels_there, "%s: aggregates by %s, which %s do not have", where, label,
                  sorted(names))
    return names


def t_promtool_check(fx):
    rc, out = run([promtool(), "check", "rules", RULES])
    check(rc == 0 and "SUCCESS" in out, "promtool check rules (exit %d):\n%s", rc, out)
    n = len(rule_exprs())
    check(re.search(r"SUCCESS: %d rules found" % n, out), "promtool did not find the %d rules: %s", n, out)


def t_promtool_test(fx):
    rc, out = run([promtool(), "test", "rules", os.path.basename(RULE_TESTS)], cwd=PROM)
    check(rc == 0 and "SUCCESS" in out, "promtool test rules (exit %d):\n%s", rc, out)
    # every alert is exercised by the unit tests, firing at least once
    tests = yaml_load(RULE_TESTS)["tests"]
    fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a.get("exp_alerts")}
    missing = sorted({name for name, _ in rule_exprs()} - fired)
    check(not missing, "alerts no unit test sees firing: %s", missing)


def t_rules_job(fx):
    # only RatelimitdDown looks at the job: it matches a static "ratelimitd"
    # and the Prometheus Operator's "<namespace>/ratelimitd" of podmonitor.yaml
    for name, expr in rule_exprs():
        check('job="' not in expr, "alert %s names one scrape job: %s", name, expr)
    down = dict(rule_exprs())["RatelimitdDown"]
    m = re.search(r'job=~"([^"]+)"', down)
    check(m, "RatelimitdDown does not select the job: %s", down)
    for job, want in (("ratelimitd", True), ("app/ratelimitd", True), ("monitoring/ratelimitd", True),
                      ("kubernetes-pods", False), ("app/other", False), ("notratelimitd", False)):
        eq(re.fullmatch(m.group(1), job) is not None, want, "RatelimitdDown's job matcher on %r" % job)
    pm = yaml_load(os.path.join(H.RL_SRCDIR, "deploy", "kubernetes", "podmonitor.yaml"))
    eq(pm.get("kind"), "PodMonitor", "deploy/kubernetes/podmonitor.yaml's kind")
    name = pm["metadata"]["name"]
    check(re.fullmatch(m.group(1), "app/" + name), "the PodMonitor's job (<namespace>/%s) is not matched", name)


def t_rules_metrics(fx):
    metrics = scrape(fx.port)
    seen = set()
    for name, expr in rule_exprs():
        seen |= check_expr("alert " + name, expr, metrics)
    print("# the rules use %d metrics of /metrics" % len(seen))


def t_dashboard_shape(fx):
    d = dashboard()
    ids = [p["id"] for p in d["panels"]]
    eq(len(ids), len(set(ids)), "distinct panel ids")
    names = {v["name"] for v in d["templating"]["list"]}
    check({"datasource", "job", "instance"} <= names, "template variables %s", sorted(names))
    # the scrape job is the user's to name (a static job, a PodMonitor's
    # "<namespace>/<name>", an annotation-discovered pod): never written in
    check('job="' not in json.dumps(d).replace('\\"', '"'), "the dashboard names a scrape job")
    inst = [v for v in d["templating"]["list"] if v["name"] == "instance"][0]
    check('job=~"$job"' in inst["definition"], "the instance variable ignores the job: %s", inst["definition"])
    for p in d["panels"]:
        check(p.get("targets"), "panel %r has no query", p["title"])
        check(p["datasource"]["uid"] == "${datasource}", "panel %r has a fixed datasource", p["title"])
        g = p["gridPos"]
        check(g["x"] + g["w"] <= 24, "panel %r is wider than the grid", p["title"])
        for t in p["targets"]:
            check('instance=~"$instance"' in t["expr"], "panel %r/%s ignores the instance variable: %s",
                  p["title"], t["refId"], t["expr"])
            check('job=~"$job"' in t["expr"], "panel %r/%s ignores the job variable: %s",
                  p["title"], t["refId"], t["expr"])


def t_dashboard_promql(fx):
    exprs = dashboard_exprs()
    d = tempfile.mkdtemp(prefix="dash-", dir=H.tmpdir())
    path = os.path.join(d, "dashboard-as-rules.yml")
    with open(path, "w") as f:
        f.write("groups:\n- name: dashboard\n  rules:\n")
        for i, (_, e) in enumerate(exprs):
            e = e.replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$job", ".*")
            f.write("  - record: dashboard:expr_%d\n    expr: %s\n" % (i, json.dumps(e)))
    rc, out = run([promtool(), "check", "rules", path])
    check(rc == 0 and "SUCCESS: %d rules found" % len(exprs) in out,
          "the dashboard's expressions are not valid PromQL (exit %d):\n%s", rc, out)


def t_dashboard_metrics(fx):
    metrics = scrape(fx.port)
    seen = set()
    for where, expr in dashboard_exprs():
        seen |= check_expr("panel " + where, expr, metrics)
    # the headline metrics each have a panel
    for m in ("ratelimitd_checks_total", "ratelimitd_backend_latency_seconds_bucket",
              "ratelimitd_backend_requests_total", "ratelimitd_local_cache_hits_total",
              "ratelimitd_redis_errors_total", "ratelimitd_connections_open",
              "ratelimitd_connections_accepted_total", "ratelimitd_check_duration_seconds_bucket"):
        check(m in seen, "no panel shows %s", m)
    print("# the dashboard shows %d of the %d metrics in /metrics" % (len(seen), len(metrics)))


CONFIG = {
    "identity": ["body", "peer"],
    "redis": {"timeout": "2s"},
    "policies": [
        {"name": "api", "limits": [{"algorithm": "fixed_window", "limit": 1, "window": "60s"}]},
        {"name": "hot", "mode": "hybrid", "sync_interval": "50ms",
         "limits": [{"algorithm": "fixed_window", "limit": 100, "window": "60s"}]},
    ],
}


@contextlib.contextmanager
def fixture():
    with H.Redis() as r, H.Daemon(CONFIG, redis=r) as d:
        # some traffic of each kind: allowed, denied, a deny-cache hit, a 400, hybrid
        for body in ({"key": "a", "policy": "api"}, {"key": "a", "policy": "api"},
                     {"key": "a", "policy": "api"}, {"key": "h", "policy": "hot"},
                     {"key": "h", "policy": "hot"}, {"key": "", "policy": "api"}):
            H.request(d.port, "POST", "/check", body)
        yield d


CASES = [
    ("promtool check rules: deploy/prometheus/ratelimitd.rules.yml", t_promtool_check),
    ("promtool test rules: every alert fires for the sick instance only, after its for:", t_promtool_test),
    ("every metric and label value the alert rules use is in a real /metrics scrape", t_rules_metrics),
    ("the rules name no scrape job but RatelimitdDown's, which matches ratelimitd and <namespace>/ratelimitd",
     t_rules_job),
    ("grafana dashboard: distinct ids, datasource, job and instance variables used by every query, on the grid",
     t_dashboard_shape),
    ("grafana dashboard: every expression is valid PromQL (promtool)", t_dashboard_promql),
    ("grafana dashboard: every metric and label value it uses is in a real /metrics scrape",
     t_dashboard_metrics),
]


if __name__ == "__main__":
    H.suite(CASES, fixture, timeout=120)
