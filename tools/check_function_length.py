#!/usr/bin/env python3
"""Lists the functions longer than 120 lines in the product code and the benchmarks.

A function's length is counted from the line holding its name (a lambda's: the line of its
"[") to the line of its closing brace, both included; a template<...> line or an attribute
line above the name is not counted. So a function whose name and "{" share a line and whose
"}" is 119 lines further down is 120 lines long, the most allowed.

What is scanned: every .cc, .cu, .h, .cuh and .inc file git tracks except those under tests/
and third_party/ (no generated source is tracked): the library, the command line, bench/,
examples/ and the emulator (cuda_emu/). What counts as a function: a body opened at namespace
or class scope (free functions, member functions defined in or out of the class, constructors
with their initializer lists, operators) and a lambda whose body is opened there (a lambda
assigned to a global, or one inside a global table's initializer). A lambda or local class
inside a function is part of that function's length. The scanner matches braces after
blanking comments, string and character literals (raw strings too) and preprocessor lines;
it needs neither a compiler nor ctags.

It prints one "file:line: function is N lines (limit 120)" for each, and exits 1; with none
it prints "functions: N scanned, none over 120 lines" and exits 0. Run it from anywhere
inside the repository (CI, .ci/run, does after setting up):

    python3 tools/check_function_length.py

tools/check_function_length_test.py tests it on synthetic sources.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_notes  # noqa: E402  (the repository's root and tracked files)

LIMIT = 120
EXTS = (".cc", ".cu", ".h", ".cuh", ".inc")
EXCLUDED_DIRS = ("tests/", "third_party/")

# Words that may follow a function's parameter list before its body.
_QUALIFIER = r"(?:const|volatile|noexcept|override|final|mutable|constexpr|try|&&|&|->\s*[\w:<>,\s*&]+)"
_AFTER_PARAMS = re.compile(r"^(?:\s*" + _QUALIFIER + r")*\s*$")
# A lambda's introducer with an optional parameter list and specifiers, ending the text before
# its "{". The introducer follows "=", "(", ",", "{", "return" or starts the text: "a[i] {" is
# not a lambda.
_LAMBDA = re.compile(r"(?:^|[=(,{]|\breturn)\s*(\[[^\[\]]*\])\s*(?:<[^<>]*>\s*)?(?:\((?:[^()]|\([^()]*\))*\))?"
                     r"(?:\s*(?:mutable|constexpr|noexcept|->\s*[\w:<>,\s*&]+))*\s*$")
_NAME = re.compile(r"(~?[A-Za-z_]\w*(?:\s*::\s*~?[A-Za-z_]\w*)*|operator\s*(?:\(\s*\)|\[\s*\]|[^\s(]+))\s*$")


def blank(text):
    """Returns `text` with comments, literals and preprocessor lines turned to spaces.

    The result has the same length and the same newlines, so an offset in it is an offset in
    `text`. A literal keeps two of its quotes at its start ("" or '' then spaces), so
    `extern "C"` still reads as `extern ""`.
    """
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline: a "#" here starts a directive

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            # A directive runs to the end of its line, on through lines ending in a backslash.
            j = i
            while j < n:
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                if text.startswith("/*", j):  # a block comment inside the directive
                    end = text.find("*/", j + 2)
                    j = n if end < 0 else end + 2
                    continue
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c in "\"'":
            if c == "'" and _digit_separator(text, i):
                i += 1
                continue
            j = _raw_string_end(text, i) if c == '"' else -1
            if j < 0:
                j = _quoted_end(text, i)
            wipe(i, j)
            out[i] = c
            if i + 1 < n:
                out[i + 1] = c
            i = j
        else:
            i += 1
    return "".join(out)


def _digit_separator(text, i):
    """Whether the apostrophe at `i` is inside a number (1'000'000), not a character literal."""
    k = i - 1
    while k >= 0 and (text[k].isalnum() or text[k] in "_.'"):
        k -= 1
    return k + 1 < i and text[k + 1].isdigit()


def _raw_string_end(text, i):
    """The offset past the raw string literal whose quote is at `i` (R"delim( ... )delim", maybe
    with a u8, u, U or L prefix: no escapes, it ends at the first )delim"), or -1 when the quote
    opens no raw string."""
    prefix = re.search(r"(?:u8|[uUL])?R$", text[max(0, i - 3):i])
    if not prefix:
        return -1
    before = i - len(prefix.group(0)) - 1
    if before >= 0 and (text[before].isalnum() or text[before] == "_"):
        return -1  # an identifier ending in R before a plain string
    open_paren = text.find("(", i)
    delim = text[i + 1:open_paren]
    end = text.find(")" + delim + '"', open_paren)
    return len(text) if end < 0 else end + len(delim) + 2


def _quoted_end(text, i):
    """The offset past the "..." or '...' literal whose opening quote is at `i`, escapes skipped;
    an unclosed one ends with its line."""
    j = i + 1
    while j < len(text) and text[j] != text[i] and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, len(text))


def _closing(text, open_at, pair="()"):
    """The offset of the bracket closing the one at `open_at` (pair: its opening and closing
    characters), or len(text) when it is never closed."""
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == pair[0]:
            depth += 1
        elif text[k] == pair[1]:
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def _top_level_close(head):
    """The offset just past the last ")" closing a group opened in `head`, or -1 with none.

    Also returns whether `head` leaves a "(" open (the "{" is then inside an expression).
    """
    depth = 0
    last = -1
    for k, c in enumerate(head):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                last = k + 1
    return last, depth > 0


def _params_start(head):
    """The offset of the "(" opening the parameter list: the first one at depth 0, skipping
    the "()" of an `operator()` and the arguments of an attribute ("__launch_bounds__(256)")."""
    m = re.search(r"\boperator\s*\(\s*\)", head)
    k = head.find("(", m.end() if m else 0)
    while k >= 0 and re.search(r"\b(?:__launch_bounds__|__attribute__|__declspec|alignas)\s*$", head[:k]):
        k = head.find("(", _closing(head, k) + 1)
    return k


def _ctor_init_tail(head):
    """Whether `head` ends inside a constructor's initializer list ("Foo(int a) : a_(a), b_")."""
    p = _params_start(head)
    if p < 0:
        return False
    rest = head[_closing(head, p) + 1:]
    return re.match(r"^(?:\s*" + _QUALIFIER + r")*\s*:(?!:)", rest) is not None


