#!/usr/bin/env python3
"""docs/API.md, the contract, against the code and the daemon.

- Options: every row of src/config.c's tables (read by harness.config_tables,
  walked from the top table as harness.config_options names them) has its row
  in docs/API.md's option tables, with the same type, default, bounds, reload
  behaviour and enum values; and no row there names an option the tables lack.
- Every option docs/API.md lists is accepted by `ratelimitd -t`, set alone to
  its documented default or example (the row's `e.g.`), and refused past each
  bound and with a value outside its list, each problem naming the option; an
  unknown option is refused in every object.  The daemon has no way to list
  its options (a flag for that would change its behaviour), so the names come
  from the tables where they are written, and the binary holds that reading
  (and the document) to what it does.
- The configuration examples of docs/API.md pass `ratelimitd -t`.
- Metrics: every family a real daemon's /metrics serves is in docs/API.md's
  metrics table with its type, its labels and every label value it served, and
  every family there is served.
- The contract is cited by path: no comment in src/, tests/ or scripts/ names
  it without its docs/ directory, and the README and both man pages point to
  docs/API.md.

Options a check hook ties to another (burst needs a bucket algorithm, ...) are
set with that other one: COMPANIONS.  Options naming a file the loader reads
(`*_file`) get a file written by the test.
"""

import copy
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

DOC = os.path.join(H.RL_SRCDIR, "docs/API.md")
OPTION_HEADER = ["option", "type", "default", "bounds", "reload", "meaning"]
METRIC_HEADER = ["metric", "type", "labels", "meaning"]

# What config.c's check hooks require next to an option: {option: {other: value}}.
COMPANIONS = {
    # a burst of 10^15 refills within 366 days only at a limit as large
    "policies[].limits[].burst": {"policies[].limits[].algorithm": "token_bucket",
                                  "policies[].limits[].limit": 1000000000000000},
    # a concurrency limit has a lease and no window (required of the others)
    "policies[].limits[].lease": {"policies[].limits[].algorithm": "concurrency",
                                  "policies[].limits[].window": "DROP"},
    "policies[].sync_interval": {"policies[].mode": "hybrid"},
    "policies[].max_delay": {"policies[].limits[].algorithm": "gcra"},
    "redis.tls.cert_file": {"redis.tls.key_file": None},
    "redis.tls.key_file": {"redis.tls.cert_file": None},
    "rls.listen": {"rls.config": None},
    "rls.tls.cert_file": {"rls.tls.key_file": None},
    "rls.tls.key_file": {"rls.tls.cert_file": None},
    "rls.xds.server": {"rls.xds.node_id": None},
    "rls.xds.node_id": {"rls.xds.server": None},
    "rls.xds.wait_for_rules": {"rls.xds.server": None, "rls.xds.node_id": None},
    "rls.xds.tls.cert_file": {"rls.xds.tls.key_file": None},
    "rls.xds.tls.key_file": {"rls.xds.tls.cert_file": None},
    "rls.tls.client_ca_file": {"rls.tls.cert_file": None, "rls.tls.key_file": None},
    "policies[].limits[].timezone": {"policies[].limits[].period": None},
    "policies[].limits[].week_start": {"policies[].limits[].period": "week"},
    "policies[].request_limits_max": {"policies[].request_limits": True},
    "policies[].request_limits_cap": {"policies[].request_limits": True},
    "rls.request_limits_max": {"rls.request_limits": True},
    "rls.header_names.limit": {"rls.header_names.remaining": None, "rls.header_names.reset": None},
    "rls.header_names.remaining": {"rls.header_names.limit": None, "rls.header_names.reset": None},
    "rls.header_names.reset": {"rls.header_names.limit": None, "rls.header_names.remaining": None},
}  # None: the option's documented value; "DROP": left out, though required elsewhere

# Fields of which an object needs one (config.c's check hooks): {table: names};
# an object given none gets the first's documented value.
ONE_OF = {"limit_fields": ("window", "period")}

SCHEMA_WORDS = {"SCHEMA_STRING": "string", "SCHEMA_INT": "integer", "SCHEMA_DURATION": "duration",
                "SCHEMA_SIZE": "size", "SCHEMA_BOOL": "boolean", "SCHEMA_STRLIST": "list of strings",
                "SCHEMA_OBJECT": "object", "SCHEMA_ARRAY": "list of objects"}
