#!/usr/bin/env python3
"""Lines of device code run by the emulated tests (tools/emu_line_coverage.sh builds and runs
them with the kernels compiled for gcov: --config=cuda-emu-cov, .bazelrc).

Device code: the bodies of the __global__ and __device__ functions of kernels/cuda (.cu,
.cuh), where every kernel lives. A line counts as run when some test ran it in some instantiation;
gcov's counts of every test (each writes its own under its runfiles) and object (one per .cu
file, headers included through them) are joined.

  tools/emu_line_coverage.py EXECROOT BINDIR [--list]

EXECROOT: `bazel info --config=cuda-emu-cov execution_root`; BINDIR: that config's bin folder.
Prints per file the device lines run of those with code and the branches taken (gcov's, summed
by position on the line over instantiations: an approximation where instantiations differ),
the totals, and with --list every line never run and every line with a branch never taken
(file:line and its text). Exit status 0; 2 when no gcov data was found.
"""
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

DIRS = ("kernels/cuda/",)
DEVICE_RE = re.compile(r"\b__(global|device)__\b")


def device_lines(path):
    """The line numbers (1-based) of code inside the bodies of the file's __global__/__device__
    functions: a one-line function's line, else the body's lines but the signature's and those
    holding only braces."""
    with open(path, encoding="utf-8") as f:
        text = f.read().split("\n")
    lines = set()
    i = 0
    while i < len(text):
        if DEVICE_RE.search(text[i]) and not text[i].lstrip().startswith("//"):
            # The definition's body: from its first '{' (before a ';' that would end a
            # declaration) to the matching '}'.
            depth, started, j = 0, False, i
            while j < len(text):
                code = text[j].split("//")[0]
                if not started and ";" in code and "{" not in code:
                    break  # a declaration
                for ch in code:
                    if ch == "{":
                        depth += 1
                        started = True
                    elif ch == "}":
                        depth -= 1
                if started:
                    # Not the signature line of a multi-line body, nor lines of braces alone:
                    # gcov gives them to the function's own entry and exit, which an inlined
                    # kernel or helper never takes.
                    if text[j].strip() not in ("{", "}", "};") and (j != i or depth == 0):
                        lines.add(j + 1)
                    if depth == 0:
                        break
                j += 1
            i = max(i + 1, j + 1) if started else i + 1
        else:
            i += 1
    return lines, text


def object_path(bindir, gcda):
    """The object's path under bindir for a .gcda: tests write theirs under their own working
    folder (the object's path as compiled, bazel-out/<config>/bin/..., from the runfiles)."""
    rel = os.path.relpath(gcda, bindir)
    marker = os.sep + "bin" + os.sep
    if marker in rel:
        rel = rel.rsplit(marker, 1)[1]
    return rel


def gcov_json(execroot, bindir, gcda):
    """gcov's JSON for one .gcda, read with its object's notes (.gcno) beside it in a scratch folder."""
    rel = object_path(bindir, gcda)
    notes = os.path.join(bindir, rel[: -len(".gcda")] + ".gcno")
    if not os.path.exists(notes):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, os.path.basename(rel)[: -len(".gcda")])
        shutil.copyfile(notes, base + ".gcno")
        shutil.copyfile(gcda, base + ".gcda")
        out = subprocess.run(["gcov", "--json-format", "--stdout", "--branch-probabilities", "-o", tmp, base + ".gcda"],
                             cwd=execroot, capture_output=True, check=False)
    docs = []
    for chunk in out.stdout.decode().splitlines():
        chunk = chunk.strip()
        if chunk.startswith("{"):
            docs.append(json.loads(chunk))
    return docs


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip())
        return 2
    execroot, bindir, listing = argv[1], argv[2], "--list" in argv
    gcdas = [os.path.join(r, f) for r, _, fs in os.walk(bindir) for f in fs
             if f.endswith(".gcda") and object_path(bindir, os.path.join(r, f)).startswith(DIRS)]
    if not gcdas:
        print("emu_line_coverage: no .gcda under " + bindir + "; run tools/emu_line_coverage.sh", file=sys.stderr)
        return 2
    counts = {}  # file -> line -> count (summed over objects and instantiations)
    branches = {}  # file -> line -> [count of each branch], summed the same way
    for gcda in gcdas:
        for doc in gcov_json(execroot, bindir, gcda):
            for f in doc["files"]:
                name = os.path.normpath(f["file"])
                if not name.startswith(DIRS):
                    continue
                per = counts.setdefault(name, {})
                per_b = branches.setdefault(name, {})
                for line in f["lines"]:
                    n = line["line_number"]
                    per[n] = per.get(n, 0) + line["count"]
                    taken = per_b.setdefault(n, [])
                    for k, b in enumerate(line["branches"]):
                        if k == len(taken):
                            taken.append(0)
                        taken[k] += b["count"]
    total_code = total_run = total_br = total_br_run = 0
    never, untaken = [], []
    for name in sorted(counts):
        path = os.path.join(execroot, name)
        if not os.path.exists(path):
            continue
        dev, text = device_lines(path)
        code = [n for n in sorted(counts[name]) if n in dev]
        if not code:
            continue
        run = [n for n in code if counts[name][n] > 0]
        br = [c for n in code for c in branches[name].get(n, [])]
        total_code += len(code)
        total_run += len(run)
        total_br += len(br)
        total_br_run += sum(1 for c in br if c > 0)
        print(f"{name}: {len(run)} of {len(code)} device lines run, {sum(1 for c in br if c > 0)} of {len(br)} "
              f"branches taken")
        never += [(name, n, text[n - 1].strip()) for n in code if counts[name][n] == 0]
        untaken += [(name, n, branches[name][n], text[n - 1].strip()) for n in code
                    if counts[name][n] > 0 and 0 in branches[name].get(n, [])]
    pct = 100.0 * total_run / total_code if total_code else 0.0
    bpct = 100.0 * total_br_run / total_br if total_br else 0.0
    print(f"device lines run: {total_run} of {total_code} ({pct:.1f}%); branches taken: {total_br_run} of {total_br} "
          f"({bpct:.1f}%); from {len(gcdas)} count files")
    if listing:
        for name, n, src in never:
            print(f"  never run: {name}:{n}: {src}")
        for name, n, taken, src in untaken:
            print(f"  a branch never taken ({sum(1 for c in taken if c)} of {len(taken)} taken): {name}:{n}: {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
