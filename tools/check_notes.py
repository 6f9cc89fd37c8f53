#!/usr/bin/env python3
"""Checks the repository's named notes, and that no file points outside the repository.

A note explains a non-obvious invariant once, and the code that relies on it refers to it by
name (GHC's convention). The definition is a comment line holding only the note's name, with
the text on the comment lines that follow:

    // Note [Name]          C++ and CUDA (.cc .h .cu .cuh .inc)
    // What holds, and why.

    # Note [Name]           Python, shell, Bazel (.py .sh .bzl BUILD WORKSPACE .bazelrc, and
    # What holds, and why.  scripts without an extension that start with #!, like .ci/run)

Everywhere else a note is referred to inside a sentence: "(Note [Name])", "see Note [Name]
in dir/file.h". A reference is never alone on its comment line (it would read as a second
definition), never followed by a colon (the old "Note [Name]: text" definitions), never split
across two lines. Markdown files (README.md, docs/*.md) may refer to notes but not define
them; what they show as code (`...` spans, fenced blocks) is not looked at.

The check reads the files git tracks (`git ls-files`; third_party/ and bazel-* are left out of
the note rules) and prints one "file:line: problem" line for each of:
  - a note referred to but never defined, defined more than once, or never referred to;
  - a reference split across lines (a "Note [" with no "]" on its line, or "Note" ending a
    line whose next line starts with "[");
  - a reference followed by a colon, or alone on its comment line;
  - a definition with no comment text on the line after it, or one in a Markdown file;
  - any tracked file that mentions a path outside the repository: ../shared,
    shared/conventions, shared/reference, shared/hooks (say it in docs/ instead).
It then exits 1. With no problem it prints one line, "notes: N defined, M references, all
found", and exits 0.

Run it from anywhere inside the repository (CI, .ci/run, does after setting up):

    python3 tools/check_notes.py

tools/check_notes_test.py tests it. This file and its test are not scanned: their examples
and test strings are not notes.
"""

import os
import re
import subprocess
import sys

# Files whose text is not scanned: this checker and its test (their examples are not notes).
SKIP = {"tools/check_notes.py", "tools/check_notes_test.py"}

CPP_EXTS = (".cc", ".h", ".cu", ".cuh", ".inc")
HASH_EXTS = (".py", ".sh", ".bzl", ".bazelrc")
HASH_NAMES = ("BUILD", "BUILD.bazel", "WORKSPACE", ".bazelrc")

OPEN = "Note ["
NOTE_RE = re.compile(r"Note \[([^\]]*)\]")
DEF_RE = {
    "cpp": re.compile(r"^\s*//\s*Note \[([^\]]+)\]\s*$"),
    "hash": re.compile(r"^\s*#\s*Note \[([^\]]+)\]\s*$"),
    # In Markdown: a line holding only a note, maybe as a heading, list item, quote or comment.
    "md": re.compile(r"^\s*(?:#+|//|[-*>])?\s*Note \[([^\]]+)\]\s*$"),
}
COMMENT = {"cpp": "//", "hash": "#"}
SPLIT_WORD_RE = re.compile(r"\bNote\s*$")  # "Note" at the end of a line, its name on the next
CODE_SPAN_RE = re.compile(r"`[^`]*`")
COMMENT_LINE_RE = re.compile(r"^\s*(?://|#)")
PUNCT_RE = re.compile(r"^[\s(),.;:\]]*$")
NEXT_BRACKET_RE = re.compile(r"^\s*(?://|#)?\s*\[")
OUTSIDE_RE = re.compile(r"\.\./shared\b|\bshared/(?:conventions|reference|hooks)\b")


def kind_of(path, first_line=""):
    """How `path` writes its comments: "cpp", "hash", "md", or None (not scanned for notes)."""
    if path in SKIP or path.startswith("third_party/") or path.split("/")[0].startswith("bazel-"):
        return None
    name = os.path.basename(path)
    if name.endswith(CPP_EXTS):
        return "cpp"
    if name.endswith(HASH_EXTS) or name in HASH_NAMES:
        return "hash"
    if name.endswith(".md"):
        return "md"
    if "." not in name and first_line.startswith("#!"):  # a script: .ci/run
        return "hash"
    return None


def alone(line, kind):
    """Whether `line` is a comment line (a Markdown line) holding only references and punctuation."""
    if kind == "md":
        text = line
    elif COMMENT_LINE_RE.match(line):
        text = COMMENT_LINE_RE.sub("", line, count=1)
    else:
        return False  # code with a trailing comment
    return bool(NOTE_RE.search(text)) and bool(PUNCT_RE.match(NOTE_RE.sub("", text)))