NUMERIC = ("SCHEMA_INT", "SCHEMA_DURATION", "SCHEMA_SIZE")


# ------------------------------------------------------------ reading the doc

def doc_text():
    with open(DOC) as f:
        return f.read()


def cells(line):
    """A markdown table row's cells; a `|` inside backticks is not a separator."""
    out, cur, code = [], [], False
    for c in line.strip().strip("|"):
        if c == "`":
            code = not code
        if c == "|" and not code:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur).strip())
    return out


def doc_tables(header):
    """Rows (lists of cells) of every table of docs/API.md whose header is `header`."""
    rows, lines, i = [], doc_text().splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("|") and [c.lower() for c in cells(lines[i])] == header:
            i += 2  # the header and its |---| line
            while i < len(lines) and lines[i].startswith("|"):
                row = cells(lines[i])
                check(len(row) == len(header), "docs/API.md: a row of %d cells in a table of %d: %s",
                      len(row), len(header), lines[i])
                rows.append(row)
                i += 1
        i += 1
    return rows


def ticked(cell):
    return re.findall(r"`([^`]*)`", cell)


def doc_options():
    """{path: {column: cell}} of the option tables."""
    out = {}
    for row in doc_tables(OPTION_HEADER):
        names = ticked(row[0])
        check(len(names) == 1 and row[0] == "`%s`" % names[0],
              "docs/API.md: an option row's first cell must be one `name`: %r", row[0])
        check(names[0] not in out, "docs/API.md lists %s twice", names[0])
        out[names[0]] = dict(zip(OPTION_HEADER, row))
    check(len(out) > 60, "only %d option rows found in docs/API.md", len(out))
    return out


def documented_value(row):
    """The row's default (a leading `JSON`), else its `e.g. `JSON``, else None."""
    m = re.match(r"`([^`]*)`", row["default"])
    if m:
        return True, json.loads(m.group(1))
    for cell in (row["default"], row["meaning"]):
        m = re.search(r"e\.g\. `([^`]*)`", cell)
        if m:
            return True, json.loads(m.group(1))
    return False, None


# --------------------------------------------------- options: doc vs config.c

def t_options_match_tables():
    doc = doc_options()
    options = H.config_options()
    problems = []
    for path, f in options:
        row = doc.get(path)
        if row is None:
            problems.append("%s: no row in docs/API.md" % path)
            continue
        typ = row["type"]
        if f["type"] == "SCHEMA_ENUM":
            if not typ.startswith("one of") or set(ticked(typ)) != set(f["names"]):
                problems.append("%s: type %r, the table says one of %s" % (path, typ, f["names"]))
        elif f["type"] == "SCHEMA_CUSTOM" and f["default"] is not None and \
                isinstance(json.loads(f["default"]), (int, float)):
            if typ != "number":
                problems.append("%s: type %r, the table parses a number" % (path, typ))
        elif f["type"] == "SCHEMA_CUSTOM":
            # a parser of its own: a list, or a string of a set of values
            # (a calendar period, a day) or of the system's (a time zone)
            if not typ.startswith(("list of", "one of")) and typ != "string":
                problems.append("%s: type %r, the table parses a list or a string" % (path, typ))
        elif typ != SCHEMA_WORDS[f["type"]]:
            problems.append("%s: type %r, the table says %s" % (path, typ, SCHEMA_WORDS[f["type"]]))
        dflt = row["default"]
        if f["required"]:
            if dflt != "required":
                problems.append("%s: required in the table, default cell %r" % (path, dflt))
        elif f["default"] is not None:
            m = re.match(r"`([^`]*)`", dflt)
            try:
                same = m is not None and json.loads(m.group(1)) == json.loads(f["default"])
            except ValueError:
                same = False
            if not same:
                problems.append("%s: default %r, the table says %s" % (path, dflt, f["default"]))
        elif not dflt.startswith("none"):
            problems.append("%s: no default in the table, the cell says %r" % (path, dflt))
        if f["type"] in NUMERIC:
            if not any("%s..%s" % (a, b) in row["bounds"]
                       for a in H.config_renderings(f["min"], f["type"])
                       for b in H.config_renderings(f["max"], f["type"])):
                problems.append("%s: bounds %r, the table says %d..%d" % (path, row["bounds"], f["min"], f["max"]))
        want = "—" if f["type"] == "SCHEMA_OBJECT" else "restart" if f["restart"] else "yes"
        if row["reload"] != want:
            problems.append("%s: reload %r, the table says %r" % (path, row["reload"], want))
    extra = sorted(set(doc) - {p for p, _ in options})
    if extra:
        problems.append("docs/API.md lists options src/config.c does not have: %s" % extra)
    check(len(options) > 60, "only %d options read from src/config.c", len(options))
    check(not problems, "%d problem(s):\n%s", len(problems), "\n".join(problems))


