#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""doc_snippets.py -- every code block of README.md, docs/*.md and
examples/*.md is checked.

ctest runs it once per kind of block (tests/CMakeLists.txt): doc_blocks
(every block is marked as below), doc_snippets_c, doc_snippets_python and
doc_snippets_shell.

The convention, for whoever writes documentation:

* Every fenced block names its language: ```c, ```python, ```sh (or bash,
  console) or ```text. `text` is for output, formats, diagrams and the
  like, never for something a reader would run or compile; it is not
  checked. Any other language needs a skip mark (below).
* A ```c block is a whole program (with main): compiled with -Wall -Wextra
  -Werror against include/kvlink.h and the built libkvlink, then run; it
  must exit 0. A ```python block is a whole script run with the built
  binding (python/ on PYTHONPATH, $KVLINK_LIBRARY); it must exit 0. Use the
  embedded store (mem:) in whole programs.
* A ```sh block is read line by line (a `$ ` prompt in a console block
  marks the commands; the rest is output): each `kvlink CMD` (also
  build/kvlink) must be a command whose `kvlink CMD --help` succeeds and
  lists every --option the line gives it; each `make TARGET` a target of
  the Makefile; each `ctest -R NAME` match a test; each path into the
  repository (tests/..., scripts/..., examples/..., fuzz/..., python/...)
  exist, and each build/... program exist in the build; each KVL_* or
  KVLINK_* variable set on the line be read somewhere in the sources; each
  examples/*.py command accept its options (--help lists them).
* An HTML comment on the line right before the fence changes that:
    <!-- snippet: wrap FILE -->    (c, python) a fragment: the block is
        pasted into tests/snippets/FILE in place of the line that holds
        @SNIPPET@; FILE declares what the fragment assumes (an engine's
        pools, its forward pass) and checks what it did afterwards. The
        result is built and run as a whole program.
    <!-- snippet: skip REASON -->  not checked; the reason is required.

C programs are built with the build's sanitizers (--sanitize) and every
program runs for at most RUN_LIMIT_S seconds (a hang, not a speed limit).

usage: doc_snippets.py blocks|c|python|shell --root DIR [--build DIR]
         [--cc CC] [--lib LIBKVLINK] [--tool KVLINK] [--sanitize LIST]
Exit: 0 all checked blocks pass; 1 a block fails (each failure names
FILE:LINE); 77 (skipped) when there is nothing this kind can run here
(no C compiler, no Python with numpy, a sanitizer build for Python).
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

LANGS = {"c": "c", "python": "python", "sh": "shell", "bash": "shell",
         "console": "shell", "text": "text"}
MARK = re.compile(r"^<!--\s*snippet:\s*(\S+)\s*(.*?)\s*-->\s*$")
RUN_LIMIT_S = 120  # only catches a hang


class Block:
    def __init__(self, path, line, lang, text, mark, mark_arg, mark_line):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.mark, self.mark_arg, self.mark_line = mark, mark_arg, mark_line

    def where(self, root):
        return "%s:%d" % (os.path.relpath(self.path, root), self.line)


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "*.md")) +
        glob.glob(os.path.join(root, "examples", "*.md")))


def blocks_of(path):
    out = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([^\s`]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3)
        start = i + 1
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent)
                        else line)
            i += 1
        i += 1
        mark = mark_arg = None
        mark_line = 0
        if start >= 2:
            mm = MARK.match(lines[start - 2].strip())
            if mm:
                mark, mark_arg, mark_line = mm.group(1), mm.group(2), start - 1
        out.append(Block(path, start, lang, "\n".join(body) + "\n", mark,
                         mark_arg, mark_line))
    return out


def all_blocks(root):
    out = []
    for f in doc_files(root):
        out += blocks_of(f)
    return out


def kind(b):
    return LANGS.get(b.lang)


# ------------------------------------------------------------- the marks

def check_marks(args, blocks):
    bad = []
    for b in blocks:
        w = b.where(args.root)
        if b.mark is not None and b.mark not in ("wrap", "skip"):
            bad.append("%s: unknown mark 'snippet: %s' (wrap FILE or skip "
                       "REASON)" % (w, b.mark))
            continue
        if b.mark == "skip":
            if not b.mark_arg:
                bad.append("%s: 'snippet: skip' needs a reason" % w)
            continue
        if not b.lang:
            bad.append("%s: a block without a language: name it (```c, "
                       "```python, ```sh, or ```text for output)" % w)
        elif kind(b) is None:
            bad.append("%s: ```%s is not checked: use c, python, sh or "
                       "text, or mark it <!-- snippet: skip REASON -->"
                       % (w, b.lang))
        elif b.mark == "wrap":
            if kind(b) not in ("c", "python"):
                bad.append("%s: 'snippet: wrap' is for c and python "
                           "blocks" % w)
                continue
            f = os.path.join(args.root, "tests", "snippets", b.mark_arg)
            if not os.path.isfile(f):
                bad.append("%s: wrap: no tests/snippets/%s" % (w, b.mark_arg))
            elif "@SNIPPET@" not in open(f, encoding="utf-8").read():
                bad.append("%s: tests/snippets/%s has no @SNIPPET@ line"
                           % (w, b.mark_arg))
    counts = {}
    for b in blocks:
        k = "skipped" if b.mark == "skip" else (kind(b) or "unknown")
        counts[k] = counts.get(k, 0) + 1
    print("doc_blocks: %d blocks in %d files: %s" % (
        len(blocks), len(doc_files(args.root)),
        ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items()))))
    return bad


# --------------------------------------------------- programs: c, python

def program_text(args, b, comment):
    """The program a block stands for: itself, or pasted into its wrapper."""
    if b.mark != "wrap":
        return b.text
    f = os.path.join(args.root, "tests", "snippets", b.mark_arg)
    if not os.path.isfile(f):
        return None
    out = []
    for line in open(f, encoding="utf-8").read().split("\n"):
        if "@SNIPPET@" in line:
            out.append("%s %s (%s) %s" % (comment[0], b.where(args.root),
                                          "from the document", comment[1]))
            out.append(b.text.rstrip("\n"))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def run(cmd, env=None, cwd=None, timeout=RUN_LIMIT_S, stdin=None):
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout,
                           stdin=subprocess.DEVNULL if stdin is None
                           else stdin,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode("utf-8", "replace")
        return -1, out + "\n(killed: still running after %d s)" % timeout


def check_c(args, blocks, tmp):
    cc = args.cc or shutil.which("cc") or shutil.which("gcc")
    if not cc or not args.lib:
        print("SKIP: no C compiler or no library to link")
        return None
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
             "-I" + os.path.join(args.root, "include"), "-pthread"]
    if args.sanitize:
        flags += ["-fsanitize=" + args.sanitize, "-fno-sanitize-recover=all"]
    libdir = os.path.dirname(os.path.abspath(args.lib))
    bad = []
    n = 0
    for b in blocks:
        if kind(b) != "c" or b.mark == "skip":
            continue
        n += 1
        w = b.where(args.root)
        src = os.path.join(tmp, "snippet%d.c" % n)
        exe = os.path.join(tmp, "snippet%d" % n)
        text = program_text(args, b, ("/*", "*/"))
        if text is None:
            bad.append("%s: wrap: no tests/snippets/%s" % (w, b.mark_arg))
            continue
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        rc, out = run([cc] + flags + [src, "-o", exe, args.lib,
                                      "-Wl,-rpath," + libdir, "-lm"])
        if rc != 0:
            lines = out.rstrip().split("\n")
            if len(lines) > 40:
                lines = lines[:40] + ["(%d more lines)" % (len(lines) - 40)]
            bad.append("%s: does not compile%s:\n%s" % (
                w, " (in tests/snippets/%s)" % b.mark_arg if b.mark else "",
                "\n".join(lines)))
            continue
        rc, out = run([exe], cwd=tmp)
        print("%s: compiled and ran: exit %d%s" % (w, rc, (
            "\n" + out.rstrip()) if out.strip() else ""))
        if rc != 0:
            bad.append("%s: exits %d" % (w, rc))
    return bad, n


