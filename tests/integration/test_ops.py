#!/usr/bin/env python3
"""The operations files, checked with the tools of this machine.

- systemd/ratelimitd.service: `systemd-analyze verify` (with ExecStart pointed
  at the built binary and Documentation= finding man/ratelimitd.8: no complaint
  at all; as shipped: no complaint but those two), and
  `systemd-analyze security --offline=yes` exposure <= 2.0.
- Dockerfile (static): multi-stage, scripts/test in the build stage, a non-root
  USER and a HEALTHCHECK in the final stage.
- man/ratelimitd.8, man/ratelimitd.json.5: render without a warning (groff
  -ww, man -l); have their sections; document every flag, variable and every
  option of src/config.c's table (type, default, bounds, restart-only); their
  JSON examples pass `ratelimitd -t`.
- conf/*.json pass `ratelimitd -t`.
- deploy/: every YAML file parses; the Kubernetes sidecar is what its README
  says; its ConfigMap's ratelimitd.json passes -t; the reloader's script sends
  SIGHUP to the daemon on a kubelet-style ConfigMap update.

A missing tool (systemd-analyze, groff, man, a YAML parser) is a failure, never
a skip.  Debian packages: systemd, groff-base, man-db, python3-yaml.
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

SRC = H.RL_SRCDIR
UNIT = os.path.join(SRC, "systemd", "ratelimitd.service")
MAN8 = os.path.join(SRC, "man", "ratelimitd.8")
MAN5 = os.path.join(SRC, "man", "ratelimitd.json.5")
MAX_EXPOSURE = 2.0


def need(tool, package):
    path = shutil.which(tool) or (os.path.join("/usr/bin", tool)
                                  if os.access(os.path.join("/usr/bin", tool), os.X_OK) else None)
    if path is None:
        raise H.Fail("%s not found: it is required (Debian package %s)" % (tool, package))
    return path


def run(argv, env=None, timeout=60, cwd=None):
    r = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, cwd=cwd,
                       stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def scratch(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=H.tmpdir())


# ------------------------------------------------------------------ systemd

def unit_copy(with_built_binary):
    """The unit in a scratch dir with a MANPATH holding our man pages."""
    d = scratch("unit-")
    for sec, page in (("man8", MAN8), ("man5", MAN5)):
        os.makedirs(os.path.join(d, "man", sec))
        shutil.copy(page, os.path.join(d, "man", sec))
    with open(UNIT) as f:
        text = f.read()
    if with_built_binary:
        check("/usr/local/bin/ratelimitd" in text, "the unit no longer runs /usr/local/bin/ratelimitd")
        text = text.replace("/usr/local/bin/ratelimitd", os.path.abspath(H.RATELIMITD))
    path = os.path.join(d, "ratelimitd.service")
    with open(path, "w") as f:
        f.write(text)
    env = dict(os.environ, MANPATH=os.path.join(d, "man"), SYSTEMD_PAGER="", SYSTEMD_COLORS="0")
    return path, env


def t_verify_built():
    sa = need("systemd-analyze", "systemd")
    need("man", "man-db")
    path, env = unit_copy(True)
    rc, out, err = run([sa, "verify", path], env=env)
    text = (out + err).strip()
    check(rc == 0 and text == "", "systemd-analyze verify exit %d:\n%s", rc, text)


def t_verify_shipped():
    sa = need("systemd-analyze", "systemd")
    rc, out, err = run([sa, "verify", UNIT], env=dict(os.environ, MANPATH="/nonexistent"))
    known = (re.compile(r"Command /usr/local/bin/ratelimitd is not executable"),
             re.compile(r"Command 'man ratelimitd\(8\)' failed"))
    other = [l for l in (out + err).splitlines()
             if l.strip() and not any(k.search(l) for k in known)]
    check(not other, "systemd-analyze verify complained of more than the missing binary "
          "and man page:\n%s", "\n".join(other))


def t_security():
    sa = need("systemd-analyze", "systemd")
    rc, out, err = run([sa, "security", "--offline=yes", "--no-pager", UNIT],
                       env=dict(os.environ, SYSTEMD_COLORS="0"))
    m = re.search(r"Overall exposure level for \S+: ([0-9]+(?:\.[0-9]+)?)", out + err)
    check(m is not None, "no \"Overall exposure level\" in the output (exit %d):\n%s",
          rc, (out + err)[-2000:])
    score = float(m.group(1))
    print("# systemd-analyze security: overall exposure %.1f (at most %.1f)" % (score, MAX_EXPOSURE))
    check(score <= MAX_EXPOSURE, "exposure %.1f > %.1f:\n%s", score, MAX_EXPOSURE,
          "\n".join(l for l in out.splitlines() if l.startswith("✗"))[:3000])


def unit_settings(name):
    with open(UNIT) as f:
        return [l.split("=", 1)[1].strip() for l in f.read().splitlines() if l.startswith(name + "=")]


def t_unit_runtime_directory():
    # ProtectSystem=strict leaves /run read-only: the documented admin socket
    # needs a directory of its own there, which systemd makes
    dirs = unit_settings("RuntimeDirectory")
    eq(len(dirs), 1, "RuntimeDirectory= lines in the unit")
    run_dir = "/run/" + dirs[0]
    documented = set()
    for doc in (os.path.join(SRC, "README.md"), os.path.join(SRC, "docs/API.md"),
                os.path.join(SRC, "conf", "login-protection.json")):
        with open(doc) as f:
            documented |= set(re.findall(r"unix:(/run/[\w./-]+\.sock)", f.read()))
    check(documented, "no unix:/run/... admin socket documented")
    for path in documented:
        eq(os.path.dirname(path), run_dir, "the directory of the documented socket %s" % path)
    # what happens without it: the daemon cannot bind the socket (exit 2), and
    # -t cannot see that; with the directory there, the admin API is served
    d = scratch("rundir-")
    missing = os.path.join(d, "ratelimitd", "admin.sock")
    cfg = H.write_config({"admin_listen": "unix:" + missing, "policies": []})
    rc, out, err = H.run_cli(["-t", "-c", cfg])
    eq(rc, 0, "-t with the socket's directory missing (%s)" % (out + err))
    with H.Daemon(None, backend="memory", args=["-c", cfg], wait=False) as dm:
        eq(dm.wait(10), 2, "exit status when the admin socket's directory does not exist")
        check("admin" in dm.log(), "the exit does not say what failed:\n%s", dm.log())
    os.mkdir(os.path.dirname(missing), 0o750)
    with H.Daemon(None, backend="memory", args=["-c", cfg]) as dm:
        check(os.path.exists(missing), "no admin socket at %s", missing)


def reload_commands(binary, config, pid):
    """The unit's ExecReload= command lines, in order, as argv lists with the
    built binary, a test config and the daemon's pid put in."""
    cmds = []
    for line in unit_settings("ExecReload"):
        check(not line.startswith(("-", "@", "+", "!", ":")), "ExecReload=%s: a prefix this test does not "
              "model", line)
        line = line.replace("/usr/local/bin/ratelimitd", binary).replace(
            "/etc/ratelimitd/ratelimitd.json", config).replace("$MAINPID", str(pid))
        cmds.append(shlex.split(line))
    return cmds


def reloads(port):
    st, _, text = H.request(port, "GET", "/metrics")
    eq(st, 200, "GET /metrics")
    return tuple(int(re.search(r'^ratelimitd_config_reloads_total\{result="%s"\} (\d+)$' % r, text, re.M).group(1))
                 for r in ("ok", "failed"))