# ----------------------------------------------------- options: doc vs -t

def rules_file():
    path = os.path.join(H.tmpdir(), "api-doc-rules.yaml")
    with open(path, "w") as f:
        f.write("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, "
                "requests_per_unit: 1}}\n")
    return path


def secret_file():
    path = os.path.join(H.tmpdir(), "api-doc-secret")
    with open(path, "w") as f:
        f.write("a-secret-of-more-than-16-bytes\n")
    return path


class Builder:
    """Configurations holding one option, made valid around it from the doc."""

    def __init__(self):
        self.doc = doc_options()
        self.fields = dict(H.config_options())
        self.tables = H.config_tables()
        # the path each table is documented under ("policies[].limits[].")
        self.prefix = {"top_fields": ""}
        for path, f in H.config_options():
            if f["sub"] and f["sub"] not in self.prefix:
                self.prefix[f["sub"]] = path + ("[]." if f["type"] == "SCHEMA_ARRAY" else ".")
        self.secret = secret_file()
        self.rules = rules_file()
        pki = H.Pki()
        ca = pki.ca("api-doc-ca")
        crt, key = pki.leaf("api-doc-server", ca)
        self.rls_tls = {"cert_file": crt, "key_file": key, "client_ca_file": ca[0]}

    def value(self, path):
        """What docs/API.md gives the option, or one its type and bounds allow."""
        f = self.fields.get(path)
        if path.startswith("rls.tls."):   # loaded by -t: a certificate and its key
            return self.rls_tls[path.rsplit(".", 1)[1]]
        if path.endswith("_file"):
            return self.secret
        if path == "rls.config":   # read by -t: a file that is there
            return self.rules
        found, v = documented_value(self.doc[path])
        if found:
            return v
        if f is None:
            raise H.Fail("%s: not an option of src/config.c, and no documented value" % path)
        if f["type"] in NUMERIC:
            return f["min"]
        if f["type"] == "SCHEMA_BOOL":
            return True
        if f["type"] == "SCHEMA_ENUM":
            return f["names"][0]
        if f["type"] == "SCHEMA_OBJECT":
            return {}
        if f["type"] == "SCHEMA_ARRAY":
            return [{}]
        raise H.Fail("docs/API.md gives %s neither a default nor an e.g. value" % path)

    @staticmethod
    def concrete(path):
        """policies[].limits[].window -> policies[0].limits[0].window (-t's spelling)."""
        return path.replace("[]", "[0]")

    @staticmethod
    def put(cfg, path, value):
        parts = path.split(".")
        node = cfg
        for part in parts[:-1]:
            if part.endswith("[]"):
                lst = node.setdefault(part[:-2], [{}])
                node = lst[0]
            else:
                node = node.setdefault(part, {})
        last = parts[-1]
        if last.endswith("[]"):
            last = last[:-2]
        node[last] = value

    def fill_required(self, node, table):
        """Every object present gets the required fields it lacks."""
        alts = ONE_OF.get(table, ())
        if alts and not any(a in node for a in alts):
            node[alts[0]] = copy.deepcopy(self.value(self.prefix[table] + alts[0]))
        for f in self.tables[table]:
            if f["required"] and f["name"] not in node:
                node[f["name"]] = copy.deepcopy(self.value(self.prefix[table] + f["name"]))
            sub, v = f["sub"], node.get(f["name"])
            if sub and isinstance(v, dict):
                self.fill_required(v, sub)
            elif sub and isinstance(v, list):
                for e in v:
                    if isinstance(e, dict):
                        self.fill_required(e, sub)

    def config(self, path, value):
        cfg = {}
        for other, v in COMPANIONS.get(path, {}).items():
            if v != "DROP":
                self.put(cfg, other, v if v is not None else self.value(other))
        self.put(cfg, path, value)
        self.fill_required(cfg, "top_fields")
        for other, v in COMPANIONS.get(path, {}).items():
            if v == "DROP":
                parts = self.concrete(other).replace("]", "").replace("[", ".").split(".")
                node = cfg
                for part in parts[:-1]:
                    node = node[int(part)] if part.isdigit() else node[part]
                node.pop(parts[-1], None)
        return cfg


