#!/usr/bin/env python3
"""Every kernel instantiation compiled into the emulated test programs is launched by some test
(Note [Kernel coverage] in cuda_emu/coverage.cc).

Each emulated test writes emu_kernels.txt into its undeclared outputs (RINGTAPE_EMU_KERNEL_LOG,
.bazelrc): "compiled KEY" for every kernel instantiation its programs have, "launched KEY" for
those they ran. This joins the logs of the given tests (all tests under the folder when no label
is given) and fails, naming each one, when an instantiation is compiled but never launched.

  tools/emu_kernel_coverage.py TESTLOGS [//pkg:test ...]

TESTLOGS is the emulated build's bazel-testlogs (`bazel info --config=cuda-emu bazel-testlogs`).
Exit status: 0 all launched, 1 some never launched, 2 no log found or a log unreadable.
"""
import os
import sys
import zipfile

LOG = "emu_kernels.txt"


def read_log(text):
    """(compiled, launched) sets of keys from one log's text; raises ValueError on a bad line."""
    compiled, launched = set(), set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line:
            continue
        kind, _, key = line.partition(" ")
        if kind not in ("compiled", "launched") or not key:
            raise ValueError(f"line {n}: expected 'compiled KEY' or 'launched KEY', got {line!r}")
        (compiled if kind == "compiled" else launched).add(key)
    return compiled, launched


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
    compiled, launched = set(), set()
    missing_logs = []
    for label, folder in zip(labels or [testlogs], folders):
        texts = logs_of_test(folder)
        if not texts:
            missing_logs.append(label)
            continue
        for path, text in texts:
            try:
                c, l = read_log(text)
            except ValueError as e:
                print(f"emu_kernel_coverage: {path}: {e}", file=sys.stderr)
                return 2
            compiled |= c
            launched |= l
    # A test whose programs have no kernel (the library fakes' own tests) writes no log; no log
    # at all means the variable was not set.
    if len(missing_logs) == len(folders):
        print("emu_kernel_coverage: no kernel log (emu_kernels.txt in test.outputs) for any test; run the tests "
              "with --config=cuda-emu, whose .bazelrc sets RINGTAPE_EMU_KERNEL_LOG", file=sys.stderr)
        return 2
    never = sorted(compiled - launched)
    stray = sorted(launched - compiled)  # launched but not listed compiled: a log cut short
    print(f"kernel instantiations launched: {len(compiled) - len(never)} of {len(compiled)} compiled"
          f" ({len(folders)} tests, {len(missing_logs)} of them without kernels)")
    for key in never:
        print(f"  never launched: {key}")
    for key in stray:
        print(f"  launched but not in any 'compiled' list (a log cut short?): {key}")
    if never:
        print("Each instantiation above is CUDA code that no emulated test ran: add a test that launches it "
              "(tests/cuda/<op>_cuda_test.cc), or remove the instantiation.")
    return 1 if never or stray else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