def t_unit_reload_dry_run():
    """systemctl reload as the unit has systemd run it: each ExecReload= in
    turn, the first failure failing the reload (and skipping the rest)."""
    def pol(name):
        return {"name": name, "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "1m"}]}
    cfgpath = H.write_config({"identity": ["body"], "policies": [pol("first")]})
    with H.Daemon(None, backend="memory", args=["-c", cfgpath]) as d:
        def run_reload():
            for argv in reload_commands(os.path.abspath(H.RATELIMITD), cfgpath, d.proc.pid):
                rc, out, err = run(argv)
                if rc != 0:
                    return rc, argv, out + err
            return 0, None, ""

        def served(name):
            return H.request(d.port, "POST", "/check", {"key": "k", "policy": name})[0] == 200

        check(len(reload_commands("x", "y", 1)) >= 2, "ExecReload= does not check the file before the signal")
        before = reloads(d.port)
        for bad, why in (("{ broken", "not JSON"),
                         (json.dumps({"policies": [pol("second")], "workers": 100000}), "workers out of range")):
            with open(cfgpath, "w") as f:
                f.write(bad)
            rc, argv, text = run_reload()
            check(rc != 0, "a file with a problem (%s): the reload succeeded", why)
            eq(argv[0], os.path.abspath(H.RATELIMITD), "the ExecReload= that failed (%s)" % why)
            check(cfgpath in text, "the failed reload does not name the file (%s): %r", why, text)
            time.sleep(0.3)
            eq(reloads(d.port), before, "the daemon's reloads after a refused systemctl reload (%s)" % why)
            check(served("first") and not served("second"), "the running configuration changed (%s)", why)
        with open(cfgpath, "w") as f:
            json.dump({"identity": ["body"], "policies": [pol("first"), pol("second")]}, f)
        rc, argv, text = run_reload()
        eq(rc, 0, "the reload of a good file (%s: %s)" % (argv, text))
        H.wait_for(lambda: served("second"), "the good file served after the reload", 10, interval=0.05)
        eq(reloads(d.port), (before[0] + 1, before[1]), "the daemon's reloads after a good one")


# ---------------------------------------------------------------- Dockerfile

def dockerfile_stages():
    """[(from_line, [instructions])] with continuation lines joined."""
    with open(os.path.join(SRC, "Dockerfile")) as f:
        raw = f.read()
    lines, cur = [], ""
    for line in raw.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        lines.append((cur + s).strip())
        cur = ""
    stages = []
    for l in lines:
        word = l.split(None, 1)[0].upper()
        if word == "FROM":
            stages.append((l, []))
        elif stages:
            stages[-1][1].append(l)
    return stages


def instr(stage, name):
    return [l.split(None, 1)[1] if " " in l else "" for l in stage[1]
            if l.split(None, 1)[0].upper() == name]


def t_docker_multistage():
    st = dockerfile_stages()
    check(len(st) >= 2, "%d stage(s): the Dockerfile is not multi-stage", len(st))
    m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", st[0][0], re.I)
    check(m is not None, "the first stage has no name: %r", st[0][0])
    copies = [c for c in instr(st[-1], "COPY") if c.startswith("--from=")]
    check(any(c.startswith("--from=%s " % m.group(1)) for c in copies),
          "the final stage copies nothing from the %r stage", m.group(1))


def t_docker_tests():
    st = dockerfile_stages()
    runs = instr(st[0], "RUN")
    check(any(re.search(r"(^|[\s;&|])scripts/test(\s|$|;|&)", r) for r in runs),
          "the build stage does not run scripts/test: %r", runs)


def t_docker_runtime_libs():
    """The final stage installs the Debian package of every shared library the
    built daemon needs (ldd + dpkg -S), so the image's binary can start."""
    out = subprocess.run(["ldd", H.RATELIMITD], capture_output=True, text=True, timeout=30).stdout
    libs = sorted({l.split()[0] for l in out.splitlines()
                   if "=>" in l and not l.split()[0].startswith(("libc.so", "linux-vdso", "ld-linux"))})
    check(libs, "ldd found no library of %s", H.RATELIMITD)
    runs = " ".join(instr(dockerfile_stages()[-1], "RUN"))
    missing = []
    for lib in libs:
        path = next(l.split("=>")[1].split()[0] for l in out.splitlines() if l.split()[0] == lib)
        real = os.path.realpath(path)
        owner = None
        for cand in (path, real, "/usr" + path if path.startswith("/lib") else path):
            r = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                owner = r.stdout.split(":")[0].strip()
                break
        check(owner, "no Debian package owns %s (%s)", lib, path)
        # the C library is in every base image; a sanitizer build links its
        # runtimes, which the shipped (plain) binary does not
        if owner in ("libc6", "libgcc-s1") or (H.SANITIZED and re.match(
                r"lib(asan|ubsan|lsan|stdc\+\+)\d", owner)):
            continue
        if not re.search(r"(^|\s)%s(\s|$)" % re.escape(owner), runs):
            missing.append("%s (%s)" % (owner, lib))
    check(not missing, "the final stage does not install %s", ", ".join(missing))


def t_docker_user():
    st = dockerfile_stages()
    users = instr(st[-1], "USER")
    check(users, "the final stage has no USER: it would run as root")
    user = users[-1].split(":")[0].strip()
    check(user not in ("root", "0", ""), "the final stage's USER is %r", user)


def t_docker_envoy_command():
    """Envoy Gateway runs the image as /bin/ratelimit with envoyproxy/ratelimit's
    environment and no arguments (docs/envoy.md): the final stage links
    /bin/ratelimit to the daemon it copies, and sets no RATELIMITD_CONFIG (a
    file would win over that environment: its redis.url over REDIS_URL);
    the sample configuration comes as the default arguments."""
    st = dockerfile_stages()[-1]
    copied = [c.split()[-1] for c in instr(st, "COPY") if c.split()[-1].endswith("/ratelimitd")]
    check(copied, "the final stage copies no ratelimitd")
    links = [r for r in instr(st, "RUN")
             if re.search(r"ln -s %s /bin/ratelimit(\s|$)" % re.escape(copied[0]), r)]
    check(links, "no /bin/ratelimit linked to %s: %r", copied[0], instr(st, "RUN"))
    env = " ".join(instr(st, "ENV"))
    check("RATELIMITD_CONFIG" not in env, "the image sets RATELIMITD_CONFIG: %r", env)
    eq([json.loads(e) for e in instr(st, "ENTRYPOINT")][-1], [copied[0]], "ENTRYPOINT")
    cmd = json.loads(instr(st, "CMD")[-1])
    eq(cmd[0], "-c", "the sample configuration as CMD's argument")
    src = [c.split()[0] for c in instr(st, "COPY") if c.split()[-1] == cmd[1]]
    check(src, "CMD's %s is not copied into the image", cmd[1])
    # the sample the image starts with is a valid configuration
    rc, _, err = H.run_cli(["-t", "-c", os.path.join(SRC, src[0])])
    eq(rc, 0, "ratelimitd -t -c %s (%s)" % (src[0], err))


def t_docker_healthcheck():
    st = dockerfile_stages()
    hc = instr(st[-1], "HEALTHCHECK")
    check(hc, "the final stage has no HEALTHCHECK")
    check("CMD" in hc[-1] and not hc[-1].strip().upper().startswith("NONE"),
          "HEALTHCHECK %r has no command", hc[-1])


# --------------------------------------------------------------- man pages

def t_render(page):
    groff = need("groff", "groff-base")
    man = need("man", "man-db")
    rc, out, err = run([groff, "-man", "-Tutf8", "-ww", "-z", page])
    check(rc == 0 and err.strip() == "", "groff -man -ww exit %d:\n%s", rc, err.strip())
    rc, out, err = run([man, "-l", page], env=dict(os.environ, MANPAGER="cat", PAGER="cat",
                                                   MANWIDTH="80"))
    check(rc == 0 and err.strip() == "", "man -l exit %d:\n%s", rc, err.strip())
    check(len(out.splitlines()) > 50, "man -l printed %d lines", len(out.splitlines()))


ESCAPES = [("\\-", "-"), ("\\e", "\\"), ("\\&", ""), ("\\(aq", "'"), ("\\(lq", '"'),
           ("\\(rq", '"'), ("\\(bu", "*"), ("\\(em", "--"), ("\\%", ""), ("\\ ", " ")]


def unescape(s):
    out, i = [], 0
    while i < len(s):
        for a, b in ESCAPES:
            if s.startswith(a, i):
                out.append(b)
                i += len(a)
                break
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def roff_args(s):
    args, i = [], 0
    while i < len(s):
        if s[i] in " \t":
            i += 1
            continue
        if s[i] == '"':
            i += 1
            a = []
            while i < len(s):
                if s[i] == '"':
                    if s.startswith('""', i):
                        a.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                a.append(s[i])
                i += 1
            args.append("".join(a))
        else:
            j = i
            while j < len(s) and s[j] not in " \t":
                j += 1
            args.append(s[i:j])
            i = j
    return args


def man_text_line(line):
    """One source line as text (None: no text), and whether it ends in \\c."""
    if line.startswith('.\\"'):
        return None, False
    if line.startswith("."):
        name, _, rest = line[1:].partition(" ")
        if name in ("B", "I", "SM", "SB"):
            text = " ".join(roff_args(rest))
        elif name in ("BR", "RB", "IR", "RI", "BI", "IB"):
            text = "".join(roff_args(rest))
        else:
            return None, False
    else:
        text = line
    joined = text.endswith("\\c")
    if joined:
        text = text[:-2]
    return unescape(text), joined


def man_blocks(page):
    """[(heading, tag, text)] for every .TP of the page; heading is the .SH/.SS."""
    with open(page) as f:
        lines = f.read().splitlines()
    blocks, heading, cur, want_tag, glue = [], "", None, False, False

    def add(text):
        nonlocal glue
        if cur is None:
            return
        key = "tag" if want_tag else "body"
        cur[key] = cur[key] + ("" if glue or not cur[key] else " ") + text

    for line in lines:
        if line.startswith((".SH", ".SS")):
            heading = " ".join(roff_args(line[3:]))
            cur, want_tag = None, False
            continue
        if line.startswith(".TP"):
            cur = {"heading": heading, "tag": "", "body": ""}
            blocks.append(cur)
            want_tag, glue = True, False
            continue
        if line.startswith((".PP", ".IP", ".LP", ".P ")) or line == ".P":
            cur, want_tag = None, False
            continue
        text, joined = man_text_line(line)
        if text is None:
            continue
        add(text)
        glue = joined
        if want_tag and not joined:
            want_tag = False
    return [(b["heading"], b["tag"].strip(), (b["tag"] + " " + b["body"]).strip()) for b in blocks]


def section_names(page):
    with open(page) as f:
        return [" ".join(roff_args(l[3:])) for l in f.read().splitlines() if l.startswith(".SH")]


def t_sections(page, want):
    have = section_names(page)
    missing = [s for s in want if s not in have]
    check(not missing, "%s lacks the section(s) %s (has %s)", os.path.basename(page), missing, have)


def t_man8_sections():
    t_sections(MAN8, ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "SIGNALS",
                      "EXIT STATUS", "FILES", "HTTP API", "EXAMPLES", "SEE ALSO"])
    with open(MAN8) as f:
        text = f.read()
    check(re.search(r"^\.BR ratelimitd\.json \(5\)", text, re.M), "SEE ALSO lacks ratelimitd.json(5)")


def t_man5_sections():
    t_sections(MAN5, ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "THE REDIS OBJECT", "POLICIES",
                      "THE IDENTITY CHAIN", "FAILURE MODES", "EXAMPLES", "SEE ALSO"])
    with open(MAN5) as f:
        text = f.read()
    for ss in ("THE MATCH OBJECT", "THE LIMIT OBJECT", "THE OVERRIDE OBJECT"):
        check(".SS %s" % ss in text, "no subsection %s", ss)
    check(re.search(r"^\.BR forwarded_header\b|^\.B forwarded_header$", text, re.M),
          "forwarded_header is not documented as an option")