def run_t(cfg):
    return H.run_cli(["-t", "-c", H.write_config(cfg, name="api-doc-")])


def t_options_accepted():
    b = Builder()
    problems = []
    for path in b.doc:
        cfg = b.config(path, b.value(path))
        rc, out, err = run_t(cfg)
        if rc != 0 or "configuration OK" not in out:
            problems.append("%s: -t exit %d with %s:\n%s" % (path, rc, json.dumps(cfg), err.strip()))
    check(not problems, "%d documented option(s) refused:\n%s", len(problems), "\n".join(problems))


def t_bounds_and_values_refused():
    b = Builder()
    problems, nbad = [], 0
    for path, row in b.doc.items():
        f = b.fields.get(path)
        if f is None:
            continue  # the first case names it
        bad = []
        if f["type"] in NUMERIC:
            bad = [(f["min"] - 1, "must be between"), (f["max"] + 1, "must be between")]
            # and the bounds themselves are taken: the table read as the binary has it
            for v in (f["min"], f["max"]):
                rc, out, err = run_t(b.config(path, v))
                if rc != 0:
                    problems.append("%s = %r (a bound): exit %d:\n%s" % (path, v, rc, err.strip()))
        elif f["type"] == "SCHEMA_ENUM":
            bad = [("no-such-value", "must be one of " + ", ".join(ticked(row["type"])))]
        for v, want in bad:
            nbad += 1
            rc, out, err = run_t(b.config(path, v))
            if rc != 1 or "%s: %s" % (b.concrete(path), want) not in err:
                problems.append("%s = %r: exit %d, expected 1 and %r:\n%s"
                                % (path, v, rc, "%s: %s" % (b.concrete(path), want), err.strip()))
    # an option nobody documented is refused in every object
    for table, prefix in b.prefix.items():
        nbad += 1
        path = prefix + "no_such_option"
        cfg = b.config(path, 1)
        rc, out, err = run_t(cfg)
        if rc != 1 or "%s: unknown option" % b.concrete(path) not in err:
            problems.append("%s: exit %d, expected an unknown option:\n%s" % (path, rc, err.strip()))
    check(nbad > 40, "only %d refusals tried", nbad)
    check(not problems, "%d problem(s):\n%s", len(problems), "\n".join(problems))


def t_config_examples():
    text = doc_text()
    start = text.index("\n## Configuration file")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```json\n(.*?)```", text[start:end], re.S)
    check(blocks, "no ```json example in docs/API.md's Configuration file section")
    for i, block in enumerate(blocks):
        rc, out, err = run_t(block)
        check(rc == 0 and "configuration OK" in out, "example %d: -t exit %d:\n%s", i + 1, rc, err.strip())


# ------------------------------------------------------------------ metrics

