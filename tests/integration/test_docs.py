#!/usr/bin/env python3
"""The documents' links: every relative link and #anchor of README.md,
docs/*.md and the other Markdown files of the tree (deploy/, examples/,
src/proto/, man/ when it has any) resolves.

- One case per file: each `[text](target)`, `![alt](target)` and `[ref]: target`
  outside code (fenced blocks and `code spans` are not links) that is not a URL
  names a file or directory of the tree, and its `#anchor` a heading of that
  Markdown file (or of the file itself for a bare `#anchor`).
- Anchors are GitHub's: the heading's text as rendered (code spans and links
  keep their text, emphasis and HTML go), lowercased, every character that is
  not a letter, digit, `_`, `-` or space dropped, spaces to `-`; a repeated
  heading gets `-1`, `-2`, ... in order.  Explicit `<a name="...">`/`id="..."`
  anchors count too.
- The checker itself: fed a tree of its own with a broken file link, a broken
  anchor, a link inside code (not one), duplicate headings and a link out of the
  tree, it reports exactly the broken ones.
- The README stays a front door (at most 300 lines) and every guide in docs/
  is reachable from docs/README.md, the guides' index.
"""

import glob
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import check, eq  # noqa: E402

SRC = H.RL_SRCDIR
FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
INLINE = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
                    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\bname=\"([^\"]+)\"|\bid=\"([^\"]+)\"")


def prose_lines(text):
    """(line number, line) of everything outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line


def strip_code_spans(line):
    """The line with every `code span` blanked out (its links are text)."""
    return re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading's Markdown text (before de-duplication)."""
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2), heading)            # code spans: their text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)                  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                                      # HTML tags
    text = re.sub(r"(\*+)(.+?)\1", r"\2", text)                              # emphasis
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor a Markdown text defines, GitHub's way."""
    seen, out = {}, set()
    prev = None
    for _, line in prose_lines(text):
        heading = None
        m = ATX.match(line)
        if m:
            heading = m.group(2)
        elif prev is not None and prev.strip() and SETEXT.match(line) and not prev.lstrip().startswith(("|", "-", "*", ">")) \
                and not ATX.match(prev):
            heading = prev.strip()
        if heading is not None:
            base = slug(heading)
            n = seen.get(base, 0)
            out.add(base if n == 0 else "%s-%d" % (base, n))
            seen[base] = n + 1
        for a, b in HTML_ANCHOR.findall(line):
            out.add(a or b)
        prev = line
    return out


def links(text):
    """(line number, target) of every link of the text outside code."""
    for n, line in prose_lines(text):
        bare = strip_code_spans(line)
        m = REFDEF.match(bare)
        if m:
            yield n, m.group(1).strip("<>")
            continue
        for m in INLINE.finditer(bare):
            yield n, m.group(2).strip("<>")


def broken_links(root, path, cache=None):
    """["file:line: target: why"] for the file `path` (relative to root)."""
    cache = {} if cache is None else cache

    def anchors_of(full):
        if full not in cache:
            with open(full, encoding="utf-8") as f:
                cache[full] = anchors(f.read())
        return cache[full]

    full = os.path.join(root, path)
    with open(full, encoding="utf-8") as f:
        text = f.read()
    out = []
    top = os.path.abspath(root)
    for n, target in links(text):
        where = "%s:%d: %s" % (path, n, target)
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            if not target:
                out.append("%s: an empty link" % where)
            continue                                     # a URL: not ours to check
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(full), file_part)) if file_part else full
        if os.path.commonpath([top, os.path.abspath(dest)]) != top:
            out.append("%s: outside the tree" % where)
            continue
        if not os.path.exists(dest):
            out.append("%s: no such file" % where)
            continue
        if anchor:
            if not dest.endswith(".md") or not os.path.isfile(dest):
                out.append("%s: an anchor into what is not a Markdown file" % where)
            elif anchor not in anchors_of(dest):
                out.append("%s: no heading %r in %s" % (where, anchor, os.path.relpath(dest, root)))
    return out


def doc_files():
    """The tree's Markdown files whose links are checked."""
    files = ["README.md"] + sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md")))
    for pat in ("man/*.md", "deploy/*.md", "deploy/*/*.md", "examples/*.md", "examples/*/*.md", "src/proto/*.md"):
        files += sorted(os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, pat)))
    return files


def t_file(path):
    out = broken_links(SRC, path)
    check(not out, "broken links:\n%s", "\n".join(out))