def _function_name(head):
    """(offset, name) of the name before `head`'s parameter list, template arguments dropped
    ("Foo<T>::bar", "gemm<float>" -> "gemm"); (0, "") when there is none (a macro's braces)."""
    end = _params_start(head)
    text = head[:end].rstrip()
    if text.endswith(">") and not re.search(r"\boperator\s*\S*$", text):
        depth = 0
        for k in range(len(text) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(text[k], 0)
            if depth == 0:
                text = text[:k]
                break
    m = _NAME.search(text)
    if not m:
        return 0, ""
    return m.start(1), re.sub(r"\s+", "", m.group(1))


def classify(head):
    """What a "{" opens, from the text since the previous statement (`head`, blanked).

    Returns (kind, name offset in head, name): kind is "function", "lambda", "namespace"
    (scanned like namespace scope: namespaces, extern "C", classes), "init" (an initializer:
    scanned for lambdas) or "member-init" (a brace initializer in a constructor's list).
    """
    stripped = head.rstrip()
    lam = _LAMBDA.search(stripped)
    if lam:
        # One in a constructor's initializer list ("mp_([&] { ... }())") is part of the constructor.
        return ("member-init", 0, "") if _ctor_init_tail(stripped) else ("lambda", lam.start(1), "lambda")
    if re.search(r"\bnamespace\b", stripped) and "(" not in stripped:
        return "namespace", 0, ""
    if re.search(r'\bextern\s*""\s*$', stripped):
        return "namespace", 0, ""
    close, open_expr = _top_level_close(stripped)
    if open_expr:
        return "init", 0, ""
    in_ctor_inits = _ctor_init_tail(stripped)
    if close >= 0 and (_AFTER_PARAMS.match(stripped[close:]) or (in_ctor_inits and stripped.endswith("}"))):
        name_at, name = _function_name(stripped)
        if name:
            return "function", name_at, name
    if in_ctor_inits and re.search(r"[\w>]$", stripped):
        return "member-init", 0, ""
    if re.search(r"\b(?:class|struct|union)\b", stripped) and not re.search(r"=\s*$", stripped):
        if not re.search(r"\benum\b", stripped):
            return "namespace", 0, ""
    return "init", 0, ""


def functions(text):
    """Yields (line, name, length) for each function or lambda body at namespace/class scope."""
    clean = blank(text)
    line_of = _line_index(clean)
    results = []
    _scan(clean, 0, "namespace", line_of, results)
    return results


def _line_index(clean):
    starts = [0]
    for k, c in enumerate(clean):
        if c == "\n":
            starts.append(k + 1)

    def line_of(offset):
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1
    return line_of


def _match_brace(clean, open_at):
    """The offset of the "}" closing the "{" at `open_at` (len(clean) - 1 if unclosed)."""
    return min(_closing(clean, open_at, "{}"), len(clean) - 1)


def _scan(clean, start, scope, line_of, results):
    """Scans from `start` (just inside a "{", or the file's start) to its "}"; returns the
    offset after that "}". `scope` is "namespace" (heads end at ";", "{", "}" and access
    labels) or "init" (heads also end at ",")."""
    head_start = start
    k = start
    n = len(clean)
    while k < n:
        c = clean[k]
        if c == "}":
            return k + 1
        if c == ";" or (c == "," and scope == "init"):
            head_start = k + 1
        elif c == ":" and scope == "namespace" and re.search(
                r"\b(?:public|private|protected)\s*$", clean[head_start:k]):
            head_start = k + 1
        elif c == "{":
            head = clean[head_start:k]
            kind, name_at, name = classify(head)
            if kind in ("function", "lambda"):
                close = _match_brace(clean, k)
                first = line_of(head_start + name_at)
                results.append((first, name, line_of(close) - first + 1))
                k = close + 1
                if scope == "namespace" and not _top_level_close(head)[1]:
                    head_start = k
                continue
            if kind == "member-init":
                # Part of the constructor's head: the body's "{" comes after it.
                k = _match_brace(clean, k) + 1
                continue
            k = _scan(clean, k + 1, kind, line_of, results)
            # A braced initializer inside parentheses ("f(int a = {}) {") is part of its head.
            if not _top_level_close(head)[1]:
                head_start = k
            continue
        k += 1
    return n


def product_files(root):
    """The tracked C++/CUDA sources outside tests/ and third_party/ (a file deleted but not yet
    staged is left out)."""
    return sorted(p for p in check_notes.tracked_files(root)
                  if p.endswith(EXTS) and not p.startswith(EXCLUDED_DIRS) and os.path.isfile(os.path.join(root, p)))


def check(root, files, limit=LIMIT):
    """Returns (problems, summary) for `files` (paths relative to `root`)."""
    problems = []
    count = 0
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for line, name, length in functions(text):
            count += 1
            if length > limit:
                problems.append("%s:%d: %s is %d lines (limit %d)" % (path, line, name, length, limit))
    return problems, "functions: %d scanned, none over %d lines" % (count, limit)


def main():
    root = check_notes.repo_root()
    problems, summary = check(root, product_files(root))
    print("\n".join(problems or [summary]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
