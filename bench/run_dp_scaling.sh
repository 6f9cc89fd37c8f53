#!/usr/bin/env bash
# Strong scaling of data-parallel training on this machine's CPUs: the same global workload
# (model, global batch, steps) trained by N = 1 and N = 2 processes, the threads split so that
# every run uses the same cores in all (N=1: --threads T; N=2: T/2 per process), ringtape
# (`ringtape train --nproc-per-node 2`, Gloo) next to PyTorch DDP (Gloo) in the same run.
# Prints T(N) per step, the fitted C in T(N) ~ T(1)/N + C, the all-reduce overlap, and the
# check of bench/dp_scaling_model.py against the N=2 runs (each run's --comm-timeline
# replayed with a loopback link fitted to allreduce_bench on this machine).
#
#   bench/run_dp_scaling.sh [--rounds R] [--threads T] [--workloads compute,comm] [--no-torch]
#                           [--out DIR] [--no-build]
#
# Workloads (synthetic data, resnet18 at width 64, 10 classes, SGD):
#   compute: 3x32x32 images, global batch 32: compute-bound (42.6 MiB of gradients per ~0.5 s step)
#   comm:    3x8x8 images, global batch 16: the same gradients per a ~15x shorter step, so the
#            all-reduce is a large part of it (what the model check needs to be meaningful)
# Everything lands in --out (default out/dp_scaling): the runs' directories and logs,
# allreduce.json, table.md, summary.json. bench/dp_scaling_report.py --out DIR prints the
# tables again. On 2 cores: N=2 processes share the cores N=1 has, so T(2) cannot beat T(1)
# in compute (but by avoiding N=1's own threading losses); T(2) - T(1) is what data
# parallelism costs here (communication not hidden, the Gloo threads' CPU time, two
# processes' overheads), not what it costs on GPUs (README.md, "Many GPUs"). The idle wait
# and noise notes of bench_lib.sh apply; each run's `others' CPU` is the share of the
# machine other processes took while it ran.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh

rounds=2 threads=2 workloads=compute,comm torch=1 out=out/dp_scaling build=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --out) out="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "run_dp_scaling.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((threads >= 2 && threads % 2 == 0)) || { echo "run_dp_scaling.sh: --threads must be even (split over 2 processes)" >&2; exit 2; }
PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"
if ((build)); then
  bazel build //cli:ringtape //bench:allreduce_bench >/dev/null 2>&1 || bazel build //cli:ringtape //bench:allreduce_bench
fi
RT=bazel-bin/cli/ringtape
mkdir -p "$out"

# name: image CxHxW | global batch | steps | ringtape's stem stride (auto) | description
declare -A SPEC=(
  [compute]="3x32x32 32 10 1"
  [comm]="3x8x8 16 14 2"
)
skip=2  # warm-up steps left out of T(N)

# timed NAME CMD...: runs CMD (its output into $out/$w/NAME.log) and writes the share of the
# machine's CPU time that other processes took meanwhile to $out/$w/NAME.others (busy time
# from /proc/stat less the command's own user + system time, over the elapsed CPU time).
timed() {
  local name=$1 b0 t0 b1 t1 _real user sys TIMEFORMAT='%R %U %S'
  shift
  read -r b0 t0 < <(cpu_jiffies)
  { time "$@" >"$out/$w/$name.log" 2>&1; } 2>"$out/$w/$name.time" || { cat "$out/$w/$name.log" >&2; exit 1; }
  read -r b1 t1 < <(cpu_jiffies)
  read -r _real user sys <"$out/$w/$name.time"
  awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v u="$user" -v s="$sys" \
    'BEGIN { o = (b / 100 - u - s) / (t / 100); if (o < 0) o = 0; printf "%.3f\n", o }' >"$out/$w/$name.others"
  awk '{ if ($1 > 0.05) printf "WARNING: other processes used %.0f%% of the CPUs during this run\n", 100 * $1 }' \
    "$out/$w/$name.others" >&2
}

run_rt() {  # workload n round
  local w=$1 n=$2 r=$3 size G steps stride d
  read -r size G steps stride <<<"${SPEC[$w]}"
  d="$out/$w/rt-n$n.r$r"
  rm -rf "$d"
  local args=(train --dataset synthetic --synthetic-size "$((G * (steps + 2)))x$size" --num-classes 10
              --model resnet18 --width 64 --epochs 1 --steps "$steps" --workers 0 --print-freq 1 --seed 0
              --device cpu --output-dir "$d")
  if ((n == 1)); then
    args+=(--threads "$threads" --batch-size "$G")
  else
    args+=(--nproc-per-node "$n" --threads "$((threads / n))" --batch-size "$((G / n))" --comm-timeline
           --allreduce library)
  fi
  wait_idle
  echo "ringtape $w N=$n round $r" >&2
  timed "rt-n$n.r$r" "$RT" "${args[@]}"
  grep -E "all-reduce:|done:" "$out/$w/rt-n$n.r$r.log" >&2 || true
}

run_torch() {  # workload n round
  local w=$1 n=$2 r=$3 size G steps stride
  read -r size G steps stride <<<"${SPEC[$w]}"
  wait_idle
  echo "torch $w N=$n round $r" >&2
  timed "torch-n$n.r$r" env MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 \
    "$PY" bench/dp_scaling_torch.py --nproc "$n" --global-batch "$G" --threads "$threads" --size "$size" \
    --small-stem --stem-stride "$stride" --steps "$((steps - skip))" --warmup "$skip" \
    --json "$out/$w/torch-n$n.r$r.json"
}

IFS=, read -r -a wl <<<"$workloads"
for w in "${wl[@]}"; do
  [[ -n "${SPEC[$w]:-}" ]] || { echo "run_dp_scaling.sh: unknown workload '$w' (compute, comm)" >&2; exit 2; }
  read -r size G steps stride <<<"${SPEC[$w]}"
  mkdir -p "$out/$w"
  rm -f "$out/$w"/torch-n*.json "$out/$w"/*.others
  cat >"$out/$w/config.json" <<EOF
{"description": "resnet18 width 64, synthetic ${size} images, 10 classes, ${steps} steps (first ${skip} left out)",
 "global_batch": $G, "threads": $threads, "skip": $skip}
EOF
  for ((r = 1; r <= rounds; ++r)); do
    run_rt "$w" 1 "$r"
    run_rt "$w" 2 "$r"
    if ((torch)); then
      run_torch "$w" 1 "$r"
      run_torch "$w" 2 "$r"
    fi
  done
done

wait_idle
echo "allreduce_bench --nproc 2 (the loopback fit)" >&2
bazel-bin/bench/allreduce_bench --nproc 2 --max-bytes $((64 << 20)) --json >"$out/allreduce.json"
grep "^note:" "$out/allreduce.json" >&2 || true
"$PY" bench/dp_scaling_report.py --out "$out" --json "$out/summary.json" | tee "$out/table.md"