def t_slugs():
    cases = [
        ("Envoy's rate limit service: the rules", "envoys-rate-limit-service-the-rules"),
        ("Smoothing: `max_delay`", "smoothing-max_delay"),
        ("Hybrid mode: local decisions, asynchronous counts", "hybrid-mode-local-decisions-asynchronous-counts"),
        ("Envoy's rate limit service (gRPC)", "envoys-rate-limit-service-grpc"),
        ("#### `redis.sentinel`", None),
        ("Reset, block and give back: what each algorithm does", "reset-block-and-give-back-what-each-algorithm-does"),
        ("Instructions per request (`--callgrind`)", "instructions-per-request---callgrind"),
        ("**Bold** and [a link](x.md) and <b>html</b>", "bold-and-a-link-and-html"),
        ("Ünïcode Ärger", "ünïcode-ärger"),
    ]
    for heading, want in cases:
        if want is None:
            eq(anchors(heading + "\n"), {"redissentinel"}, "the anchor of %r" % heading)
        else:
            eq(slug(heading), want, "the slug of %r" % heading)
    eq(anchors("# A\n## A\n### A\n```\n# A\n```\nB\n===\n"), {"a", "a-1", "a-2", "b"},
       "anchors of repeated headings, one in a code block, one setext")


def t_checker_fails_on_broken():
    """A tree of its own: the checker names each broken link, and only those."""
    d = tempfile.mkdtemp(prefix="docs-", dir=H.tmpdir())
    os.makedirs(os.path.join(d, "docs"))
    with open(os.path.join(d, "docs", "guide.md"), "w") as f:
        f.write("# Guide\n\n## Setup\n\n## Setup\n\n## Smoothing: `max_delay`\n")
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write("# Top\n\n"
                "[ok](docs/guide.md) [ok](docs/guide.md#setup) [ok](docs/guide.md#setup-1) "
                "[ok](docs/guide.md#smoothing-max_delay) [ok](#top) [ok](docs/) [url](https://example.com/x#y)\n"
                "[missing file](docs/nowhere.md)\n"
                "[missing anchor](docs/guide.md#setup-2)\n"
                "[missing here](#bottom)\n"
                "`[in code](docs/nowhere.md)`\n"
                "```\n[in a block](docs/nowhere.md)\n```\n"
                "[ref]: docs/gone.md\n"
                "[out](../../etc/passwd)\n"
                "[anchor into a directory](docs/#x)\n")
    got = broken_links(d, "README.md")
    want = ["README.md:4: docs/nowhere.md: no such file",
            "README.md:5: docs/guide.md#setup-2: no heading 'setup-2' in docs/guide.md",
            "README.md:6: #bottom: no heading 'bottom' in README.md",
            "README.md:11: docs/gone.md: no such file",
            "README.md:12: ../../etc/passwd: outside the tree",
            "README.md:13: docs/#x: an anchor into what is not a Markdown file"]
    eq(got, want, "what the checker reports")
    # and the same broken link in a real guide's text fails that guide's case
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    with open(os.path.join(d, "README.md"), "w") as f:
        f.write(readme + "\nSee [the gone section](docs/operations.md#no-such-section).\n")
    shutil.rmtree(os.path.join(d, "docs"))
    shutil.copytree(os.path.join(SRC, "docs"), os.path.join(d, "docs"))
    for name in os.listdir(SRC):
        if name not in ("docs", "README.md") and not name.startswith("."):
            os.symlink(os.path.join(SRC, name), os.path.join(d, name))
    got = broken_links(d, "README.md")
    check(len(got) == 1 and "no-such-section" in got[0], "the README with one bad anchor added: %r", got)


def t_front_door():
    with open(os.path.join(SRC, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    n = readme.count("\n")
    check(n <= 300, "README.md has %d lines: the manual goes in docs/, the README stays a front door", n)
    for cmd in ("scripts/run", "scripts/test"):
        check(cmd in readme, "README.md does not give %s", cmd)
    index = os.path.join(SRC, "docs", "README.md")
    with open(index, encoding="utf-8") as f:
        listed = {os.path.normpath(os.path.join("docs", t.partition("#")[0])) for _, t in links(f.read())}
    guides = {os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "docs", "*.md"))} - {"docs/README.md"}
    missing = sorted(guides - listed)
    check(not missing, "docs/README.md does not link %s", ", ".join(missing))


CASES = [("%s: every relative link and #anchor resolves" % p, (lambda p=p: t_file(p))) for p in doc_files()] + [
    ("anchors are GitHub's: lowercase, punctuation dropped, spaces to -, repeats -1, -2", t_slugs),
    ("the checker reports a missing file, a missing anchor, a ref link, a link out of the tree; "
     "not links in code", t_checker_fails_on_broken),
    ("README.md is a front door (<= 300 lines, both commands) and docs/README.md links every guide",
     t_front_door),
]


if __name__ == "__main__":
    t = H.Tests(timeout=120)
    t.run_cases(CASES)
    sys.exit(t.finish())