def t_metrics():
    doc = {}
    for row in doc_tables(METRIC_HEADER):
        names = ticked(row[0])
        check(len(names) == 1, "a metrics row's first cell must be one `name`: %r", row[0])
        labels = {}
        for part in filter(None, (p.strip() for p in row[2].split(";"))):
            t = ticked(part)
            check(t, "%s: labels cell %r: each label is `name` or `name`: `value`, ...", names[0], row[2])
            labels[t[0]] = set(t[1:])
        doc[names[0]] = (row[1], labels)
    check(len(doc) > 15, "only %d metrics in docs/API.md", len(doc))
    # rules of one and two levels, with envoyproxy/ratelimit's names on: every label served
    rules = H.write_config("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, "
                           "requests_per_unit: 5}\n  - key: b\n    descriptors:\n      - key: c\n"
                           "        rate_limit: {unit: minute, requests_per_unit: 5}\n", name="rules-")
    cfg = {"policies": [{"name": "api", "limits": [{"algorithm": "fixed_window", "limit": 1, "window": "1m"}]}],
           "rls": {"config": rules, "envoy_metrics": True}}
    with H.Daemon(cfg, backend="memory") as d:
        for _ in range(2):   # one allowed, one denied
            st, _, _ = H.request(d.port, "POST", "/check", {"key": "k", "policy": "api"})
        eq(st, 429, "the second check")
        for entries in ([{"key": "a", "value": "1"}], [{"key": "b", "value": "2"}, {"key": "c", "value": "3"}]):
            st, _, _ = H.request(d.port, "POST", "/json", {"domain": "d", "descriptors": [{"entries": entries}]})
            eq(st, 200, "a /json check of rule %r" % (entries,))
        types, series = H.scrape_metrics(d.port)
    problems = []
    for name, kind in sorted(types.items()):
        if name not in doc:
            problems.append("%s (%s) is served, not in docs/API.md" % (name, kind))
            continue
        dkind, dlabels = doc[name]
        if dkind != kind:
            problems.append("%s: served as %s, docs/API.md says %s" % (name, kind, dkind))
        got = {}
        for s in ([name] if kind != "histogram" else [name + "_bucket", name + "_sum", name + "_count"]):
            for label, values in series.get(s, {}).items():
                got.setdefault(label, set()).update(values)
        if set(got) != set(dlabels):
            problems.append("%s: labels %s served, %s in docs/API.md" % (name, sorted(got), sorted(dlabels)))
        for label, values in got.items():
            listed = dlabels.get(label)
            if listed and not values <= listed:
                problems.append("%s{%s}: %s served, not in docs/API.md" % (name, label, sorted(values - listed)))
    for name in sorted(set(doc) - set(types)):
        problems.append("%s is in docs/API.md, not served" % name)
    check(not problems, "%d problem(s):\n%s", len(problems), "\n".join(problems))


# -------------------------------------------------------------- citations

def t_cited_by_path():
    src = H.RL_SRCDIR
    files = subprocess.run(["git", "-C", src, "ls-files", "src", "tests", "scripts"], capture_output=True,
                           text=True)
    if files.returncode == 0 and files.stdout.strip():
        paths = files.stdout.split()
    else:  # a tarball: no git
        paths = [os.path.relpath(os.path.join(dp, f), src) for top in ("src", "tests", "scripts")
                 for dp, _, fs in os.walk(os.path.join(src, top)) for f in fs]
    bare = []
    for p in paths:
        full = os.path.join(src, p)
        if not os.path.isfile(full):
            continue
        with open(full, errors="replace") as f:
            for n, line in enumerate(f, 1):
                if re.search(r"(?<![\w/])API\.md", line):
                    bare.append("%s:%d: %s" % (p, n, line.strip()))
    check(len(paths) > 50, "only %d files under src/, tests/, scripts/", len(paths))
    check(not bare, "cite docs/API.md by its path:\n%s", "\n".join(bare))
    for p in ("README.md", "man/ratelimitd.8", "man/ratelimitd.json.5"):
        with open(os.path.join(src, p)) as f:
            check("docs/API.md" in f.read(), "%s does not point to docs/API.md", p)


CASES = [
    ("every option of src/config.c's tables is in docs/API.md with its type, default, bounds, reload",
     t_options_match_tables),
    ("every option docs/API.md lists passes ratelimitd -t with its documented value", t_options_accepted),
    ("ratelimitd -t takes every documented bound and refuses past it, outside every value list, "
     "and unknown options",
     t_bounds_and_values_refused),
    ("docs/API.md's configuration examples pass ratelimitd -t", t_config_examples),
    ("every metric /metrics serves is in docs/API.md with its type, labels and values, and back",
     t_metrics),
    ("docs/API.md is cited by path and linked from the README and the man pages", t_cited_by_path),
]


if __name__ == "__main__":
    t = H.Tests(timeout=300)
    t.run_cases(CASES)
    sys.exit(t.finish())
