#!/usr/bin/env python3
"""The Debian package (debian/), built, checked, installed, run and purged on
this machine (scripts/test, phase 8; docs/packaging.md).

- debian/changelog's version is configure.ac's (AC_INIT): a native package,
  no Debian revision.
- debian/rules' build-time tests are Makefile.am's UNIT_TESTS.
- `dpkg-buildpackage -us -uc -b` builds it from a clean copy of the tree
  (the files git knows and the new ones it does not ignore, or the whole tree
  outside git, without build directories), in a temporary directory, with
  DEB_BUILD_OPTIONS=nocheck (those unit tests are phase 1's): nothing is
  written in the tree or beside it; the build time is reported.
- lintian on the .changes (the package and its -dbgsym): no E: and no W:
  (its whole output is printed).
- The package's files (`dpkg -c`, printed): the daemon, both man pages, the
  unit, /etc/ratelimitd/ratelimitd.json as a conffile, the `ratelimit` link
  in /usr/libexec/ratelimitd/ and none in /usr/bin; nothing in /usr/local;
  Depends names adduser.
- `apt-get install -y ./ratelimitd_*.deb`: installed, the system user
  ratelimitd (no home, no shell) made, the service enabled.
- The installed `ratelimitd -t`, run as that user, accepts the installed
  configuration (it can read it), and refuses a broken one.
- The installed daemon with the installed configuration against a real
  redis-server: the "demo" policy of that file allows 3 checks and denies the
  4th, counted in Redis under its key_prefix.
- /usr/libexec/ratelimitd/ratelimit starts in envoyproxy/ratelimit's mode
  (listens on $PORT, answers GET /healthcheck).
- The installed unit: `systemd-analyze verify` says nothing; it runs
  /usr/bin/ratelimitd as User=ratelimitd; `systemd-analyze security` exposure
  at most 2.0.
- An edited /etc/ratelimitd/ratelimitd.json survives a reinstall (conffile).
- `apt-get purge -y ratelimitd`: every path of `dpkg -L` (taken after the
  install: the same as `dpkg -c`) that was not there before is gone (/etc/ratelimitd too, edited file and
  all), the enablement with it; the user is kept, as Debian does
  (README.Debian).

The machine is left as found, also when a case fails midway or the file is
interrupted: the package is purged, and the user removed when this run made
it.  Needs root (apt-get) and Debian's debhelper, lintian, systemd, man-db and
redis-server: a missing one is a failure.  Cases build on the ones before.
"""

import glob
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# The daemon under test is the installed one.
BIN = "/usr/bin/ratelimitd"
os.environ["RATELIMITD"] = BIN

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

SRC = os.path.abspath(os.environ.get("RL_SRCDIR") or os.path.join(HERE, "..", ".."))
PKG = "ratelimitd"
USER = "ratelimitd"
CONF = "/etc/ratelimitd/ratelimitd.json"
UNIT = "/lib/systemd/system/ratelimitd.service"
LINK = "/usr/libexec/ratelimitd/ratelimit"
WANTS = "/etc/systemd/system/multi-user.target.wants/ratelimitd.service"
# deb-systemd-helper's record of the enablement (what purge undoes)
DSH = "/var/lib/systemd/deb-systemd-helper-enabled"
MAX_EXPOSURE = 2.0
BUILD_TIMEOUT = 1200
APT_TIMEOUT = 900
APT = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=600"]
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
# What a tree copy leaves out when git cannot say (a release tarball).
BUILD_DIRS = ("build", "build-*", ".git", "autom4te.cache", "*.o", "*.a")


class State:
    work = None           # the temporary directory: the tree's copy and the build's products
    deb = None            # ratelimitd_*.deb
    changes = None
    contents = []         # the package's paths, from dpkg -c
    listed = []           # the same from dpkg -L, once installed
    existed = set()       # of those, the ones on the machine before the install
    user_existed = False  # the user, before this run
    installed = False     # this run installed the package


S = State()


def need(tool, package):
    path = shutil.which(tool)
    check(path is not None, "%s not found (Debian package %s)", tool, package)
    return path


