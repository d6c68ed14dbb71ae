#!/usr/bin/env python3
"""docs/budgets.md ("Token and cost budgets") holds: its configuration is
conf/budgets.json, and its console blocks are what the daemon answers.

The daemon is started with conf/budgets.json (listen and Redis given on the
command line) against a real Redis; the guide's console blocks are read from
the guide itself and replayed in order, one case per block:

- `$ curl -s[i] localhost:8080/PATH -d 'BODY'`: the same POST; its status
  (200 without -i; with -i the status line, reason phrase included), every
  header shown but Date in order (Content-Length, X-RateLimit-Reset,
  Retry-After, RateLimit's t= and RateLimit-Policy's w= loosely: they follow
  the clock), and the JSON body: every field and value exactly, except
  reset_ms / retry_after_ms (zero where the guide shows zero, else within
  (0, window]), a calendar period's window_ms (28..31 days) and a
  reservation (its shape; the guide's id stands for the real one in later
  requests).
- `$ kill -STOP` / `$ kill -CONT` of redis-server: Redis paused / resumed.
- A block after a resume is waited for (the kept charge is applied within
  a bound), not slept for.
"""

import http.client
import json
import os
import re
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

GUIDE = os.path.join(H.RL_SRCDIR, "docs", "budgets.md")
CONF = os.path.join(H.RL_SRCDIR, "conf", "budgets.json")
DAY = 86400 * 1000
RESERVATION = re.compile(r"^[0-9a-zA-Z._-]{1,4400}$")
LOOSE_MS = ("reset_ms", "retry_after_ms")

state = {"ids": {}}  # the guide's reservation ids -> the real ones


def blocks():
    """The guide's console blocks: a list of [(command, [output lines])]."""
    out, cur, inside = [], None, False
    for line in open(GUIDE, encoding="utf-8").read().split("\n"):
        if line.startswith("```"):
            if inside:
                out.append(cur)
                inside = False
            elif line.strip() == "```console":
                inside, cur = True, []
            continue
        if inside:
            if line.startswith("$ "):
                cur.append((line[2:], []))
            else:
                check(cur, "%s: output before any command: %r", GUIDE, line)
                cur[-1][1].append(line)
    return out


def strip_comments(v):
    if isinstance(v, dict):
        return {k: strip_comments(x) for k, x in v.items() if not k.startswith("_")}
    if isinstance(v, list):
        return [strip_comments(x) for x in v]
    return v


def guide_config():
    text = open(GUIDE, encoding="utf-8").read()
    m = re.search(r"```json\n(.*?)\n```", text, re.S)
    check(m, "%s: no json block", GUIDE)
    return json.loads(m.group(1))


def daemon():
    if "d" not in state:
        state["redis"] = H.Redis()
        state["d"] = H.Daemon(open(CONF, encoding="utf-8").read(), redis=state["redis"])
    return state["d"]


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=H.HTTP_TIMEOUT)
    try:
        conn.request("POST", path, body=body.encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})
        r = conn.getresponse()
        return r.status, r.reason, r.getheaders(), r.read().decode()
    finally:
        conn.close()


def same_json(got, want, where, window=None):
    if isinstance(want, dict):
        check(isinstance(got, dict), "%s: expected an object, got %r", where, got)
        eq(list(got.keys()), list(want.keys()), where + ": fields")
        win = want.get("window_ms", window)
        if want.get("period"):
            w = got.get("window_ms")
            check(isinstance(w, int) and 28 * DAY <= w <= 31 * DAY, "%s: a month's window_ms %r", where, w)
            win = w
        for k, v in want.items():
            sub = "%s.%s" % (where, k)
            if k == "window_ms" and want.get("period"):
                continue
            if k in LOOSE_MS:
                g = got[k]
                if v == 0:
                    eq(g, 0, sub)
                else:
                    check(isinstance(g, int) and 0 < g <= (win or g), "%s: %r not in (0, %s]", sub, g, win)
            elif k == "reservation":
                check(isinstance(got[k], str) and RESERVATION.match(got[k]), "%s: %r", sub, got[k])
                state["ids"][v] = got[k]
            else:
                same_json(got[k], v, sub, win)
        return
    if isinstance(want, list):
        check(isinstance(got, list) and len(got) == len(want), "%s: expected %r, got %r", where, want, got)
        for i, (g, w) in enumerate(zip(got, want)):
            same_json(g, w, "%s[%d]" % (where, i), window)
        return
    eq(got, want, where)


