#!/usr/bin/env python3
"""Checks the naming convention of kernels/cuda (Note [Kernel headers] in kernels/cuda/BUILD):
a file's name says who may include it.

  kernels/cuda/NAME.h     the host interface: launchers, the runtime's wrappers, plans. Host
                          C++ that the C++ compiler reads; the engine and every room above it
                          may include it. No device code: no __global__, __shared__, kernel
                          launch (<<< or RT_LAUNCH), and __device__ only inside a #define
                          (RT_HOST_DEVICE: functions both compilers compile).
  kernels/cuda/NAME.cuh   inside the room: device code (kernels' helpers, the launch macros)
                          or host code only the .cu files use (cuDNN's backend wrappers).
                          Included by kernels/cuda's own files and by tests, never by a room
                          above.
  kernels/cuda/NAME.cu    one op family's kernels and their launchers.
  kernels/cuda/NAME.cc    host code of the room that the C++ compiler builds (cuDNN's engine
                          policy, the multi-tensor plan), with its NAME.h.

And every .cu file of the product (tests aside) is in kernels/cuda: a kernel is found there.

The check reads the files git tracks (`git ls-files`) and prints one "file:line: problem" line
for each break of these rules, then exits 1; with none it prints one summary line and exits 0.
tools/check_kernel_headers_test.py tests it. Run from anywhere inside the repository:

    python3 tools/check_kernel_headers.py
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_notes  # noqa: E402  (the repository's root, tracked files and text)

ROOM = "kernels/cuda/"
ROOM_EXTS = (".h", ".cuh", ".cu", ".cc")
# Where a .cuh may be included from besides the room itself: the kernels' tests.
CUH_READERS = ("tests/",)
SOURCE_EXTS = (".cc", ".h", ".cu", ".cuh", ".inc")

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"(kernels/cuda/[^"]+)"')
DEVICE_RE = re.compile(r"\b__global__\b|\b__shared__\b|<<<|\bRT_LAUNCH\s*\(|\bRT_SHARED\s*\(")
DEVICE_FN_RE = re.compile(r"\b__device__\b")


def strip_comment(line):
    """The line without a // comment (string literals in these headers hold no //)."""
    at = line.find("//")
    return line if at < 0 else line[:at]


def check(files, read):
    """files: repository paths; read(path) -> text. Returns the problems, as strings."""
    problems = []
    for path in files:
        if path.startswith(ROOM) and "/" not in path[len(ROOM):]:
            name = path[len(ROOM):]
            if name != "BUILD" and not name.endswith(ROOM_EXTS):
                problems.append(f"{path}:1: kernels/cuda holds .h, .cuh, .cu and .cc files only (Note [Kernel headers])")
        elif path.endswith(".cu") and not path.startswith("tests/"):
            problems.append(f"{path}:1: a .cu file outside kernels/cuda: every kernel lives in kernels/cuda "
                            "(Note [Kernel headers]); move its kernels there and call their launchers")
        if not path.endswith(SOURCE_EXTS):
            continue
        text = read(path)
        in_room = path.startswith(ROOM)
        for no, line in enumerate(text.splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if m and m.group(1).endswith(".cuh") and not in_room and not path.startswith(CUH_READERS):
                problems.append(f"{path}:{no}: includes {m.group(1)}, which is kernels/cuda's own (a .cuh); "
                                "include the room's host interface, a .h (Note [Kernel headers])")
            if in_room and path.endswith(".h"):
                code = strip_comment(line)
                if DEVICE_RE.search(code) or (DEVICE_FN_RE.search(code) and not code.lstrip().startswith("#")):
                    problems.append(f"{path}:{no}: device code in a host header of kernels/cuda; move it to a "
                                    ".cuh or the .cu file (Note [Kernel headers])")
    return problems


def main():
    root = check_notes.repo_root()
    files = [f for f in check_notes.tracked_files(root) if not f.startswith(("third_party/", "bazel-"))]
    problems = check(files, lambda path: check_notes.read_text(os.path.join(root, path)) or "")
    for p in problems:
        print(p)
    if problems:
        return 1
    room = [f for f in files if f.startswith(ROOM) and "/" not in f[len(ROOM):]]
    count = lambda ext: sum(f.endswith(ext) for f in room)
    print(f"kernel headers: {count('.h')} host interfaces (.h), {count('.cuh')} of the room's own (.cuh), "
          f"{count('.cu')} .cu files, all in kernels/cuda; no room above includes a .cuh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
