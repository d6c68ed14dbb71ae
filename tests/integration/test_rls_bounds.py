#!/usr/bin/env python3
"""The bounds of rls.config's loader (issue 31 items 2, 3 and 6), through
`ratelimitd -t` and the real daemon: a file nested 200,000 deep (in its
descriptors or in metadata) refused at once by name; a rules directory
with 8 symlinks to itself read once, each link one problem; the problem
list bounded; 100,000 rules load and one more is refused by name; the peak
memory of -t within 10x the rules' bytes, metadata costing less than its
bytes; and a SIGTERM during the reload of a hostile file obeyed within
shutdown_grace.
"""

import os
import signal
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402
# a directory of rule files {name: text}, as test_rls_rules writes them
from test_rls_rules import write_rules as rules_dir  # noqa: E402

DEEP = 200000
# -t of a hostile file: refused in well under a second (main: minutes);
# generous for a loaded machine and an ASan build
QUICK = 10.0


def dash_t(rules, timeout=120):
    """-t of a config naming rules: (exit code, output, seconds)."""
    cfg = H.write_config({"rls": {"config": rules}})
    t0 = time.monotonic()
    p = subprocess.Popen([H.RATELIMITD, "-t", "-c", cfg], env=H.clean_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("-t still loading after %ss" % timeout)
    return p.returncode, out.decode("utf-8", "replace"), time.monotonic() - t0


# Runs argv[1:] and prints its exit code and peak RSS.  A process's peak
# counts the memory of the one it was forked from (and, with vfork, that
# one's peak): so a small interpreter forks it, never this test, which holds
# megabytes of generated rules.
LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)
"""


def peak_rss_kib(rules, timeout=300):
    """-t of a config naming rules: its exit code and its peak RSS (KiB)."""
    cfg = H.write_config({"rls": {"config": rules}})
    r = subprocess.run([sys.executable, "-c", LAUNCH, H.RATELIMITD, "-t", "-c", cfg],
                       env=H.clean_env(), stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=timeout)
    eq(r.returncode, 0, "the launcher: %r" % r.stderr)
    code, kib = r.stdout.decode().split()
    return int(code), int(kib)


def rule_lines(n, first=0, meta=0):
    """n ordinary rules (block style, as envoyproxy/ratelimit's examples)."""
    out = []
    for i in range(first, first + n):
        out.append("  - key: client_id\n    value: client-%07d\n    rate_limit:\n"
                   "      unit: minute\n      requests_per_unit: %d\n" % (i, 10 + i % 1000))
        if meta:
            out.append("    metadata:\n" + "".join("      - [%d, item-%d, {a: b}]\n" % (j, j)
                                                  for j in range(meta)))
    return "".join(out)


def t_deep_nesting():
    # a flow sequence 200,000 deep: the document API took minutes
    text = "domain: d\ndescriptors: " + "[" * DEEP + "]" * DEEP + "\n"
    d = rules_dir({"deep.yaml": text})
    rc, out, took = dash_t(d)
    eq(rc, 1, "-t exit code")
    check("deep.yaml:2:" in out and "the YAML is nested deeper than 100 levels" in out,
          "-t names the bound: %r", out[:500])
    check(took < QUICK, "-t took %.1fs for a file nested %d deep", took, DEEP)
    # the same inside metadata, which is skipped but bounded alike
    text = ("domain: d\ndescriptors:\n  - key: k\n    metadata: " + "{a: " * DEEP
            + "1" + "}" * DEEP + "\n")
    d = rules_dir({"deep.yaml": text})
    rc, out, took = dash_t(d)
    eq(rc, 1, "-t exit code (metadata)")
    check("deep.yaml:4:" in out and "nested deeper than 100 levels" in out,
          "-t names the bound: %r", out[:500])
    check(took < QUICK, "-t took %.1fs for metadata nested %d deep", took, DEEP)


def t_symlink_farm():
    d = rules_dir({"a.yaml": "domain: f\ndescriptors:\n  - {key: k, rate_limit: {unit: second, "
                             "requests_per_unit: 1}}\n"})
    for i in range(8):
        os.symlink(".", os.path.join(d, "l%d" % i))
    rc, out, took = dash_t(d)
    eq(rc, 1, "-t exit code")
    loops = [ln for ln in out.splitlines() if "a directory read already" in ln]
    eq(len(loops), 8, "one problem per link: %r" % out[:800])
    for i in range(8):
        check(any(ln.startswith(os.path.join(d, "l%d" % i) + ":") for ln in loops),
              "link l%d named", i)
    check("duplicate domain" not in out, "a.yaml read once: %r", out[:800])
    check(took < QUICK, "-t took %.1fs", took)
    # without the links the same directory loads
    for i in range(8):
        os.unlink(os.path.join(d, "l%d" % i))
    rc, out, _ = dash_t(d)
    eq(rc, 0, "-t exit code without the links: %s" % out)


def t_problems_bounded():
    # 1,000 problems: the first 100, then a count of the rest
    text = "domain: d\n" + "".join("bad%d: 1\n" % i for i in range(1000))
    d = rules_dir({"many.yaml": text})
    rc, out, _ = dash_t(d)
    eq(rc, 1, "-t exit code")
    lines = [ln for ln in out.splitlines() if "many.yaml:" in ln]
    eq(len(lines), 100, "problems listed")
    check("many.yaml:2: bad0: unknown key" in lines[0], "the first is first: %r", lines[0])
    check("... and 900 more problems" in out, "the rest counted: %r", out[-300:])
    check("1000 problems in the configuration" in out, "the total told: %r", out[-300:])


def t_100k_rules():
    # docs/API.md: 100,000 rules (the node-visit cap refused ~36k in one file)
    path = os.path.join(H.tmpdir(), "r100k-%s.yaml" % uuid.uuid4().hex[:8])
    with open(path, "w") as f:
        f.write("domain: big\ndescriptors:\n" + rule_lines(100000))
    rc, out, _ = dash_t(path)
    eq(rc, 0, "-t of 100,000 rules: %s" % out[:500])
    with open(path, "a") as f:
        f.write(rule_lines(1, first=100000))
    rc, out, _ = dash_t(path)
    eq(rc, 1, "-t of 100,001 rules")
    check("descriptors[100000]: more than 100000 rules" in out, "the bound named: %r", out[:500])


def t_peak_memory():
    if H.SANITIZED:
        # ASan's shadow memory and quarantine are not the daemon's
        H.note("peak RSS not asserted on a sanitized build")
        return
    empty = os.path.join(H.tmpdir(), "e-%s.yaml" % uuid.uuid4().hex[:8])
    with open(empty, "w") as f:
        f.write("domain: e\n")
    rc, base = peak_rss_kib(empty)
    eq(rc, 0, "-t of an empty rule file")
    # ~8 MB of ordinary rules: at most 10x their bytes
    path = os.path.join(H.tmpdir(), "r8m-%s.yaml" % uuid.uuid4().hex[:8])
    with open(path, "w") as f:
        f.write("domain: big\ndescriptors:\n" + rule_lines(73000))
    size = os.path.getsize(path)
    rc, peak = peak_rss_kib(path)
    eq(rc, 0, "-t of %d bytes of rules" % size)
    H.note("-t of %d bytes of rules: peak RSS %d KiB (%.1fx), %d KiB without rules",
           size, peak, peak * 1024.0 / size, base)
    check(peak * 1024 <= 10 * size, "peak RSS %d KiB over 10x %d bytes", peak, size)
    # metadata: the same rules with ~13 MB of it cost less than its bytes
    plain = os.path.join(H.tmpdir(), "p-%s.yaml" % uuid.uuid4().hex[:8])
    meta = os.path.join(H.tmpdir(), "m-%s.yaml" % uuid.uuid4().hex[:8])
    with open(plain, "w") as f:
        f.write("domain: big\ndescriptors:\n" + rule_lines(22000))
    with open(meta, "w") as f:
        f.write("domain: big\ndescriptors:\n" + rule_lines(22000, meta=20))
    extra = os.path.getsize(meta) - os.path.getsize(plain)
    rc1, p1 = peak_rss_kib(plain)
    rc2, p2 = peak_rss_kib(meta)
    eq((rc1, rc2), (0, 0), "-t of the rules without and with metadata")
    H.note("metadata: %d bytes cost %d KiB of peak RSS", extra, p2 - p1)
    check((p2 - p1) * 1024 <= extra // 2, "metadata of %d bytes cost %d KiB", extra, p2 - p1)


def t_sigterm_during_reload():
    grace = 2.0
    d = rules_dir({"a.yaml": "domain: f\ndescriptors:\n  - {key: k, rate_limit: {unit: second, "
                             "requests_per_unit: 1}}\n"})
    with H.Redis() as r:
        dm = H.Daemon({"rls": {"config": d}, "shutdown_grace": "%dms" % int(grace * 1000)},
                      redis=r)
        try:
            with open(os.path.join(d, "b.yaml"), "w") as f:
                f.write("domain: g\ndescriptors: " + "[" * DEEP + "]" * DEEP + "\n")
            dm.reload()
            H.wait_for(lambda: "reloading configuration" in dm.log(), "the reload to start",
                       timeout=10 * H.SLOW)
            t0 = time.monotonic()
            dm.send_signal(signal.SIGTERM)
            # within shutdown_grace of the signal, plus the start of a slow
            # process (valgrind) to notice it; main took minutes
            code = dm.wait(timeout=grace + 5)
            took = time.monotonic() - t0
            eq(code, 0, "exit code")
            H.note("SIGTERM during the reload obeyed in %.2fs", took)
            log = dm.log()
            check("nested deeper than 100 levels" in log, "the reload names the bound")
            check("reload rejected" in log, "the reload was rejected")
        finally:
            dm.kill()


def main():
    t = H.Tests(timeout=900)
    t.run("-t: a file nested 200,000 deep refused at once by name", t_deep_nesting)
    t.run("-t: 8 symlinks to the rules directory, each one problem", t_symlink_farm)
    t.run("-t: the first 100 problems, then a count", t_problems_bounded)
    t.run("-t: 100,000 rules load, one more is refused by name", t_100k_rules)
    t.run("-t: peak RSS within 10x the rules, metadata below its bytes", t_peak_memory)
    t.run("SIGTERM during the reload of a hostile file obeyed within shutdown_grace",
          t_sigterm_during_reload)
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