def loose_header(name, value):
    n = name.lower()
    if n in ("content-length", "x-ratelimit-reset", "retry-after"):
        return "N" if re.match(r"^\d+$", value) else value
    if n == "ratelimit":
        return re.sub(r"t=\d+", "t=N", value)
    if n == "ratelimit-policy":
        return re.sub(r"w=\d+", "w=N", value)
    return value


def answer(argv, want_lines, where):
    """Replays one curl command; Fail unless its answer is what the guide shows."""
    check(argv[0] == "curl" and argv[1] in ("-s", "-si") and argv[3] == "-d" and len(argv) == 5,
          "%s: a curl the test does not know: %r", where, argv)
    url = argv[2]
    check(url.startswith("localhost:8080/"), "%s: %r", where, url)
    path = url[len("localhost:8080"):]
    body = argv[4]
    for shown, real in state["ids"].items():
        body = body.replace(shown, real)
    status, reason, headers, raw = post(daemon().port, path, body)
    if argv[1] == "-si":
        blank = want_lines.index("")
        head, want_body = want_lines[:blank], want_lines[blank + 1:]
        eq("HTTP/1.1 %d %s" % (status, reason), head[0], where + ": status line")
        want_h = [tuple(h.split(": ", 1)) for h in head[1:] if not h.startswith("Date: ")]
        got_h = [(k, v) for k, v in headers if k.lower() != "date"]
        eq([(k, loose_header(k, v)) for k, v in got_h], [(k, loose_header(k, v)) for k, v in want_h],
           where + ": headers")
        for (k, v), (_, w) in zip(got_h, want_h):
            if k.lower() in ("retry-after", "x-ratelimit-reset") and w != "0":
                check(0 < int(v) <= int(w), "%s: %s %s not in (0, %s]", where, k, v, w)
    else:
        eq(status, 200, where + ": status")
        want_body = want_lines
    eq(len(want_body), 1, where + ": the guide shows one line of body")
    same_json(json.loads(raw), json.loads(want_body[0]), where + ": body")


def run_block(i):
    cmds = blocks()[i]
    for n, (cmd, out) in enumerate(cmds):
        where = "block %d, command %d (%s)" % (i + 1, n + 1, cmd[:60])
        argv = shlex.split(cmd, comments=True)
        if argv[0] == "kill":
            check(argv[1] in ("-STOP", "-CONT") and not out, "%s: unexpected", where)
            daemon()
            if argv[1] == "-STOP":
                state["redis"].pause()
            else:
                state["redis"].resume()
                state["resumed"] = True
            continue
        if state.pop("resumed", False):
            # the kept charge is sent again every 100 ms: wait for it to be applied
            def settled():
                try:
                    answer(argv, out, where)
                    return True
                except H.Fail as e:
                    state["last"] = str(e)
                    return False
            try:
                H.wait_for(settled, where, timeout=30)
            except H.Fail as e:
                raise H.Fail("%s; last: %s" % (e, state.get("last")))
            continue
        answer(argv, out, where)


def t_config():
    eq(guide_config(), strip_comments(json.load(open(CONF, encoding="utf-8"))),
       "the guide's configuration vs conf/budgets.json without its comments")
    rc, out, err = H.run_cli(["-t", "-c", CONF])
    check(rc == 0 and "configuration OK" in out, "-t exit %d: %s", rc, err)


def t_shape():
    got = [[shlex.split(c, comments=True)[:3] for c, _ in b] for b in blocks()]
    check(len(got) >= 7, "the guide has %d console blocks", len(got))


CASES = [("the guide's configuration is conf/budgets.json and passes -t", t_config),
         ("the guide's console blocks are curl requests and kill of redis-server", t_shape)]
for _i in range(len(blocks())):
    CASES.append(("console block %d: the daemon answers what the guide shows" % (_i + 1),
                  (lambda i=_i: run_block(i))))


if __name__ == "__main__":
    t = H.Tests(timeout=180)
    t.run_cases(CASES)
    sys.exit(t.finish())
