#!/usr/bin/env bash
# Builds //bench:conv_bench, runs it and PyTorch's twin back to back over ResNet50's conv
# shapes, and prints the comparison table (see bench/README.md).
#
#   bench/run_conv_bench.sh [--repeats N] [--warmup N] [--rounds R] [--threads N]
#                           [--channels-last] [--only SUBSTRING] [--out DIR] [--check]
#                           [--malloc-env-both]
#
# --rounds R: run the pair R times, alternating (ringtape, torch, ringtape, ...), and compare
#   per-shape medians over the rounds: steadier totals on a noisy machine (default 1).
# --check: exit 1 when the count-weighted total ratio misses the target (1.5).
# --malloc-env-both: run ringtape under PyTorch's glibc malloc settings too (see below).
# Results (JSON and the printed output) go to DIR (default out/conv_bench, ignored by git).
set -euo pipefail

start="$PWD"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"  # Debian's python3 has torch; pyenv's does not

repeats=3
rounds=1
warmup=1
threads=2
out=out/conv_bench
common=()
check=()
rt_env=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --channels-last) common+=(--channels-last); shift ;;
    --only) common+=(--only "$2"); shift 2 ;;
    --out) out="$2"; [[ "$out" = /* ]] || out="$start/$out"; shift 2 ;;
    --check) check=(--check); shift ;;
    --malloc-env-both) rt_env=(MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000); shift ;;
    -h|--help) sed -n '2,13p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_conv_bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
common+=(--repeats "$repeats" --warmup "$warmup")

bazel build //bench:conv_bench
mkdir -p "$out"
# Earlier results would mix with this run's (a single run's files beside rounds' files).
rm -f "$out"/ringtape*.json "$out"/ringtape*.txt "$out"/torch*.json "$out"/torch*.txt "$out"/table.txt

# Waits for an idle machine before each program (wait_idle).
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

rt_json=()
th_json=()
for ((r = 1; r <= rounds; r++)); do
  sfx=""
  ((rounds > 1)) && sfx=".$r"
  rt_json+=("$out/ringtape$sfx.json")
  th_json+=("$out/torch$sfx.json")
  round=""
  ((rounds > 1)) && round=" round $r/$rounds"

  echo
  wait_idle
  echo "== ringtape$round (OMP_NUM_THREADS=$threads${rt_env[*]:+ ${rt_env[*]}})"
  env "${rt_env[@]}" OMP_NUM_THREADS="$threads" bazel-bin/bench/conv_bench --shapes bench/conv_shapes.txt \
    "${common[@]}" --json "$out/ringtape$sfx.json" | tee "$out/ringtape$sfx.txt"

  echo
  wait_idle
  echo "== PyTorch$round (torch.set_num_threads($threads), glibc malloc never trims or mmaps)"
  # Without these glibc hands big blocks back to the OS when they are freed (munmap, trim)
  # and the next op faults fresh pages in: PyTorch is 10-20% slower so on these convs here.
  # ringtape runs as it is (its CPU allocator is glibc's aligned_alloc, so caching is its
  # own business) unless --malloc-env-both gives it the same settings.
  MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 OMP_NUM_THREADS="$threads" \
    "$PY" bench/conv_bench_torch.py --threads "$threads" "${common[@]}" --json "$out/torch$sfx.json" \
    | tee "$out/torch$sfx.txt"
done

echo
"$PY" bench/compare_conv_bench.py --ringtape "${rt_json[@]}" --torch "${th_json[@]}" --target 1.5 "${check[@]}" \
  | tee "$out/table.txt"