def t_man8_flags():
    rc, out, err = H.run_cli(["-h"])
    eq(rc, 0, "ratelimitd -h exit code")
    flags = sorted(set(re.findall(r"^\s+(-[A-Za-z])\s", out, re.M)))
    check(len(flags) >= 8, "found only %r in -h", flags)
    tags = [t for h, t, _ in man_blocks(MAN8) if h == "OPTIONS"]
    missing = [f for f in flags if not any(t.split()[0] == f for t in tags if t)]
    check(not missing, "OPTIONS of ratelimitd(8) lacks %s (has %s)", missing, tags)
    with open(os.path.join(SRC, "src", "main.c")) as f:
        envs = sorted(set(re.findall(r'"(RATELIMITD_[A-Z_]+)"', f.read())))
    check(envs, "no RATELIMITD_* variable found in src/main.c")
    etags = [t for h, t, _ in man_blocks(MAN8) if h == "ENVIRONMENT"]
    missing = [e for e in envs if e not in etags]
    check(not missing, "ENVIRONMENT of ratelimitd(8) lacks %s", missing)


# --- src/config.c's option table (read by harness.config_tables)

def render_default(text):
    v = json.loads(text)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, list):
        return json.dumps(v)
    return str(v)


SECTIONS = {"top_fields": ("OPTIONS", ""), "redis_fields": ("THE REDIS OBJECT", "redis."),
            "sentinel_fields": ("THE REDIS OBJECT", "redis.sentinel."),
            "tls_fields": ("THE REDIS OBJECT", "redis.tls."),
            "policy_fields": ("POLICIES", ""), "match_fields": ("THE MATCH OBJECT", ""),
            "limit_fields": ("THE LIMIT OBJECT", ""), "override_fields": ("THE OVERRIDE OBJECT", ""),
            "http_fields": ("THE HTTP OBJECT", "http."),
            # the listener's options, and those deciding the calls
            "rls_fields": (("THE RLS OBJECT", "ENVOY'S RATE LIMIT SERVICE"), "rls."),
            "rls_tls_fields": ("THE RLS OBJECT", "rls.tls."),
            "header_names_fields": (("THE RLS OBJECT", "ENVOY'S RATE LIMIT SERVICE"),
                                    "rls.header_names."),
            # rules over xDS: where the rules come from, beside rls.config
            "xds_fields": ("ENVOY'S RATE LIMIT SERVICE", "rls.xds."),
            "xds_tls_fields": ("ENVOY'S RATE LIMIT SERVICE", "rls.xds.tls.")}


def t_man5_options():
    tables = H.config_tables()
    check(set(SECTIONS) == set(tables), "src/config.c's tables are %s, this test knows %s: "
          "document the new one and map it to its section in SECTIONS",
          sorted(tables), sorted(SECTIONS))
    blocks = man_blocks(MAN5)
    problems, nfields = [], 0
    for table, (heading, prefix) in SECTIONS.items():
        for f in tables[table]:
            nfields += 1
            name = prefix + f["name"]
            found = [text for h, tag, text in blocks
                     if h in (heading if isinstance(heading, tuple) else (heading,))
                     and name in [t.strip() for t in tag.split(",")]]
            if not found:
                problems.append("%s: no entry in section %s" % (name, heading))
                continue
            text = found[0]
            if f["default"] is not None:
                want = "default " + render_default(f["default"])
                if want not in text:
                    problems.append("%s: the default should read %r" % (name, want))
            if f["type"] in ("SCHEMA_INT", "SCHEMA_DURATION", "SCHEMA_SIZE") and (f["min"], f["max"]) != (0, 0):
                ok = any("%s..%s" % (a, b) in text for a in H.config_renderings(f["min"], f["type"])
                         for b in H.config_renderings(f["max"], f["type"]))
                if not ok:
                    problems.append("%s: the bounds %d..%d are not given" % (name, f["min"], f["max"]))
            if table in ("top_fields", "redis_fields", "sentinel_fields", "tls_fields",
                         "http_fields", "rls_fields", "rls_tls_fields", "header_names_fields",
                         "xds_fields", "xds_tls_fields"):
                if f["restart"] != ("restart-only" in text):
                    problems.append("%s: restart-only is %s in the table" % (name, f["restart"]))
            if f["required"] and "required" not in text:
                problems.append("%s: not said to be required" % name)
            for n in f["names"] or []:
                if not re.search(r"(^|[\s\"(,:])%s($|[\s\",.;)])" % re.escape(n), text):
                    problems.append("%s: the value %r is not named" % (name, n))
    check(nfields > 25, "only %d fields read from src/config.c", nfields)
    check(not problems, "%d problem(s):\n%s", len(problems), "\n".join(problems))


def man_examples(page):
    with open(page) as f:
        lines = f.read().splitlines()
    out, cur = [], None
    for l in lines:
        if l.startswith(".EX"):
            cur = []
        elif l.startswith(".EE"):
            if cur and cur[0].strip() == "{":      # a JSON object, not the KEYS line
                out.append("\n".join(unescape(x) for x in cur))
            cur = None
        elif cur is not None:
            cur.append(l)
    return out


def t_man5_examples():
    ex = man_examples(MAN5)
    check(len(ex) >= 3, "found %d JSON examples", len(ex))
    for i, text in enumerate(ex):
        path = H.write_config(text, name="man5-example-%d-" % i)
        rc, out, err = H.run_cli(["-t", "-c", path])
        check(rc == 0, "example %d: -t exit %d:\n%s\n%s", i + 1, rc, err.strip(), text)


# --------------------------------------------------------------------- conf

def t_conf():
    files = sorted(glob.glob(os.path.join(SRC, "conf", "*.json")))
    check(files, "no conf/*.json")
    for p in files:
        rc, out, err = H.run_cli(["-t", "-c", p])
        check(rc == 0 and "configuration OK" in out, "%s: -t exit %d:\n%s",
              os.path.relpath(p, SRC), rc, err.strip())


# ---------------------------------------------------------------------- YAML

def yaml_load_all(path):
    try:
        import yaml
        with open(path) as f:
            return list(yaml.safe_load_all(f))
    except ImportError:
        pass
    for py in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(py, os.X_OK) and os.path.realpath(py) != os.path.realpath(sys.executable):
            rc, out, err = run([py, "-c", "import json, sys, yaml; print(json.dumps(list("
                                "yaml.safe_load_all(open(sys.argv[1])))))", path])
            if rc == 0:
                return json.loads(out)
            if "No module named" not in err:
                raise H.Fail("%s: %s" % (os.path.relpath(path, SRC), err.strip().splitlines()[-1]))
    raise H.Fail("no YAML parser: install the Debian package python3-yaml")


def t_yaml():
    files = sorted(glob.glob(os.path.join(SRC, "deploy", "**", "*.yaml"), recursive=True) +
                   glob.glob(os.path.join(SRC, "deploy", "**", "*.yml"), recursive=True))
    check(len(files) >= 6, "found only %d YAML files under deploy/", len(files))
    for p in files:
        try:
            docs = yaml_load_all(p)
        except H.Fail:
            raise
        except Exception as e:
            raise H.Fail("%s: %s" % (os.path.relpath(p, SRC), e))
        check(docs and all(isinstance(d, dict) for d in docs), "%s: not a list of mappings",
              os.path.relpath(p, SRC))


def k8s(name):
    return yaml_load_all(os.path.join(SRC, "deploy", "kubernetes", name))


def by_kind(docs, kind):
    got = [d for d in docs if d.get("kind") == kind]
    check(got, "no %s" % kind)
    return got[0]


