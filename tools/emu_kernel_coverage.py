#!/usr/bin/env python3
"""Every kernel instantiation compiled into the emulated test programs is launched by some test
(Note [Kernel coverage] in cuda_emu/coverage.cc).

Each emulated test writes emu_kernels.txt into its undeclared outputs (RINGTAPE_EMU_KERNEL_LOG,
.bazelrc). Each process of it is a run: a line "run ID pid=PID build=BUILD program=PATH", then
"ID compiled KEY" for every kernel instantiation the program has and "ID launched KEY" for those
it ran. This joins the logs of the given tests (all tests under the folder when no label is given)
and fails, naming each one, when an instantiation is compiled but never launched. A "launched"
line counts only for a key its own run lists compiled; a log holding two builds of one program
(a file reused across builds) and a line of no run (the format before run ids, a line cut short)
are refused, naming the file and line.

  tools/emu_kernel_coverage.py TESTLOGS [//pkg:test ...]

TESTLOGS is the emulated build's bazel-testlogs (`bazel info --config=cuda-emu bazel-testlogs`).
Exit status: 0 all launched, 1 some never launched, 2 no log found or a log unreadable or refused.
"""
import os
import re
import sys
import zipfile

LOG = "emu_kernels.txt"


RUN_LINE = re.compile(r"run ([0-9a-f]{16}) pid=([0-9]+) build=(\S+) program=(.+)")
KEY_LINE = re.compile(r"([0-9a-f]{16}) (compiled|launched) (.+)")


class Run:
    """One process's lines of a log (Note [Kernel coverage] in cuda_emu/coverage.cc)."""

    def __init__(self, line, pid, build, program):
        self.line, self.pid, self.build, self.program = line, pid, build, program
        self.compiled, self.launched = set(), set()


def read_log(text):
    """The runs of one log's text, {id: Run}; raises ValueError naming the line on a line that
    belongs to no run, and on two builds of one program in the log."""
    lines = text.split("\n")
    if lines[-1]:  # the writer ends every line with one: the last was cut short
        raise ValueError(f"line {len(lines)}: cut short (no newline at the end of the log): {lines[-1]!r}")
    runs = {}
    for n, line in enumerate(lines[:-1], 1):
        if m := RUN_LINE.fullmatch(line):
            rid, pid, build, program = m.groups()
            if rid in runs:
                raise ValueError(f"line {n}: run {rid} started again (first at line {runs[rid].line}): "
                                 "a log spliced from copies?")
            runs[rid] = Run(n, int(pid), build, program)
        elif m := KEY_LINE.fullmatch(line):
            rid, kind, key = m.groups()
            if rid not in runs:
                raise ValueError(f"line {n}: run {rid} has no 'run {rid} ...' line before it (a log cut or "
                                 f"spliced): {line!r}")
            (runs[rid].compiled if kind == "compiled" else runs[rid].launched).add(key)
        elif line.startswith(("compiled ", "launched ")):
            raise ValueError(f"line {n}: no run id, the format before run ids (a log appended to by an older "
                             f"build?): remove the log and rerun; got {line!r}")
        else:
            raise ValueError(f"line {n}: expected 'run ID pid=PID build=BUILD program=PATH' or "
                             f"'ID compiled KEY' or 'ID launched KEY', got {line!r}")
    first_of = {}  # program -> its first run
    for run in runs.values():
        first = first_of.setdefault(run.program, run)
        if run.build != first.build:
            raise ValueError(f"lines {first.line} and {run.line}: runs of two builds of {run.program} "
                             f"({first.build}, {run.build}): the log was reused across builds, whose launches "
                             "cannot count for each other; remove it before a run")
    return runs


def logs_of_test(folder):
    """The kernel logs under one test's testlogs folder (shards and attempts included)."""
    texts = []
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            if f == "outputs.zip":
                with zipfile.ZipFile(path) as z:
                    if LOG in z.namelist():
                        texts.append((path, z.read(LOG).decode()))
            elif f == LOG:  # outputs left unzipped
                with open(path, encoding="utf-8") as fh:
                    texts.append((path, fh.read()))
    return texts


def test_folder(testlogs, label):
    pkg, _, name = label.lstrip("/").partition(":")
    return os.path.join(testlogs, pkg, name)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    testlogs, labels = argv[1], argv[2:]
    folders = [test_folder(testlogs, l) for l in labels] if labels else [testlogs]
    compiled, launched, stray = set(), set(), set()
    runs, programs = 0, set()
    missing_logs = []
    for label, folder in zip(labels or [testlogs], folders):
        texts = logs_of_test(folder)
        if not texts:
            missing_logs.append(label)
            continue
        for path, text in texts:
            try:
                log = read_log(text)
            except ValueError as e:
                print(f"emu_kernel_coverage: {path}: {e}", file=sys.stderr)
                return 2
            for run in log.values():
                compiled |= run.compiled
                launched |= run.launched & run.compiled
                stray |= run.launched - run.compiled
                programs.add(run.program)
            runs += len(log)
    # A test whose programs have no kernel (the library fakes' own tests) writes no log; no log
    # at all means the variable was not set.
    if len(missing_logs) == len(folders):
        print("emu_kernel_coverage: no kernel log (emu_kernels.txt in test.outputs) for any test; run the tests "
              "with --config=cuda-emu, whose .bazelrc sets RINGTAPE_EMU_KERNEL_LOG", file=sys.stderr)
        return 2
    never = sorted(compiled - launched)
    stray = sorted(stray)  # launched in a run that does not list it compiled: a log cut short or spliced
    print(f"kernel instantiations launched: {len(compiled) - len(never)} of {len(compiled)} compiled"
          f" ({len(folders)} tests, {len(missing_logs)} of them without kernels; {runs} runs of {len(programs)}"
          " programs)")
    for key in never:
        print(f"  never launched: {key}")
    for key in stray:
        print(f"  launched in a run that does not list it compiled (a log cut short or spliced?): {key}")
    if never:
        print("Each instantiation above is CUDA code that no emulated test ran: add a test that launches it "
              "(tests/cuda/<op>_cuda_test.cc), or remove the instantiation.")
    return 1 if never or stray else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