def run(argv, timeout=120, cwd=None, env=None, input=None):
    """(exit code, stdout + stderr) of argv, killed with the file (harness)."""
    p = H._track(subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT,
                                  stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL))
    try:
        out, _ = p.communicate(input.encode() if input is not None else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise H.HarnessError("%s: no end within %ss; output:\n%s"
                             % (" ".join(argv), timeout, out.decode("utf-8", "replace")[-3000:]))
    return p.returncode, out.decode("utf-8", "replace")


def must(argv, what, **kw):
    rc, out = run(argv, **kw)
    check(rc == 0, "%s: %s exited %d:\n%s", what, " ".join(argv), rc, out[-4000:])
    return out


def status():
    """dpkg's status of the package ("install ok installed", ...), "" when unknown."""
    rc, out = run(["dpkg-query", "-W", "-f=${Status}", PKG])
    return out.strip() if rc == 0 else ""


def user_exists():
    try:
        pwd.getpwnam(USER)
        return True
    except KeyError:
        return False


def dsh_records():
    return glob.glob(os.path.join(DSH, "ratelimitd.*")) + glob.glob(os.path.join(DSH, "*", "ratelimitd.*"))


def restore():
    """Leave the machine as found: purge what this run installed, remove the
    user this run made (the package keeps it at purge).  Never raises."""
    try:
        if S.installed and status() not in ("", "unknown ok not-installed"):
            rc, out = run(APT + ["purge", PKG], timeout=APT_TIMEOUT, env=APT_ENV)
            if rc != 0:
                print("# cleanup: apt-get purge exited %d:\n# %s" % (rc, out.replace("\n", "\n# ")))
        if not S.user_existed and user_exists():
            run(["userdel", USER])
            run(["groupdel", USER])
    except Exception as e:  # a cleanup reports, never masks the verdict
        print("# cleanup failed: %s: %s" % (type(e).__name__, e))
    if S.work:
        shutil.rmtree(S.work, ignore_errors=True)


class PackageTests(H.Tests):
    def _expired(self):
        restore()
        H.Tests._expired(self)


def _on_signal(signum, frame):
    restore()
    H._on_term(signum, frame)


def configure_version():
    with open(os.path.join(SRC, "configure.ac")) as f:
        m = re.search(r"^AC_INIT\(\[ratelimitd\],\s*\[([^\]]+)\]", f.read(), re.M)
    check(m is not None, "no AC_INIT([ratelimitd], [VERSION]) in configure.ac")
    return m.group(1)


def changelog_version():
    need("dpkg-parsechangelog", "dpkg-dev")
    out = must(["dpkg-parsechangelog", "-l", os.path.join(SRC, "debian", "changelog"),
                "-S", "Version"], "dpkg-parsechangelog")
    return out.strip()


def t_version():
    ac, deb = configure_version(), changelog_version()
    eq(deb, ac, "debian/changelog's version (configure.ac's AC_INIT says %s)" % ac)
    with open(os.path.join(SRC, "debian", "source", "format")) as f:
        eq(f.read().strip(), "3.0 (native)", "debian/source/format")


def in_git():
    return os.path.exists(os.path.join(SRC, ".git"))


def tree_products():
    """What dpkg-buildpackage run in the tree itself would leave there and
    beside it, as found now."""
    out = set()
    for pat in ("debian/files", "debian/.debhelper", "debian/debhelper-build-stamp",
                "debian/ratelimitd", "debian/ratelimitd-dbgsym", "debian/*.substvars",
                "debian/*.debhelper.log", "debian/*.debhelper", "debian/tmp",
                "../ratelimitd_*", "../ratelimitd-dbgsym_*"):
        for p in glob.glob(os.path.join(SRC, pat)):
            out.add((os.path.normpath(p), os.lstat(p).st_mtime_ns))
    return out


def copy_tree(dest):
    """The tree as a fresh checkout has it, with the changes not committed yet."""
    if not in_git():
        shutil.copytree(SRC, dest, symlinks=True, ignore=shutil.ignore_patterns(*BUILD_DIRS))
        return
    out = must(["git", "-C", SRC, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
               "git ls-files")
    for rel in filter(None, out.split("\0")):
        src = os.path.join(SRC, rel)
        if not os.path.lexists(src):  # deleted, not committed yet
            continue
        dst = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)


def t_rules_test():
    with open(os.path.join(SRC, "debian", "rules")) as f:
        rules = f.read()
    m = re.search(r"^override_dh_auto_test:\n\tdh_auto_test -- TESTS='\$\$\((\w+)\)'$", rules, re.M)
    check(m is not None, "debian/rules: no override_dh_auto_test running TESTS='$$(VAR)'")
    with open(os.path.join(SRC, "Makefile.am")) as f:
        am = f.read()
    check(re.search(r"^%s = \\$" % m.group(1), am, re.M),
          "debian/rules' tests, $(%s), are not a list of Makefile.am", m.group(1))


def t_build():
    need("dpkg-buildpackage", "dpkg-dev")
    need("dh", "debhelper")
    need("git", "git")
    before = tree_products()
    S.work = tempfile.mkdtemp(prefix="rl-deb-")
    tree = os.path.join(S.work, "%s-%s" % (PKG, configure_version()))
    copy_tree(tree)
    # nocheck: the unit tests that debian/rules runs at build time are
    # phase 1's (and they double the build); t_rules_test checks what that
    # target runs.
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck parallel=%d" % (os.cpu_count() or 1))
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    t0 = time.monotonic()
    rc, out = run(["dpkg-buildpackage", "-us", "-uc", "-b"], cwd=tree, env=env,
                  timeout=BUILD_TIMEOUT)
    took = time.monotonic() - t0
    with open(os.path.join(S.work, "build.log"), "w") as f:
        f.write(out)
    check(rc == 0, "dpkg-buildpackage exited %d; the end of its output:\n%s", rc, out[-6000:])
    print("# dpkg-buildpackage -us -uc -b: %.0f s (DEB_BUILD_OPTIONS=nocheck)" % took)
    debs = glob.glob(os.path.join(S.work, "%s_*.deb" % PKG))
    eq(len(debs), 1, "ratelimitd_*.deb built (%s)" % debs)
    S.deb = debs[0]
    changes = glob.glob(os.path.join(S.work, "%s_*.changes" % PKG))
    eq(len(changes), 1, "ratelimitd_*.changes")
    S.changes = changes[0]
    made = sorted(p for p, _ in tree_products() - before)
    check(not made, "the build wrote in the tree or beside it: %s", made)


def t_lintian():
    need("lintian", "lintian")
    rc, out = run(["lintian", "--info", "--fail-on", "error,warning", S.changes], timeout=600)
    tags = [ln for ln in out.splitlines() if re.match(r"^[A-Z]: ", ln)]
    for ln in tags:
        print("# lintian: " + ln)
    if not tags:
        print("# lintian: no tag")
    bad = [ln for ln in tags if ln[0] in "EW"]
    check(not bad and rc == 0, "lintian exited %d, errors and warnings:\n%s\n%s",
          rc, "\n".join(bad), out[-3000:])


def t_contents():
    out = must(["dpkg-deb", "-c", S.deb], "dpkg -c")
    paths = []
    for ln in out.splitlines():
        print("# " + ln)
        name = ln.split(None, 5)[5].split(" -> ")[0]
        paths.append(os.path.normpath(name.lstrip(".")) if name != "./" else "/")
    S.contents = [p for p in paths if p != "/"]
    for want in (BIN, CONF, UNIT, LINK, "/usr/share/man/man8/ratelimitd.8.gz",
                 "/usr/share/man/man5/ratelimitd.json.5.gz",
                 "/usr/share/doc/ratelimitd/copyright",
                 "/usr/share/doc/ratelimitd/examples/ratelimitd.json"):
        check(want in S.contents, "%s is not in the package", want)
    check("/usr/bin/ratelimit" not in S.contents, "/usr/bin/ratelimit in the package")
    local = [p for p in S.contents if p.startswith("/usr/local")]
    check(not local, "paths under /usr/local: %s", local)
    conffiles = must(["dpkg-deb", "--info", S.deb, "conffiles"], "dpkg-deb --info conffiles")
    eq(conffiles.split(), [CONF], "the conffiles")
    depends = must(["dpkg-deb", "-f", S.deb, "Depends"], "dpkg-deb -f Depends")
    check(re.search(r"(^|, )adduser($|[ ,])", depends.strip()), "Depends lacks adduser: %s", depends)
    with open(os.path.join(SRC, "systemd", "ratelimitd.service")) as f:
        check("DynamicUser=yes" in f.read(), "systemd/ratelimitd.service lost DynamicUser=yes: "
              "debian/rules' sed replaces it")


def t_install():
    check(os.geteuid() == 0, "apt-get install needs root")
    st = status()
    check(st in ("", "unknown ok not-installed"),
          "a ratelimitd package is on this machine already (%s): purge it first", st)
    S.existed = {p for p in S.contents if os.path.lexists(p)}
    S.user_existed = user_exists()
    S.installed = True
    deb = "./" + os.path.basename(S.deb)
    must(APT + ["install", deb], "apt-get install", cwd=S.work, env=APT_ENV, timeout=APT_TIMEOUT)
    eq(status(), "install ok installed", "dpkg's status")
    u = pwd.getpwnam(USER)
    check(0 < u.pw_uid < 1000, "uid %d is not a system uid", u.pw_uid)
    eq((u.pw_dir, u.pw_shell), ("/nonexistent", "/usr/sbin/nologin"), "the user's home and shell")
    check(os.path.islink(WANTS), "%s: no link (the service is not enabled)", WANTS)
    check(dsh_records(), "no record of the enablement in %s", DSH)
    S.listed = [p for p in must(["dpkg", "-L", PKG], "dpkg -L").splitlines() if p not in ("", "/.")]
    eq(sorted(set(S.listed)), sorted(set(S.contents)), "dpkg -L (against dpkg -c)")
    missing = [p for p in S.listed if not os.path.lexists(p)]
    check(not missing, "dpkg -L's paths not on the machine: %s", missing)
    eq(os.path.realpath(LINK), BIN, "where the ratelimit link points")


def t_config():
    need("runuser", "util-linux")
    out = must(["runuser", "-u", USER, "--", BIN, "-t", "-c", CONF],
               "the installed -t, as the user %s" % USER)
    check("configuration OK" in out, "ratelimitd -t said: %s", out)
    bad = H.write_config('{"listen": "127.0.0.1:8080", "policies": [{"name": "x"}]}')
    rc, out = run([BIN, "-t", "-c", bad])
    check(rc != 0, "the installed -t accepted a policy without limits:\n%s", out)


def t_daemon():
    with open(CONF) as f:
        prefix = json.load(f)["redis"]["key_prefix"]
    with H.Redis(topology="standalone") as r, \
            H.Daemon(None, redis=r, binary=BIN, args=["-c", CONF]) as d:
        key = "deb-%d" % os.getpid()
        got = [H.post(d, {"key": key, "path": "/demo/x", "method": "GET"})[0] for _ in range(4)]
        eq(got, [200, 200, 200, 429], "POST /check on /demo, the installed file's limit of 3")
        # docs/API.md, "Redis keys": {<key_prefix><policy>:<type>:<identity>}:<tag>:<window_ms>
        want = "{%sdemo:k:%s}:fw:60000" % (prefix, key)
        keys = r.server.cmd("KEYS", "{%s*" % prefix)
        check(want in keys, "no %s in Redis: %s", want, keys)


def t_envoy_link():
    with H.Redis(topology="standalone") as r:
        root = os.path.join(H.tmpdir(), "runtime")
        os.makedirs(os.path.join(root, "ratelimit", "config"), exist_ok=True)
        port, grpc_port = H.free_port(), H.free_port()
        env = {"PORT": port, "GRPC_PORT": grpc_port, "REDIS_SOCKET_TYPE": "tcp",
               "REDIS_URL": "127.0.0.1:%d" % r.port, "RUNTIME_ROOT": root,
               "RUNTIME_SUBDIRECTORY": "ratelimit"}
        with H.Daemon(None, env=env, exact_env=True, binary=LINK, listen=False, port=port,
                      ready=True):
            st, _, body = H.request(port, "GET", "/healthcheck")
            eq((st, body), (200, "OK"), "GET /healthcheck on $PORT")


def t_unit():
    sa = need("systemd-analyze", "systemd")
    need("man", "man-db")
    rc, out = run([sa, "verify", UNIT])
    check(rc == 0 and out.strip() == "", "systemd-analyze verify exit %d:\n%s", rc, out)
    with open(UNIT) as f:
        text = f.read()
    for line in ("ExecStart=%s -c %s" % (BIN, CONF), "ExecStartPre=%s -t -c %s" % (BIN, CONF),
                 "User=ratelimitd", "Group=ratelimitd"):
        check(re.search("^%s$" % re.escape(line), text, re.M), "no line %r in %s", line, UNIT)
    check("DynamicUser" not in re.sub(r"(?m)^#.*$", "", text), "DynamicUser set in %s", UNIT)
    rc, out = run([sa, "security", "--offline=yes", "--no-pager", UNIT],
                  env=dict(os.environ, SYSTEMD_COLORS="0"))
    m = re.search(r"Overall exposure level for \S+: ([0-9]+(?:\.[0-9]+)?)", out)
    check(m is not None, "no exposure in systemd-analyze security's output (exit %d):\n%s",
          rc, out[-2000:])
    print("# systemd-analyze security %s: exposure %s" % (UNIT, m.group(1)))
    check(float(m.group(1)) <= MAX_EXPOSURE, "exposure %s > %.1f", m.group(1), MAX_EXPOSURE)


def t_conffile_kept():
    with open(CONF) as f:
        cfg = json.load(f)
    cfg["listen"] = "127.0.0.1:8089"
    edited = json.dumps(cfg, indent=2) + "\n"
    with open(CONF, "w") as f:
        f.write(edited)
    must(APT + ["install", "--reinstall", "./" + os.path.basename(S.deb)], "apt-get --reinstall",
         cwd=S.work, env=APT_ENV, timeout=APT_TIMEOUT)
    with open(CONF) as f:
        eq(f.read(), edited, "%s after a reinstall" % CONF)
    check(not glob.glob(CONF + ".dpkg-*"), "dpkg left %s", glob.glob(CONF + ".dpkg-*"))


def t_purge():
    must(APT + ["purge", PKG], "apt-get purge", env=APT_ENV, timeout=APT_TIMEOUT)
    check(status() in ("", "unknown ok not-installed"), "dpkg's status after purge: %s", status())
    left = [p for p in S.listed if p not in S.existed and os.path.lexists(p)]
    check(not left, "left after purge: %s", left)
    for p in ("/etc/ratelimitd", WANTS, "/run/ratelimitd"):
        check(not os.path.lexists(p), "%s left after purge", p)
    check(not dsh_records(), "deb-systemd-helper's records left: %s", dsh_records())
    info = glob.glob("/var/lib/dpkg/info/%s.*" % PKG)
    check(not info, "dpkg's files left: %s", info)
    check(user_exists(), "the user %s was removed at purge (Debian keeps it)", USER)


CASES = [
    ("debian/changelog's version is configure.ac's", t_version),
    ("debian/rules runs Makefile.am's unit tests at build time", t_rules_test),
    ("dpkg-buildpackage -us -uc -b from a clean copy of the tree", t_build),
    ("lintian: no error, no warning", t_lintian),
    ("the package's files, conffile and Depends", t_contents),
    ("apt-get install ./ratelimitd_*.deb: installed, the user made, the service enabled", t_install),
    ("the installed ratelimitd -t accepts the installed config as the user ratelimitd", t_config),
    ("the installed daemon and config against a real redis-server: POST /check", t_daemon),
    ("/usr/libexec/ratelimitd/ratelimit: envoyproxy/ratelimit's mode", t_envoy_link),
    ("the installed unit: systemd-analyze verify and security", t_unit),
    ("an edited conffile survives a reinstall", t_conffile_kept),
    ("apt-get purge: nothing left but the user", t_purge),
]
# What a case needs done before it: a failure there fails it unrun.
NEEDS = {t_lintian: t_build, t_contents: t_build, t_install: t_contents}
INSTALLED = (t_config, t_daemon, t_envoy_link, t_unit, t_conffile_kept, t_purge)


def main():
    t = PackageTests(timeout=BUILD_TIMEOUT + 4 * APT_TIMEOUT)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)
    done = set()
    try:
        for name, fn in CASES:
            if t.listing or not t.wanted(name):
                t.run(name, fn)  # names it, or passes over it
                continue
            pre = t_install if fn in INSTALLED else NEEDS.get(fn)
            if pre is not None and pre not in done:
                t.fail(name, "not run: %s did not pass (or was not selected)" % pre.__name__)
                continue
            failed = t.failed
            t.run(name, fn)
            if t.failed == failed:
                done.add(fn)
    finally:
        restore()
    sys.exit(t.finish())


if __name__ == "__main__":
    main()