def t_k8s_sidecar():
    dep = by_kind(k8s("deployment.yaml"), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    conts = spec.get("containers", []) + sidecars
    rl = [c for c in conts if c["name"] == "ratelimitd"]
    check(rl, "no ratelimitd container")
    rl = rl[0]
    check(any(c["name"] != "ratelimitd" for c in spec.get("containers", [])), "no app container")
    check(re.match(r"^[\w./-]*ratelimitd(:[\w.-]+)?$", rl["image"]), "image %r", rl["image"])
    env = {e["name"]: e.get("value") for e in rl.get("env", [])}
    check(env.get("RATELIMITD_REDIS_URL", "").startswith("redis://redis:"),
          "RATELIMITD_REDIS_URL %r does not point at the redis Service", env.get("RATELIMITD_REDIS_URL"))
    svc = by_kind(k8s("redis.yaml"), "Service")
    eq(svc["metadata"]["name"], "redis", "the Redis Service's name")
    # readiness that fits a sidecar: answering checks as configured, not Redis's state
    eq(rl["readinessProbe"]["httpGet"]["path"], "/serving", "readinessProbe path")
    eq(rl["livenessProbe"]["httpGet"]["path"], "/healthz", "livenessProbe path")
    sc = rl["securityContext"]
    eq(sc.get("runAsNonRoot"), True, "runAsNonRoot")
    check(isinstance(sc.get("runAsUser"), int) and sc["runAsUser"] > 0, "runAsUser %r", sc.get("runAsUser"))
    eq(sc.get("readOnlyRootFilesystem"), True, "readOnlyRootFilesystem")
    eq(sc.get("allowPrivilegeEscalation"), False, "allowPrivilegeEscalation")
    eq(sc.get("capabilities", {}).get("drop"), ["ALL"], "capabilities.drop")
    res = rl["resources"]
    for kind in ("requests", "limits"):
        for what in ("cpu", "memory"):
            check(what in res.get(kind, {}), "no resources.%s.%s", kind, what)
    mem = res["limits"]["memory"]
    check(re.fullmatch(r"\d+Mi", mem) and int(mem[:-2]) <= 64, "memory limit %r: a few MiB are used", mem)
    mounts = [m for m in rl.get("volumeMounts", []) if m["mountPath"] == "/etc/ratelimitd"]
    check(mounts, "nothing mounted at /etc/ratelimitd")
    check("subPath" not in mounts[0], "the config is mounted with subPath: the kubelet never updates it")
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    check(vol and vol[0].get("configMap", {}).get("name") == "ratelimitd-config",
          "the mounted volume is not the ratelimitd-config ConfigMap")
    cm = by_kind(k8s("configmap.yaml"), "ConfigMap")
    eq(cm["metadata"]["name"], "ratelimitd-config", "the ConfigMap's name")
    check("ratelimitd.json" in cm["data"], "the ConfigMap has no ratelimitd.json")
    cfg = env.get("RATELIMITD_CONFIG") or "/etc/ratelimitd/ratelimitd.json"
    eq(cfg, "/etc/ratelimitd/ratelimitd.json", "the config file the sidecar reads")


def t_k8s_configmap():
    cm = by_kind(k8s("configmap.yaml"), "ConfigMap")
    text = cm["data"]["ratelimitd.json"]
    # the Redis password file the sidecar has mounted from the Secret, here a scratch one
    pwfile = json.loads(text).get("redis", {}).get("password_file")
    if pwfile:
        scratch_pw = os.path.join(scratch("k8s-secret-"), "password")
        with open(scratch_pw, "w") as f:
            f.write("from-the-secret\n")
        text = text.replace(pwfile, scratch_pw)
    path = H.write_config(text, name="configmap-")
    rc, out, err = H.run_cli(["-t", "-c", path], env={"RATELIMITD_REDIS_URL": "redis://redis:6379/0",
                                                      "RATELIMITD_LISTEN": "0.0.0.0:8080"})
    check(rc == 0, "-t exit %d:\n%s", rc, err.strip())


# ---------------------------------------------------------------- Envoy Gateway

EG = os.path.join(SRC, "deploy", "envoy-gateway")
UNITS = {"Second", "Minute", "Hour", "Day", "Month", "Year"}


def envoy_env_variables():
    """The variables src/envoy_env.c's table knows."""
    with open(os.path.join(SRC, "src", "envoy_env.c")) as f:
        src = f.read()
    table = src[src.index("static const struct ev_row rows[] = {"):src.index("/* clang-format on */")]
    return {a or b for a, b in re.findall(r'(?:NONE|PART)\("([A-Z0-9_]+)"|\.name = "([A-Z0-9_]+)"',
                                          table)}


def rules_pass(files, what):
    """Rule files ({name: text}) as rls.config: ratelimitd -t takes them."""
    d = scratch("eg-rules-")
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    rc, _, err = H.run_cli(["-t", "-c", H.write_config({"rls": {"config": d}})])
    eq(rc, 0, "%s: rls.config -t (%s)" % (what, err.strip()))


def t_envoy_gateway_recipes():
    """deploy/envoy-gateway/: the fields the recipes rely on."""
    # the EnvoyGateway configuration: the image swapped, no rule files
    # mounted: Envoy Gateway's environment (tests/integration/envoy_gateway.env)
    # takes the rules over xDS
    cm = by_kind(yaml_load_all(os.path.join(EG, "envoy-gateway-config.yaml")), "ConfigMap")
    inner = os.path.join(scratch("eg-config-"), "envoy-gateway.yaml")
    with open(inner, "w") as f:
        f.write(cm["data"]["envoy-gateway.yaml"])
    import_yaml = yaml_load_all(inner)[0]
    eq(import_yaml["kind"], "EnvoyGateway", "envoy-gateway.yaml's kind")
    rld = import_yaml["provider"]["kubernetes"]["rateLimitDeployment"]
    image = rld["container"]["image"]
    check("ratelimitd" in image and "envoyproxy/ratelimit" not in image, "the image: %r", image)
    with open(os.path.join(SRC, "tests", "integration", "envoy_gateway.env")) as f:
        eg_env = dict(ln.strip().split("=", 1) for ln in f if "=" in ln and not ln.startswith("#"))
    eq(eg_env["CONFIG_TYPE"], "GRPC_XDS_SOTW", "Envoy Gateway's rules over xDS")
    check("volumeMounts" not in rld.get("container", {}) and "volumes" not in rld.get("pod", {}),
          "rule files mounted: the rules come over xDS")
    check(re.fullmatch(r"[\w.-]+:\d+", import_yaml["rateLimit"]["backend"]["redis"]["url"]),
          "redis url not host:port (REDIS_TYPE single)")
    rules = by_kind(yaml_load_all(os.path.join(EG, "ratelimit-rules.yaml")), "ConfigMap")
    eq(rules["metadata"]["namespace"], "envoy-gateway-system", "its namespace")
    rules_pass(rules["data"], "ratelimit-rules.yaml")
    # the policies
    for name in ("backend-traffic-policy.yaml", "backend-traffic-policy-cost.yaml"):
        p = by_kind(yaml_load_all(os.path.join(EG, name)), "BackendTrafficPolicy")
        eq(p["apiVersion"], "gateway.envoyproxy.io/v1alpha1", "%s apiVersion" % name)
        eq(p["spec"]["rateLimit"]["type"], "Global", "%s: a global limit" % name)
        for r in p["spec"]["rateLimit"]["global"]["rules"]:
            check(isinstance(r["limit"]["requests"], int) and r["limit"]["unit"] in UNITS,
                  "%s: limit %r", name, r["limit"])
    cost = by_kind(yaml_load_all(os.path.join(EG, "backend-traffic-policy-cost.yaml")),
                   "BackendTrafficPolicy")["spec"]["rateLimit"]["global"]["rules"][0]["cost"]
    eq(cost["request"], {"from": "Number", "number": 0}, "cost.request: asks only")
    eq((cost["response"]["from"], cost["response"]["metadata"]["namespace"]),
       ("Metadata", "io.envoy.ai_gateway"), "cost.response from AI Gateway's metadata")
    # Envoy AI Gateway's quota service: its name, port and command, the image
    # swapped, every variable one envoyproxy/ratelimit has
    docs = yaml_load_all(os.path.join(EG, "ai-gateway-quota-ratelimit.yaml"))
    dep, svc = by_kind(docs, "Deployment"), by_kind(docs, "Service")
    eq((dep["metadata"]["name"], dep["metadata"]["namespace"]),
       ("envoy-ai-gateway-ratelimit", "envoy-gateway-system"), "AI Gateway's quotaRateLimitServiceAddr")
    spec = dep["spec"]["template"]["spec"]
    eq(spec["securityContext"]["runAsNonRoot"], True, "runAsNonRoot")
    c = spec["containers"][0]
    eq(c["command"], ["/bin/ratelimit"], "its command")
    check("ratelimitd" in c["image"], "the image: %r", c["image"])
    env = {e["name"]: e["value"] for e in c["env"]}
    known = envoy_env_variables()
    eq(sorted(set(env) - known), [], "variables envoyproxy/ratelimit does not have")
    check(env["CONFIG_GRPC_XDS_SERVER_URL"].endswith(":18002"), "AI Gateway's xDS port")
    eq(int(env["GRPC_PORT"]), 8081, "GRPC_PORT")
    eq([p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"], [8081], "the Service's gRPC port")
    eq(c["readinessProbe"]["httpGet"], {"path": "/healthcheck", "port": 8080}, "the probe")
    check("volumeMounts" not in c and "volumes" not in spec and
          not [d for d in docs if d.get("kind") == "ConfigMap"],
          "rule files mounted: the quotas come over xDS")
    eq(env["CONFIG_TYPE"], "GRPC_XDS_SOTW", "AI Gateway's quotas over xDS")
    # started as that container starts (its command by name, its environment,
    # the image's own variables): the configuration is good
    root = scratch("eg-root-")
    image_env = dict(kv.split("=", 1) for e in instr(dockerfile_stages()[-1], "ENV")
                     for kv in shlex.split(e))
    run_env = dict(image_env, **env)
    run_env.update(RUNTIME_ROOT=root, PATH=os.environ.get("PATH", ""))
    link = os.path.join(scratch("eg-bin-"), "ratelimit")
    os.symlink(os.path.abspath(H.RATELIMITD), link)
    rc, out, err = run([link] + c.get("args", []) + ["-t"], env=run_env)
    eq(rc, 0, "the quota Deployment's container, -t (%s)" % err.strip())
    check("note: CONFIG_GRPC_XDS_SERVER_URL:" not in err and "CONFIG_TYPE" not in err,
          "the xDS variables read, not told: %r", err)


K8S_KINDS = {("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "ConfigMap"), ("v1", "Secret"),
             ("networking.k8s.io/v1", "NetworkPolicy"), ("monitoring.coreos.com/v1", "PodMonitor")}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def k8s_objects():
    """Every object of deploy/kubernetes/'s manifests (the *-patch.yaml files are
    patches, not objects): [(file, object)]."""
    out = []
    for p in sorted(glob.glob(os.path.join(SRC, "deploy", "kubernetes", "*.yaml"))):
        if p.endswith("-patch.yaml"):
            continue
        out += [(os.path.basename(p), d) for d in yaml_load_all(p)]
    return out


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def pod_ports(spec):
    return {p["name"]: p["containerPort"] for c in spec.get("containers", []) + spec.get("initContainers", [])
            for p in c.get("ports", []) if "name" in p}


def t_k8s_schema():
    """What kubeconform would say of each object, and what it would not: the
    references between them (selectors, named ports, Secrets, ConfigMaps)."""
    objs = k8s_objects()
    problems = []
    defined = {(o["kind"], o["metadata"]["name"]): o for _, o in objs if "metadata" in o}
    # what a manifest's comments say to make with kubectl (a ConfigMap or a
    # Secret from files) is defined too
    for p in glob.glob(os.path.join(SRC, "deploy", "kubernetes", "*.yaml")):
        with open(p) as f:
            for kind, name, keys in re.findall(r"kubectl create (configmap|secret generic) ([\w.-]+)((?: --from-[\w-]+=[\w.-]+)*)",
                                               f.read()):
                data = {k.split("=")[0].split("/")[-1]: "" for k in re.findall(r"--from-[\w-]+=([\w./-]+)", keys)}
                defined.setdefault(("ConfigMap" if kind == "configmap" else "Secret", name),
                                   {"kind": kind, "data": data or {"": ""}})
    deployments = [o for _, o in objs if o.get("kind") == "Deployment"]
    for f, o in objs:
        where = "%s: %s %s" % (f, o.get("kind"), o.get("metadata", {}).get("name"))
        if (o.get("apiVersion"), o.get("kind")) not in K8S_KINDS:
            problems.append("%s: unknown apiVersion/kind %s/%s" % (where, o.get("apiVersion"), o.get("kind")))
            continue
        name = o.get("metadata", {}).get("name", "")
        if not DNS1123.match(name) or len(name) > 63:
            problems.append("%s: metadata.name %r is not a DNS-1123 label" % (where, name))
        kind = o["kind"]
        if kind == "Deployment":
            spec = o["spec"]
            tmpl = spec["template"]
            if not selects(spec["selector"], tmpl["metadata"].get("labels", {})):
                problems.append("%s: the selector does not select its own pods" % where)
            ps = tmpl["spec"]
            ports = pod_ports(ps)
            for pn in ports:
                if len(pn) > 15 or not PORT_NAME.match(pn):
                    problems.append("%s: port name %r (15 characters of a-z0-9-)" % (where, pn))
            vols = {v["name"]: v for v in ps.get("volumes", [])}
            for c in ps.get("containers", []) + ps.get("initContainers", []):
                for k in ("name", "image"):
                    if not c.get(k):
                        problems.append("%s: a container without %s" % (where, k))
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    port = (c.get(probe, {}).get("httpGet") or c.get(probe, {}).get("tcpSocket") or {}).get("port")
                    if isinstance(port, str) and port not in ports:
                        problems.append("%s: %s.%s names port %r, which no container has" % (where, c["name"], probe, port))
                for m in c.get("volumeMounts", []):
                    if m["name"] not in vols:
                        problems.append("%s: %s mounts %r, which is no volume" % (where, c["name"], m["name"]))
                for e in c.get("env", []):
                    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                    if ref:
                        sec = defined.get(("Secret", ref["name"]))
                        if sec is None or ref["key"] not in (sec.get("stringData") or sec.get("data") or {}):
                            problems.append("%s: %s's %s is from %s/%s, not defined here" % (where, c["name"], e["name"],
                                                                                           ref["name"], ref["key"]))
            for v in vols.values():
                if "secret" in v:
                    sec = defined.get(("Secret", v["secret"]["secretName"]))
                    keys = set((sec or {}).get("stringData") or (sec or {}).get("data") or {})
                    if sec is None or any(i["key"] not in keys for i in v["secret"].get("items", [])):
                        problems.append("%s: volume %s: Secret %s (or its keys) not defined here"
                                        % (where, v["name"], v["secret"]["secretName"]))
                if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) not in defined:
                    problems.append("%s: volume %s: ConfigMap %s not defined here" % (where, v["name"], v["configMap"]["name"]))
        elif kind in ("Service", "NetworkPolicy", "PodMonitor"):
            sel = o["spec"]["selector"] if kind == "Service" else (
                o["spec"]["podSelector"] if kind == "NetworkPolicy" else o["spec"]["selector"])
            sel = sel if "matchLabels" in sel else {"matchLabels": sel}
            pods = [d for d in deployments if selects(sel, d["spec"]["template"]["metadata"].get("labels", {}))]
            if not pods:
                problems.append("%s: selects no pod of these manifests" % where)
                continue
            ports = pod_ports(pods[0]["spec"]["template"]["spec"])
            named = []
            if kind == "Service":
                named = [p.get("targetPort") for p in o["spec"]["ports"]]
            elif kind == "NetworkPolicy":
                named = [p.get("port") for r in o["spec"].get("ingress", []) for p in r.get("ports", [])]
                for r in o["spec"].get("ingress", []):
                    for fr in r.get("from", []):
                        if "podSelector" in fr and "namespaceSelector" not in fr and not any(
                                selects(fr["podSelector"], d["spec"]["template"]["metadata"].get("labels", {}))
                                for d in deployments):
                            problems.append("%s: admits pods that none of these manifests makes" % where)
            else:
                named = [e.get("port") for e in o["spec"]["podMetricsEndpoints"]]
            for n in named:
                if isinstance(n, str) and n not in ports:
                    problems.append("%s: names port %r, which its pods do not have" % (where, n))
        elif kind == "Secret":
            if not (o.get("stringData") or o.get("data")):
                problems.append("%s: no data" % where)
    check(len(objs) >= 8, "only %d objects under deploy/kubernetes", len(objs))
    check(not problems, "%d problem(s):\n%s", len(problems), "\n".join(problems))


def t_k8s_scrape():
    dep = by_kind(k8s("deployment.yaml"), "Deployment")
    tmpl = dep["spec"]["template"]
    rl = [c for c in tmpl["spec"].get("initContainers", []) if c["name"] == "ratelimitd"][0]
    port = [p for p in rl["ports"] if p["name"] == "ratelimitd"][0]
    ann = tmpl["metadata"].get("annotations", {})
    eq((ann.get("prometheus.io/scrape"), ann.get("prometheus.io/port"), ann.get("prometheus.io/path")),
       ("true", str(port["containerPort"]), "/metrics"), "the pod's scrape annotations")
    pm = by_kind(k8s("podmonitor.yaml"), "PodMonitor")
    check(selects(pm["spec"]["selector"], tmpl["metadata"]["labels"]), "the PodMonitor does not select the app's pods")
    eq([(e["port"], e["path"]) for e in pm["spec"]["podMetricsEndpoints"]], [("ratelimitd", "/metrics")],
       "the PodMonitor's endpoints")
    # the NetworkPolicy admits the scrape to that port, and nothing else there
    np = [o for o in k8s("deployment.yaml") if o.get("kind") == "NetworkPolicy"][0]
    rules = [r for r in np["spec"]["ingress"] if any(p.get("port") in ("ratelimitd", port["containerPort"])
                                                     for p in r.get("ports", []))]
    eq(len(rules), 1, "ingress rules for ratelimitd's port")
    froms = rules[0].get("from", [])
    check(froms and all(f.get("podSelector", {}).get("matchLabels") for f in froms),
          "ratelimitd's port is open to every pod, not only to Prometheus: %r", froms)
    check(any("prometheus" in json.dumps(f) for f in froms), "the scrape's source is not Prometheus: %r", froms)
    # monitoring files know how such a job is named
    with open(os.path.join(SRC, "deploy", "prometheus", "README.md")) as f:
        check("podmonitor.yaml" in f.read(), "deploy/prometheus/README.md does not say how to scrape the sidecars")


def t_k8s_redis():
    objs = k8s("redis.yaml")
    check(not [o for o in objs if o.get("kind") == "Secret"],
          "redis.yaml holds a Secret: applying it would replace the password made with kubectl")
    secret = by_kind(k8s("redis-secret.yaml"), "Secret")
    sname = secret["metadata"]["name"]
    red = by_kind(objs, "Deployment")["spec"]["template"]
    c = red["spec"]["containers"][0]
    args = c["args"]
    eq(args[args.index("--maxmemory-policy") + 1], "noeviction", "Redis's maxmemory-policy")
    check("--maxmemory" in args, "Redis has no maxmemory: noeviction would never refuse")
    pw_env = [e["name"] for e in c["env"] if (e.get("valueFrom") or {}).get("secretKeyRef", {}).get("name") == sname]
    check("REDISCLI_AUTH" in pw_env, "the readiness probe's redis-cli does not authenticate")
    req = args[args.index("--requirepass") + 1]
    check(req.startswith("$(") and req[2:-1] in pw_env, "--requirepass %r is not the Secret's password", req)
    npol = by_kind(objs, "NetworkPolicy")
    check(selects(npol["spec"]["podSelector"], red["metadata"]["labels"]), "Redis's NetworkPolicy selects no Redis")
    froms = [f for r in npol["spec"]["ingress"] for f in r.get("from", [])]
    app = by_kind(k8s("deployment.yaml"), "Deployment")["spec"]["template"]
    check(froms and all(selects(f.get("podSelector", {}), app["metadata"]["labels"]) for f in froms),
          "Redis is open to more than the app's pods: %r", froms)
    # the sidecar reads that Secret's password where the config says
    spec = app["spec"]
    rl = [x for x in spec["initContainers"] if x["name"] == "ratelimitd"][0]
    vol = [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == sname]
    eq(len(vol), 1, "volumes of the Secret %s in the app's pod" % sname)
    mount = [m for m in rl["volumeMounts"] if m["name"] == vol[0]["name"]][0]
    item = [i for i in vol[0]["secret"]["items"] if i["key"] == "password"][0]
    cfg = json.loads(by_kind(k8s("configmap.yaml"), "ConfigMap")["data"]["ratelimitd.json"])
    eq(cfg["redis"].get("password_file"), os.path.join(mount["mountPath"], item["path"]),
       "the config's redis.password_file against the mounted Secret")
    check(vol[0]["secret"].get("defaultMode") == 0o440 and spec["securityContext"].get("fsGroup") == 10001,
          "the Secret is readable by more than ratelimitd's group")
    check(spec["containers"][0]["securityContext"]["runAsUser"] != 10001, "the app runs as ratelimitd's user")


def t_k8s_reloader():
    patch = k8s("reloader-patch.yaml")[0]
    pspec = patch["spec"]["template"]["spec"]
    eq(pspec.get("shareProcessNamespace"), True, "shareProcessNamespace")
    c = [c for c in pspec["containers"] if c["name"] == "config-reloader"][0]
    eq(c["securityContext"].get("runAsUser"), 10001, "the reloader's user (ratelimitd's)")
    script = c["command"][-1]
    for old in ("/etc/ratelimitd/ratelimitd.json", "sleep 5"):
        check(script.count(old) == 1, "the reloader's script no longer has one %r", old)

    # a kubelet-style ConfigMap volume: ratelimitd.json -> ..data/ratelimitd.json,
    # ..data -> ..<timestamp>, swapped atomically on an update
    d = scratch("cm-")
    gen = [0]

    def publish(cfg):
        gen[0] += 1
        ts = os.path.join(d, "..2026_%02d" % gen[0])
        os.mkdir(ts)
        with open(os.path.join(ts, "ratelimitd.json"), "w") as f:
            f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
        tmp = os.path.join(d, "..data_tmp")
        os.symlink(os.path.basename(ts), tmp)
        os.rename(tmp, os.path.join(d, "..data"))

    pol = lambda n: {"name": n, "limits": [{"algorithm": "fixed_window", "limit": 5, "window": "1m"}]}
    publish({"identity": ["body", "peer"], "policies": [pol("first")]})
    os.symlink("..data/ratelimitd.json", os.path.join(d, "ratelimitd.json"))
    cfgfile = os.path.join(d, "ratelimitd.json")

    with H.Daemon(None, backend="memory", args=["-c", cfgfile]) as dmn:
        # pidof must find only this test's daemon: a shim first in PATH
        shim = scratch("shim-")
        with open(os.path.join(shim, "pidof"), "w") as f:
            f.write("#!/bin/sh\n[ \"$1\" = ratelimitd ] && echo %d\n" % dmn.proc.pid)
        os.chmod(os.path.join(shim, "pidof"), 0o755)
        script = script.replace("/etc/ratelimitd/ratelimitd.json", cfgfile).replace("sleep 5", "sleep 0.2")
        logpath = os.path.join(shim, "reloader.log")
        with open(logpath, "wb") as log:
            rel = H._track(subprocess.Popen(["/bin/sh", "-c", script], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL,
                                            env=dict(os.environ, PATH=shim + ":" + os.environ["PATH"])))
        try:
            def wait(what, cond):
                def reloader_running_and():
                    check(rel.poll() is None, "the reloader exited: %s", open(logpath).read())
                    return cond()
                try:
                    H.wait_for(reloader_running_and, what, 10, interval=0.05)
                except H.Fail as e:
                    raise H.Fail("%s; reloader log:\n%s\ndaemon log:\n%s"
                                 % (e, open(logpath).read(), dmn.log()[-1500:]))

            def policy_known(name):
                st, _, _ = H.request(dmn.port, "POST", "/check", {"key": "k", "policy": name})
                return st == 200

            wait("the reloader started", lambda: "watching" in open(logpath).read())
            time.sleep(0.5)
            check("configuration reloaded" not in dmn.log(), "a reload without a change")
            check(policy_known("first") and not policy_known("second"), "the first config is not running")
            publish({"identity": ["body", "peer"], "policies": [pol("first"), pol("second")]})
            wait("the new policy is served", lambda: policy_known("second"))
            check("SIGHUP sent" in open(logpath).read(), "the reloader did not log its SIGHUP")
            publish("{ broken")
            wait("the broken file is rejected", lambda: "reload rejected" in dmn.log())
            check(policy_known("second"), "the running config was lost on a broken file")
            eq(dmn.proc.poll(), None, "the daemon's state after the reloads")
        finally:
            rel.kill()
            rel.wait(timeout=5)


# ---------------------------------------------------------------- papercuts

README = os.path.join(SRC, "README.md")
OPERATIONS = os.path.join(SRC, "docs", "operations.md")
DATE = re.compile(r"^Date: (Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                  r"\d{4} \d\d:\d\d:\d\d GMT$")
# what varies from one run to the next: the time, and how much of the window
# is left when the 429 comes (at most a few seconds later)
VARY_MS = ("reset_ms", "retry_after_ms")
VARY_S = ("X-RateLimit-Reset", "Retry-After")


def try_it_block():
    """README's "Try it" console block: (text, start, end) offsets of its body."""
    with open(README) as f:
        text = f.read()
    sec = text.index("\n## Try it\n")
    start = text.index("```console\n", sec) + len("```console\n")
    end = text.index("```\n", start)
    return text, start, end


def try_it_steps(block):
    """[(command, [output lines])]"""
    steps = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            check(steps, "output before the first command in the README's Try it: %r", line)
            steps[-1][1].append(line)
    return steps


def same_json(doc, real, where):
    """Equal but for the ms that vary, which must be close (5 s) and within the window."""
    if isinstance(doc, dict) and isinstance(real, dict):
        eq(sorted(doc), sorted(real), "%s: fields" % where)
        for k in doc:
            if k in VARY_MS and doc[k] != real[k]:
                check(isinstance(doc[k], int) and isinstance(real[k], int) and 0 < doc[k] <= 60000
                      and 0 < real[k] <= 60000 and abs(doc[k] - real[k]) <= 5000,
                      "%s: %s documented %r, the daemon says %r", where, k, doc[k], real[k])
            else:
                same_json(doc[k], real[k], "%s.%s" % (where, k))
    elif isinstance(doc, list) and isinstance(real, list):
        eq(len(doc), len(real), "%s: length" % where)
        for i, (a, b) in enumerate(zip(doc, real)):
            same_json(a, b, "%s[%d]" % (where, i))
    else:
        eq(doc, real, where)


def same_output(doc, real, cmd):
    """The documented output of one command against the daemon's."""
    eq(len(doc), len(real), "lines of the output of %r (README:\n%s\nthe daemon:\n%s)"
       % (cmd, "\n".join(doc), "\n".join(real)))
    body = "".join(l for l in doc if l.startswith("{"))
    for i, (d, r) in enumerate(zip(doc, real)):
        where = "%r, line %d" % (cmd, i + 1)
        if d.startswith("Date: "):
            check(DATE.match(d) and DATE.match(r), "%s: %r / %r", where, d, r)
        elif d.startswith("{"):
            same_json(json.loads(d), json.loads(r), where)
        elif d.startswith("Content-Length: "):
            eq(d, "Content-Length: %d" % len(body.encode()), "%s: documented Content-Length" % where)
            check(r.startswith("Content-Length: "), "%s: %r" % (where, r))
        elif d.split(":")[0] in VARY_S or d.startswith("RateLimit: "):
            # seconds left: the same, or a second or two less by the time of the 429
            dn, rn = re.sub(r"\d+$", "N", d), re.sub(r"\d+$", "N", r)
            eq(dn, rn, where)
            dv, rv = int(re.search(r"\d+$", d).group()), int(re.search(r"\d+$", r).group())
            check(0 <= dv - rv <= 5, "%s: %r documented, the daemon says %r", where, d, r)
        else:
            eq(d, r, where)


def readme_admin_steps():
    """The admin API example (docs/operations.md, "Admin API"): [(command,
    documented output lines)], continuation lines joined."""
    with open(OPERATIONS) as f:
        text = f.read()
    sec = text.index("\n## Admin API\n")
    start = text.index("```\n", sec) + 4
    end = text.index("```\n", start)
    steps, cont = [], False
    for line in text[start:end].splitlines():
        if line.startswith("$ ") or cont:
            cmd = line[2:] if line.startswith("$ ") else line
            if cont:
                steps[-1] = (steps[-1][0] + " " + cmd.strip().rstrip("\\").strip(), steps[-1][1])
            else:
                steps.append((cmd.rstrip("\\").strip(), []))
            cont = line.endswith("\\")
        else:
            steps[-1][1].append(line)
    return steps


def t_readme_admin_examples():
    """docs/operations.md's admin API examples, run as written against the shipped
    configuration they are written for (conf/login-protection.json, its admin
    socket moved to a scratch directory) after three failed logins."""
    need("curl", "curl")
    steps = readme_admin_steps()
    check(len(steps) >= 6, "only %d admin examples in docs/operations.md", len(steps))
    src = os.path.join(SRC, "conf", "login-protection.json")
    with open(src) as f:
        conf = json.load(f)
    sock = os.path.join(scratch("admin-"), "admin.sock")
    documented = conf["admin_listen"][len("unix:"):]
    conf["admin_listen"] = "unix:" + sock
    with H.Redis(topology="standalone") as r, H.Daemon(conf, redis=r) as d:
        for _ in range(3):
            st, _, b = H.request(d.port, "POST", "/check",
                                 {"path": "/login", "method": "POST", "key": "alice|203.0.113.7"})
            eq(st, 200, "a failed login's check (%r)" % (b,))
        for cmd, doc in steps:
            check(documented in cmd, "%r is not sent to the documented socket %s", cmd, documented)
            rc, out, err = run(["bash", "-c", cmd.replace(documented, sock)])
            eq(rc, 0, "%r: exit status (%s)" % (cmd, err))
            got = json.loads(out)
            action = re.search(r"/admin/(\w+)", cmd).group(1)
            eq(got.get("action"), action, "%r: the answer's action (%r)" % (cmd, got))
            if doc:
                want = json.loads("".join(doc))
                for k in want:
                    if k != "limits":
                        eq(got.get(k), want[k], "%r: %s" % (cmd, k))
                eq(len(got["limits"]), len(want["limits"]), "%r: limits" % cmd)
                for w, g in zip(want["limits"], got["limits"]):
                    eq(sorted(g), sorted(w), "%r: a limit's fields" % cmd)
                    for k in w:
                        if k == "reset_ms":
                            # a fixed window starts at the first check: what is left of it;
                            # a sliding counter is whole again when its current window (on
                            # the clock) has passed as the previous one: up to two windows
                            close = w["algorithm"] != "fixed_window" or abs(g[k] - w[k]) <= 5000
                            check(0 < g[k] <= 2 * w["window_ms"] and 0 < w[k] <= 2 * w["window_ms"] and close,
                                  "%r: reset_ms %d documented, %d from the daemon", cmd, w[k], g[k])
                        else:
                            eq(g[k], w[k], "%r: a limit's %s" % (cmd, k))


def t_readme_try_it():
    """README's "Try it", run for real as it says: scripts/run's configuration
    (conf/ratelimitd.json) on a fresh Redis, each command as written (curl),
    its output compared line by line.  RL_UPDATE_README=1 writes the real run
    into the README instead."""
    need("curl", "curl")
    text, start, end = try_it_block()
    steps = try_it_steps(text[start:end])
    check(len(steps) >= 4, "only %d commands in the README's Try it", len(steps))
    with H.Redis(topology="standalone") as r, \
            H.Daemon(None, redis=r, args=["-c", os.path.join(SRC, "conf", "ratelimitd.json")]) as d:
        got = []
        for cmd, _ in steps:
            check("localhost:8080" in cmd or "127.0.0.1:8080" in cmd, "%r does not ask the daemon", cmd)
            real = cmd.replace("localhost:8080", "localhost:%d" % d.port).replace(
                "127.0.0.1:8080", "127.0.0.1:%d" % d.port)
            rc, out, err = run(["bash", "-c", real])
            eq(rc, 0, "%r: exit status (%s)" % (cmd, err))
            lines = out.replace("\r\n", "\n").split("\n")
            # curl -i prints the head and the body, without a newline at the end
            while lines and lines[-1] == "":
                lines.pop()
            got.append((cmd, lines))
    if os.environ.get("RL_UPDATE_README") == "1":
        block = "".join("$ %s\n" % cmd + "".join(l + "\n" for l in lines) for cmd, lines in got)
        with open(README, "w") as f:
            f.write(text[:start] + block + text[end:])
        print("# README's Try it written from this run")
        return
    for (cmd, doc), (_, real) in zip(steps, got):
        same_output(doc, real, cmd)

def t_k8s_uid():
    user = instr(dockerfile_stages()[-1], "USER")[-1].split(":")[0].strip()
    check(user.isdigit(), "the image's USER %r is not numeric: runAsNonRoot cannot check a name", user)
    dep = by_kind(k8s("deployment.yaml"), "Deployment")
    spec = dep["spec"]["template"]["spec"]
    rl = [c for c in spec.get("containers", []) + spec.get("initContainers", [])
          if c["name"] == "ratelimitd"][0]
    eq(rl["securityContext"]["runAsUser"], int(user), "the sidecar's runAsUser against the image's USER")
    with open(os.path.join(SRC, "deploy", "kubernetes", "README.md")) as f:
        readme = f.read()
    check("uid %s" % user in readme, "deploy/kubernetes/README.md does not give the image's uid %s", user)
    check(not re.search(r"runs as the user `\w+`, a name", readme),
          "deploy/kubernetes/README.md still says the image user is a name")


def t_unit_credential():
    with open(UNIT) as f:
        unit = f.read()
    m = re.search(r"^LoadCredential=([\w.-]+):([\w.-]+)$", unit, re.M)
    check(m, "the unit has no LoadCredential=ID:NAME (a relative name: a missing one is no error)")
    path = "/run/credentials/ratelimitd.service/%s" % m.group(1)
    for doc in (MAN5, UNIT, os.path.join(SRC, "README.md")):
        with open(doc) as f:
            text = f.read().replace("\\-", "-")
        check(m.group(1) in text and ("password_file" in text), "%s does not show password_file with "
              "the credential %s", doc, m.group(1))
    with open(MAN5) as f:
        check(path in f.read().replace("\\-", "-"), "ratelimitd.json(5) does not give %s", path)
    # the daemon reads a credential-style file (the path swapped for a scratch one)
    d = scratch("cred-")
    pw = os.path.join(d, m.group(1))
    with open(pw, "w") as f:
        f.write("from-a-credential\n")
    cfg = H.write_config({"redis": {"password_file": pw}, "policies": []})
    rc, out, err = H.run_cli(["-t", "-c", cfg])
    eq(rc, 0, "-t with a password_file (%s)" % (out + err))
    check("from-a-credential" not in out + err, "-t printed the password")


def builddir():
    return os.path.dirname(os.path.dirname(os.path.abspath(H.RATELIMITD)))


def make_env():
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    return env


def run_script_run(redis_port, until):
    """scripts/run as a user runs it (built already), stopped with Ctrl-C (a
    SIGINT to its process group) once until(daemon port) holds: its output."""
    import signal
    port = H.free_port()
    work = scratch("run-")
    # the binary under test, no build: a make in the build directory while
    # make check runs there could relink the daemon under other tests
    env = dict(make_env(), BUILD_DIR=work, RL_RUN_REDIS_PORT=str(redis_port),
               RATELIMITD=os.path.abspath(H.RATELIMITD))
    logpath = os.path.join(work, "run.log")
    with open(logpath, "wb") as log:
        p = H._track(subprocess.Popen([os.path.join(SRC, "scripts", "run"), "-l", "127.0.0.1:%d" % port],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, start_new_session=True))
    try:
        def serving():
            check(p.poll() is None, "scripts/run ended: %s", open(logpath).read()[-2000:])
            return H.port_open(port)
        try:
            H.wait_for(serving, "scripts/run to serve", 120, interval=0.1)
        except H.Fail as e:
            raise H.Fail("%s: %s" % (e, open(logpath).read()[-2000:]))
        until(port)
        os.killpg(p.pid, signal.SIGINT)
        eq(p.wait(timeout=30), 0, "scripts/run's exit status after Ctrl-C (%s)" % open(logpath).read()[-1500:])
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return open(logpath).read()


def man_text(page):
    rc, out, err = run([need("man", "man-db"), "-l", page], env=dict(os.environ, MANPAGER="cat", PAGER="cat",
                                                                    MANWIDTH="200"))
    eq(rc, 0, "man -l %s" % page)
    return re.sub(r"\s+", " ", out)


def t_doc_papercuts():
    # the URL forms as the daemon takes them
    m5 = man_text(MAN5)
    check("redis[s]://[user[:password]@]host[:port][/db]" in m5,
          "ratelimitd.json(5) does not give redis.url as redis[s]://[user[:password]@]host[:port][/db]")
    # every recipe of deploy/ in ratelimitd(8)
    m8 = man_text(MAN8)
    for d in sorted(os.listdir(os.path.join(SRC, "deploy"))):
        if os.path.isdir(os.path.join(SRC, "deploy", d)):
            check("deploy/%s/" % d in m8, "ratelimitd(8) does not name deploy/%s/", d)
    # a clone has no configure script: every ./configure the README and the
    # guides show is made first
    for doc in [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md"))):
        with open(doc) as f:
            text = f.read()
        for m in re.finditer(r"`([^`]*\./configure[^`]*)`", text):
            check("autoreconf -fi" in m.group(1) or "--enable" in m.group(1).split("./configure")[1],
                  "%s runs ./configure without autoreconf -fi first: %r", os.path.relpath(doc, SRC), m.group(1))


def t_scripts_run_stops_its_redis():
    need("redis-cli", "redis-tools")
    rport = H.free_port()

    def works(port):
        # a degraded answer is a check slower than the shipped 50 ms
        # redis.timeout (a loaded host, a sanitized build): ask again
        answers = []

        def decided():
            answers.append(H.request(port, "POST", "/check", {"key": "alice", "policy": "demo"}))
            return answers[-1][2].get("degraded") is None
        try:
            H.wait_for(decided, "a check not degraded", 10, interval=0.1)
        except H.Fail:
            pass            # the last answer says what was wrong
        st, _, b = answers[-1]
        eq((st, b.get("degraded")), (200, None), "a check through scripts/run's daemon and Redis (%r)" % (b,))
    out = run_script_run(rport, works)
    check("stopping the redis-server" in out, "scripts/run did not say it stops its redis-server:\n%s", out)
    H.wait_for(lambda: not H.port_open(rport), "the redis-server scripts/run started to stop after Ctrl-C",
               10, interval=0.05)
    # a Redis that was there before is not scripts/run's to stop
    with H.Redis(topology="standalone") as r:
        out = run_script_run(r.port, works)
        check("using the redis-server already" in out and "stopping the redis-server" not in out,
              "scripts/run and a Redis it did not start:\n%s", out)
        check(r.ping(), "scripts/run stopped a Redis it did not start")


def t_make_install():
    dest = scratch("destdir-")
    rc, out, err = run(["make", "-C", builddir(), "install", "DESTDIR=" + dest], env=make_env(), timeout=300)
    eq(rc, 0, "make install DESTDIR (%s)" % (out + err)[-1500:])
    confs = glob.glob(os.path.join(dest, "**", "ratelimitd", "ratelimitd.json"), recursive=True)
    eq(len(confs), 1, "installed configurations %r" % confs)
    bins = glob.glob(os.path.join(dest, "**", "bin", "ratelimitd"), recursive=True)
    eq(len(bins), 1, "installed binaries %r" % bins)
    with open(confs[0]) as f, open(os.path.join(SRC, "conf", "ratelimitd.json")) as g:
        eq(f.read(), g.read(), "the installed configuration against conf/ratelimitd.json")
    rc, out, err = run([bins[0], "-t", "-c", confs[0]])
    eq((rc, out.strip()), (0, "configuration OK"), "the installed binary on the installed configuration")
    # envoyproxy/ratelimit's command: a link that reads its environment
    link = os.path.join(os.path.dirname(bins[0]), "ratelimit")
    eq(os.readlink(link), "ratelimitd", "the installed ratelimit link")
    rc, out, err = run([link, "-t"], env=dict(os.environ, GRPC_SERVER_USE_TLS="yes"))
    check(rc == 1 and "\nGRPC_SERVER_USE_TLS: not a boolean" in "\n" + err,
          "ratelimit did not read envoyproxy/ratelimit's environment: %d %r", rc, err)
    # an operator's edit survives a second install and an uninstall
    with open(confs[0], "a") as f:
        f.write("\n")
    for target in ("install", "uninstall"):
        rc, out, err = run(["make", "-C", builddir(), target, "DESTDIR=" + dest], env=make_env(), timeout=300)
        eq(rc, 0, "make %s over an edited configuration (%s)" % (target, (out + err)[-1500:]))
        check(os.path.exists(confs[0]), "make %s removed an edited configuration", target)
    with open(confs[0]) as f:
        check(f.read().endswith("}\n\n"), "make install replaced an edited configuration")
    check(not os.path.exists(bins[0]), "make uninstall left the binary")
    check(not os.path.lexists(link), "make uninstall left the ratelimit link")


def dockerignore_rules():
    rules = []
    with open(os.path.join(SRC, ".dockerignore")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                rules.append((line.startswith("!"), line.lstrip("!").strip("/")))
    return rules


def glob_re(pat):
    """Docker's patterns (Go filepath.Match per segment, ** across them) as a regex."""
    out, i = "", 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pat.startswith("**", i):
            out += ".*"
            i += 2
        elif pat[i] == "*":
            out += "[^/]*"
            i += 1
        elif pat[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pat[i])
            i += 1
    return re.compile(out + "(?:/.*)?$")


def docker_ignored(path, rules):
    ignored = False
    for negate, pat in rules:
        if glob_re(pat).match(path):
            ignored = not negate
    return ignored


def t_dockerignore():
    rules = dockerignore_rules()
    # what scripts/run, an in-tree ./configure && make, and the tests leave behind
    for junk in ("build/Makefile", "build/src/ratelimitd", "build-asan/config.status", "build-ops/x",
                 "config.status", "config.log", "Makefile", "ac_config.h", "src/main.o", "src/.deps/main.Po",
                 "src/librl.a", "src/ratelimitd", "src/lua_scripts.c", "tests/unit/check_log",
                 "tests/unit/check_log.o", "tests/integration/test_ops.log", ".git/HEAD",
                 "configure", "src/Makefile.in", "build-aux/install-sh",
                 "scripts/peers/node/node_modules/ioredis/index.js"):
        check(docker_ignored(junk, rules), ".dockerignore lets %s into the image build", junk)
    # and every file git tracks is sent (the build stage runs scripts/test on them)
    rc, out, err = run(["git", "-C", SRC, "ls-files"])
    files = out.split() if rc == 0 else []
    if not files:       # a release tarball: the files on disk
        files = [os.path.relpath(os.path.join(dp, f), SRC) for dp, _, fs in os.walk(SRC) for f in fs]
        files = [f for f in files if f.endswith((".c", ".h", ".py", ".lua", ".am", ".ac", ".json"))
                 and not f.startswith("build")]
    check(len(files) > 50, "too few files to check: %d", len(files))
    lost = [f for f in files if docker_ignored(f, rules)]
    check(not lost, ".dockerignore leaves out tracked files: %s", lost[:10])


def t_in_tree_configure():
    src = scratch("tree-")
    top = os.path.join(src, "ratelimitd")
    junk = shutil.ignore_patterns(".git", "*.o", "*.a", ".deps", "node_modules", "__pycache__")

    def keep(d, names):
        return set(junk(d, names)) | {n for n in names if d == SRC and n.startswith("build")
                                      and n != "build-aux"}
    shutil.copytree(SRC, top, ignore=keep, symlinks=True)
    for stale in ("config.status", "Makefile", "config.log"):
        if os.path.exists(os.path.join(top, stale)):
            os.remove(os.path.join(top, stale))
    rc, out, err = run(["./configure", "-q"], cwd=top, env=make_env(), timeout=300)
    eq(rc, 0, "an in-tree ./configure (%s)" % (out + err)[-800:])
    bdir = os.path.join(src, "out-of-tree")
    script = '. "$1/scripts/lib.sh" && rl_configure "$2" && test -f "$2/Makefile"'
    rc, out, err = run(["bash", "-c", script, "-", top, bdir], env=dict(make_env(), BUILD_DIR=bdir),
                       timeout=300)
    eq(rc, 0, "scripts/lib.sh's configure step after an in-tree ./configure (%s)" % (out + err)[-1500:])
    check(not os.path.exists(os.path.join(top, "config.status")), "the in-tree configuration is still there")


# ------------------------------------------------------------ bench --plot

BENCH_TABLE = """some text before
target         req/s  p50 ms  p99 ms  non2xx sockerr srv us/req EVALSHA/req redis us/req evalsha us   RSS kB   HWM kB idle% steal% other%
bare           60000    0.74    2.50       0       0      15.00       0.00         0.09       0.00     2620     2620    20      0      0
rl-keys        30000    1.65    3.10       0       0      27.00       0.07        14.00     197.60     4260     4260    25      0      0
redis-keys     50000    0.88    1.65       -       -          -       1.00        17.00      15.05        -        -    51      0      0

req/s of each run (spread):
"""


def t_bench_plot():
    need("gnuplot", "gnuplot-nox")
    import xml.dom.minidom
    d = scratch("plot-")
    table = os.path.join(d, "run.txt")
    with open(table, "w") as f:
        f.write(BENCH_TABLE)
    svg = os.path.join(d, "bench.svg")
    rc, out, err = run([os.path.join(SRC, "scripts", "bench"), "--plot-table", table, svg])
    eq(rc, 0, "scripts/bench --plot-table (%s)" % (out + err))
    doc = xml.dom.minidom.parse(svg)
    eq(doc.documentElement.tagName, "svg", "the chart's root element")
    def text_of(n):
        return "".join(c.data if c.nodeType == c.TEXT_NODE else text_of(c) for c in n.childNodes)
    texts = " ".join(text_of(n) for n in doc.getElementsByTagName("text"))
    for want in ("bare", "rl-keys", "redis-keys", "requests per second", "p99 latency", "Redis"):
        check(want in texts, "%r is not in the chart's text: %r", want, texts[:400])
    check("req/s of each run" not in texts and "some text" not in texts, "the chart drew more than the table")
    # the docs' chart is the docs' table
    rc, out, err = run([os.path.join(SRC, "scripts", "bench"), "--plot-table",
                        os.path.join(SRC, "docs", "BENCHMARKS.md"), os.path.join(d, "docs.svg")])
    eq(rc, 0, "--plot-table on docs/BENCHMARKS.md (%s)" % (out + err))
    check(os.path.exists(os.path.join(SRC, "docs", "benchmarks.svg")), "docs/benchmarks.svg is missing")
    # no table: an error that says so, no chart
    with open(table, "w") as f:
        f.write("nothing here\n")
    rc, out, err = run([os.path.join(SRC, "scripts", "bench"), "--plot-table", table, os.path.join(d, "x.svg")])
    check(rc != 0 and "no results table" in out + err, "a file without a table: exit %d, %r", rc, out + err)
    check(not os.path.exists(os.path.join(d, "x.svg")) or os.path.getsize(os.path.join(d, "x.svg")) == 0,
          "a chart was drawn without a table")


CASES = [
    ("systemd-analyze verify: the unit with the built binary and these man pages: no complaint",
     t_verify_built),
    ("systemd-analyze verify: the unit as shipped: no complaint but the absent binary and man page",
     t_verify_shipped),
    ("systemd-analyze security --offline=yes: overall exposure <= %.1f" % MAX_EXPOSURE, t_security),
    ("systemd: RuntimeDirectory= holds the documented admin socket (without it: exit 2)",
     t_unit_runtime_directory),
    ("systemd: ExecReload= dry run: a bad file fails the reload and leaves the daemon alone; a good one reloads",
     t_unit_reload_dry_run),
    ("Dockerfile is multi-stage: the final stage copies from the named build stage", t_docker_multistage),
    ("Dockerfile: the final stage installs the package of every library the daemon links", t_docker_runtime_libs),
    ("Dockerfile runs scripts/test in the build stage", t_docker_tests),
    ("Dockerfile's final stage runs as a non-root USER", t_docker_user),
    ("Dockerfile's final stage has a HEALTHCHECK", t_docker_healthcheck),
    ("deploy/envoy-gateway/: the image swapped, the rules over xDS (no rule files mounted), the "
     "policies' limits and costs, AI Gateway's quota Deployment started by its command",
     t_envoy_gateway_recipes),
    ("Dockerfile: /bin/ratelimit links the daemon; no RATELIMITD_CONFIG to win over envoyproxy/"
     "ratelimit's environment; the sample configuration as CMD", t_docker_envoy_command),
    ("man/ratelimitd.8 renders without a warning (groff -ww, man -l)", lambda: t_render(MAN8)),
    ("man/ratelimitd.json.5 renders without a warning (groff -ww, man -l)", lambda: t_render(MAN5)),
    ("ratelimitd(8) has its sections and SEE ALSO ratelimitd.json(5)", t_man8_sections),
    ("ratelimitd(8) documents every flag of -h and every RATELIMITD_* variable", t_man8_flags),
    ("ratelimitd.json(5) has its sections", t_man5_sections),
    ("ratelimitd.json(5) documents every option of src/config.c: default, bounds, restart-only, values",
     t_man5_options),
    ("ratelimitd.json(5)'s JSON examples pass ratelimitd -t", t_man5_examples),
    ("every conf/*.json passes ratelimitd -t", t_conf),
    ("every YAML file under deploy/ parses", t_yaml),
    ("kubernetes: the sidecar has its image, Redis URL, probes, security context, resources, ConfigMap",
     t_k8s_sidecar),
    ("kubernetes: the ConfigMap's ratelimitd.json passes ratelimitd -t", t_k8s_configmap),
    ("kubernetes: every object is well formed and its selectors, named ports, Secrets and ConfigMaps resolve",
     t_k8s_schema),
    ("kubernetes: the sidecar is scraped (annotations, PodMonitor), its NetworkPolicy admits Prometheus only",
     t_k8s_scrape),
    ("kubernetes: Redis with a password from a Secret, noeviction, a NetworkPolicy; the sidecar reads the "
     "password as a file", t_k8s_redis),
    ("kubernetes: the reloader's script sends SIGHUP on a kubelet-style ConfigMap update",
     t_k8s_reloader),
    ("kubernetes: README and runAsUser give the image's numeric uid", t_k8s_uid),
    ("systemd: the Redis password as a credential (LoadCredential=, redis.password_file), documented",
     t_unit_credential),
    ("README's Try it is what the daemon answers (run as written; the time and the ms left vary)",
     t_readme_try_it),
    ("docs/operations.md's admin API examples run as written against conf/login-protection.json",
     t_readme_admin_examples),
    ("scripts/run stops the redis-server it started on Ctrl-C, and leaves one it found", t_scripts_run_stops_its_redis),
    ("man 5's redis.url forms, man 8's recipes (every deploy/ directory), the docs' configure from a clone",
     t_doc_papercuts),
    ("make install puts the example configuration under sysconfdir, keeps an edited one; "
     "the ratelimit link", t_make_install),
    (".dockerignore keeps build dirs and in-tree build output out, every tracked file in",
     t_dockerignore),
    ("an in-tree ./configure does not break scripts/run's out-of-tree configure", t_in_tree_configure),
    ("scripts/bench --plot-table draws the results table as an SVG (gnuplot)", t_bench_plot),
]


if __name__ == "__main__":
    t = H.Tests(timeout=480)
    t.run_cases(CASES)
    sys.exit(t.finish())