def markdown_prose(lines):
    """The lines with code left out: fenced blocks blanked, inline `code` spans removed.

    What Markdown shows as code (the README's example of the syntax, say) is not a note.
    """
    out, fenced = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        elif fenced:
            out.append("")
        else:
            out.append(CODE_SPAN_RE.sub("", line))
    return out


def read_text(path):
    """The file's text, or None for a binary file or one that cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace")


def scan(root, files):
    """Scans `files` (paths relative to `root`).

    Returns (defs, refs, problems): defs and refs map a note's name to its [(file, line)],
    problems is a list of (file, line, text) for everything but the per-note counts.
    """
    defs, refs, problems = {}, {}, []
    for path in files:
        if path in SKIP:
            continue
        text = read_text(os.path.join(root, path))
        if text is None:
            continue
        lines = text.split("\n")
        for i, line in enumerate(lines, 1):
            m = OUTSIDE_RE.search(line)
            if m:
                problems.append((path, i, "points outside the repository (%s): say it here, "
                                 "e.g. in docs/" % m.group(0)))
        kind = kind_of(path, lines[0] if lines else "")
        if kind is None:
            continue
        if kind == "md":
            lines = markdown_prose(lines)
        for i, line in enumerate(lines, 1):
            if SPLIT_WORD_RE.search(line) and i < len(lines) and NEXT_BRACKET_RE.match(lines[i]):
                problems.append((path, i, "reference split across lines: 'Note' ends the line, "
                                 "its '[' starts the next"))
            if OPEN not in line:
                continue
            d = DEF_RE[kind].match(line)
            if d and kind == "md":
                problems.append((path, i, "a note is defined in Markdown: define it in the code, "
                                 "refer to it here inside a sentence"))
                continue
            if d:
                name = d.group(1)
                defs.setdefault(name, []).append((path, i))
                nxt = lines[i] if i < len(lines) else ""
                body = nxt.strip()
                if not body.startswith(COMMENT[kind]) or not body[len(COMMENT[kind]):].strip():
                    problems.append((path, i, "definition of Note [%s] has no comment text on the "
                                     "next line (a reference alone on its line reads as a "
                                     "definition)" % name))
                continue
            if alone(line, kind):
                problems.append((path, i, "a reference alone on its comment line: write it inside "
                                 "the sentence it belongs to"))
            pos = 0
            while True:
                start = line.find(OPEN, pos)
                if start < 0:
                    break
                m = NOTE_RE.match(line, start)
                if not m:
                    problems.append((path, i, "reference split across lines: '%s' has no ']' on "
                                     "its line" % line[start:].strip()))
                    break
                name = m.group(1)
                refs.setdefault(name, []).append((path, i))
                if line[m.end():m.end() + 1] == ":":
                    problems.append((path, i, "Note [%s] followed by ':': a definition is the name "
                                     "alone on its line, a reference is inside text" % name))
                pos = m.end()
    return defs, refs, problems


def check(root, files):
    """Returns (problems, summary): problems sorted "file:line: problem" strings."""
    defs, refs, problems = scan(root, files)
    for name, places in defs.items():
        if len(places) > 1:
            for path, line in places:
                problems.append((path, line, "Note [%s] is defined %d times (%s): keep one "
                                 "definition, make the others references"
                                 % (name, len(places), ", ".join("%s:%d" % p for p in places))))
        if name not in refs:
            path, line = places[0]
            problems.append((path, line, "Note [%s] is defined but never referred to" % name))
    for name, places in refs.items():
        if name not in defs:
            path, line = places[0]
            problems.append((path, line, "Note [%s] is referred to (%d times) but never defined"
                             % (name, len(places))))
    problems.sort()
    out = ["%s:%d: %s" % p for p in problems]
    summary = "notes: %d defined, %d references, %s" % (
        len(defs), sum(len(v) for v in refs.values()),
        "all found" if not out else "%d problems" % len(out))
    return out, summary


def tracked_files(root):
    """`git ls-files` in `root`."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         stdout=subprocess.PIPE).stdout
    return [f for f in out.decode("utf-8", errors="replace").split("\0") if f]


def repo_root():
    """The checkout this file is in (`git rev-parse --show-toplevel`), wherever it is run from."""
    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=here, check=True,
                          stdout=subprocess.PIPE).stdout.decode().strip()


def main():
    root = repo_root()
    problems, summary = check(root, tracked_files(root))
    for p in problems:
        print(p)
    print(summary)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
