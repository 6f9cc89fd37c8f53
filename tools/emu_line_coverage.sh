#!/usr/bin/env bash
# Line coverage of the device code (issue 36 item 8b): builds the emulated tests that CI's emu
# stage runs with the .cu files of kernels/cuda (where every kernel lives) compiled for gcov
# (--config=cuda-emu-cov, .bazelrc), runs them, and reports per file the lines of __global__
# and __device__ functions that some test ran (tools/emu_line_coverage.py). --list names every
# line never run. Not in CI: a build of its own (about 15 minutes on 2 cores) and tests about
# 1.5x slower; run it after adding kernels or tests.
#
#   tools/emu_line_coverage.sh [--list]
set -uo pipefail
cd "$(dirname "$0")/.."
mapfile -t tests < <(bazel query --output=label "attr(tags, '\\bemu\\b', tests(//...))" 2>/dev/null)
[ "${#tests[@]}" -gt 0 ] || { echo "no test tagged emu (bazel query failed?)" >&2; exit 2; }
execroot=$(bazel info --config=cuda-emu-cov execution_root 2>/dev/null)
bindir=$(bazel info --config=cuda-emu-cov bazel-bin 2>/dev/null)
# Fresh counts: gcov adds to what a .gcda holds.
[ -d "$bindir" ] && find "$bindir" -name '*.gcda' -delete
bazel test --config=cuda-emu-cov --cache_test_results=no -- "${tests[@]}" ||
  echo "(some tests failed: the counts are of what ran)"
python3 tools/emu_line_coverage.py "$execroot" "$bindir" "$@"