def python_with_numpy():
    for py in (os.environ.get("KVLINK_PYTHON"), sys.executable, "python3",
               "/usr/bin/python3"):
        if not py or not shutil.which(py):
            continue
        rc, _ = run([py, "-c", "import numpy"])
        if rc == 0:
            return py
    return None


def check_python(args, blocks, tmp):
    if args.sanitize:
        print("SKIP: sanitizer build (%s): Python needs an unsanitized "
              "libkvlink.so" % args.sanitize)
        return None
    py = python_with_numpy()
    if not py:
        print("SKIP: no python3 with numpy (Debian: python3-numpy)")
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(args.root, "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if args.lib:
        env["KVLINK_LIBRARY"] = os.path.abspath(args.lib)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    bad = []
    n = 0
    for b in blocks:
        if kind(b) != "python" or b.mark == "skip":
            continue
        n += 1
        w = b.where(args.root)
        src = os.path.join(tmp, "snippet%d.py" % n)
        text = program_text(args, b, ("#", ""))
        if text is None:
            bad.append("%s: wrap: no tests/snippets/%s" % (w, b.mark_arg))
            continue
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        rc, out = run([py, src], env=env, cwd=tmp)
        print("%s: ran: exit %d%s" % (w, rc, (
            "\n" + out.rstrip()) if out.strip() else ""))
        if rc != 0:
            bad.append("%s: exits %d" % (w, rc))
    return bad, n


# ------------------------------------------------------------------ shell

REPO_DIRS = ("tests/", "scripts/", "examples/", "fuzz/", "python/", "bench/",
             "tools/", "include/", "src/", "docs/", "cmake/", ".ci/")
BUILD_DIR = re.compile(r"^(?:\./)?build(?:-[a-z]+)?/(.+)$")


def shell_commands(b):
    """(line number, command) of each command line of a shell block."""
    lines = b.text.split("\n")
    prompts = b.lang == "console"
    out, cur, first = [], "", 0
    for i, line in enumerate(lines):
        if prompts and not cur:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not cur:
            first = b.line + 1 + i
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.strip().startswith("#"):
            out.append((first, cur))
        cur = ""
    return out


def words(cmd):
    """The words of a command line, with those of quoted sub-commands
    (sh -c '...', $(...)) too."""
    s = re.sub(r"(^|\s)#.*$", "", cmd)
    try:
        ws = shlex.split(s, posix=True)
    except ValueError:
        ws = s.split()
    out = []
    for w in ws:
        if " " in w:
            out += words(w)
        else:
            out.append(w)
    return out


def segments(ws):
    """Splits words at |, ;, && and ||."""
    seg = []
    for w in ws:
        if w in ("|", ";", "&&", "||"):
            if seg:
                yield seg
            seg = []
        else:
            seg.append(w)
    if seg:
        yield seg


class ShellChecker:
    def __init__(self, args):
        self.args = args
        self.help = {}
        self.makefile = open(os.path.join(args.root, "Makefile"),
                             encoding="utf-8").read()
        self.sources = None
        self.tests = None

    def kvlink_help(self, cmd):
        if cmd not in self.help:
            rc, out = run([self.args.tool, cmd, "--help"])
            self.help[cmd] = out if rc == 0 else None
        return self.help[cmd]

    def source_text(self):
        if self.sources is None:
            parts = []
            for d in ("src", "tests", "tools", "python", "fuzz", "scripts",
                      "bench", "examples", "cmake"):
                for dp, _, fs in os.walk(os.path.join(self.args.root, d)):
                    for f in fs:
                        if f.endswith((".c", ".h", ".py", ".sh", ".cu",
                                       ".txt", ".cmake", ".in")):
                            try:
                                parts.append(open(os.path.join(dp, f),
                                                  encoding="utf-8",
                                                  errors="replace").read())
                            except OSError:
                                pass
            parts.append(self.makefile)
            parts.append(open(os.path.join(self.args.root, "CMakeLists.txt"),
                              encoding="utf-8").read())
            self.sources = "\n".join(parts)
        return self.sources

    def test_names(self):
        if self.tests is None:
            self.tests = []
            if self.args.build:
                rc, out = run(["ctest", "--test-dir", self.args.build, "-N"])
                if rc == 0:
                    self.tests = re.findall(r"Test\s+#\d+:\s+(\S+)", out)
        return self.tests

    def check(self, where, cmd):
        errs = []
        ws = words(cmd)
        for seg in segments(ws):
            # Variables set in front of a command, or exported.
            j = 0
            if seg and seg[0] == "export":
                j = 1
            while j < len(seg) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=",
                                            seg[j]):
                name = seg[j].split("=", 1)[0]
                if (name.startswith(("KVL_", "KVLINK_")) and
                        not re.search(r"\b%s\b" % re.escape(name),
                                      self.source_text())):
                    errs.append("%s: %s is read nowhere in the sources"
                                % (where, name))
                j += 1
            errs += self.check_words(where, seg[j:])
        return errs

    def check_words(self, where, seg):
        errs = []
        if not seg:
            return errs
        prog = seg[0]
        base = os.path.basename(prog)
        for k, w in enumerate(seg):
            if os.path.basename(w) == "kvlink" and (k == 0 or "/" in w):
                errs += self.check_kvlink(where, seg[k + 1:])
                break
        if base == "make":
            for t in seg[1:]:
                if t.startswith("-") or "=" in t:
                    continue
                if not re.search(r"^%s\s*:" % re.escape(t), self.makefile,
                                 re.M):
                    errs.append("%s: make %s: no such target in the "
                                "Makefile" % (where, t))
        if base == "ctest" and "-R" in seg:
            pat = seg[seg.index("-R") + 1] if seg.index("-R") + 1 < len(
                seg) else ""
            names = self.test_names()
            if names and not any(re.search(pat, n) for n in names):
                errs.append("%s: ctest -R %s matches no test" % (where, pat))
        for w in seg:
            errs += self.check_path(where, w)
        if base.startswith("python") and len(seg) > 1 and \
                seg[1].startswith("examples/") and seg[1].endswith(".py"):
            errs += self.check_example(where, seg[1], seg[2:])
        return errs

    def check_kvlink(self, where, rest):
        if not rest:
            return []
        sub = rest[0]
        if sub.startswith("-"):
            return []
        text = self.kvlink_help(sub)
        if text is None:
            return ["%s: kvlink %s: no such command (kvlink %s --help "
                    "fails)" % (where, sub, sub)]
        errs = []
        for w in rest[1:]:
            for o in re.findall(r"(?:^|[\[\s])(--[a-z][a-z0-9-]*)", w):
                if not re.search(r"(^|[\s\[,])%s\b" % re.escape(o), text,
                                 re.M):
                    errs.append("%s: kvlink %s has no option %s (not in "
                                "kvlink %s --help)" % (where, sub, o, sub))
        return errs

    def check_path(self, where, w):
        w = w.strip("'\"()[],")
        if "…" in w or "$" in w or "*" in w:
            return []
        m = BUILD_DIR.match(w)
        if m and self.args.build:
            rel = m.group(1)
            cand = [os.path.join(self.args.build, rel)]
            # A program this build did not make (fuzz targets are built by
            # fuzz/run.sh, cmocka tests only where cmocka is): its source.
            name = os.path.basename(rel)
            for d in ("tests", "bench", "fuzz", "tools"):
                for ext in (".c", ".cu"):
                    cand.append(os.path.join(self.args.root, d, name + ext))
            if not any(os.path.exists(c) for c in cand):
                return ["%s: %s: no %s in the build" % (where, w, rel)]
            return []
        p = w[2:] if w.startswith("./") else w
        if p.startswith(REPO_DIRS) or p == "python":
            if not os.path.exists(os.path.join(self.args.root, p)):
                return ["%s: %s does not exist" % (where, w)]
        return []

    def check_example(self, where, script, rest):
        py = python_with_numpy() or sys.executable
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(self.args.root, "python")
        if self.args.lib and not self.args.sanitize:
            env["KVLINK_LIBRARY"] = os.path.abspath(self.args.lib)
        key = "py:" + script
        if key not in self.help:
            rc, out = run([py, os.path.join(self.args.root, script),
                           "--help"], env=env)
            self.help[key] = out if rc == 0 else None
        text = self.help[key]
        if text is None:
            return ["%s: %s --help fails" % (where, script)]
        return ["%s: %s has no option %s" % (where, script, o)
                for w in rest
                for o in re.findall(r"^(--[a-z][a-z0-9-]*)", w)
                if o not in text]


def check_shell(args, blocks):
    if not args.tool or not os.access(args.tool, os.X_OK):
        print("SKIP: no kvlink tool to ask")
        return None
    sc = ShellChecker(args)
    bad, n, lines = [], 0, 0
    for b in blocks:
        if kind(b) != "shell" or b.mark == "skip":
            continue
        n += 1
        for line, cmd in shell_commands(b):
            lines += 1
            bad += sc.check("%s:%d" % (os.path.relpath(b.path, args.root),
                                       line), cmd)
    print("doc_snippets_shell: %d blocks, %d command lines" % (n, lines))
    return bad, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("blocks", "c", "python", "shell"))
    ap.add_argument("--root", required=True)
    ap.add_argument("--build")
    ap.add_argument("--cc")
    ap.add_argument("--lib")
    ap.add_argument("--tool")
    ap.add_argument("--sanitize", default="")
    args = ap.parse_args()
    args.root = os.path.abspath(args.root)
    blocks = all_blocks(args.root)
    if args.what == "blocks":
        bad = check_marks(args, blocks)
        n = len(blocks)
    else:
        with tempfile.TemporaryDirectory(prefix="kvl-snippets.") as tmp:
            if args.what == "c":
                r = check_c(args, blocks, tmp)
            elif args.what == "python":
                r = check_python(args, blocks, tmp)
            else:
                r = check_shell(args, blocks)
        if r is None:
            return 77
        bad, n = r
        if n == 0:
            print("FAIL: no %s block found in the documents" % args.what)
            return 1
    for e in bad:
        print("FAIL: " + e)
    print("%s: %d blocks, %d failures" % (args.what, n, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
