#!/usr/bin/env bash
# One CPU training step (forward, loss, backward, SGD) of ringtape and PyTorch, in the same
# run, for the two configurations of the CPU-training milestone (ResNet50 on ImageNet-sized
# images; the default Fashion-MNIST model of `ringtape train`); prints the ratios.
# --channels-last runs both in NHWC (ringtape's default layout).
#   bench/run_train_step_bench.sh [--steps N] [--channels-last]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"
extra=()
steps=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --channels-last) extra+=(--channels-last); shift ;;
    *) echo "run_train_step_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bazel build //bench:train_step_bench >/dev/null 2>&1 || bazel build //bench:train_step_bench
configs=(
  "--model resnet50 --batch 8 --size 3x224x224 --classes 1000 --width 64"
  "--model resnet18 --batch 128 --size 1x28x28 --classes 10 --width 16 --small-stem --stem-stride 2"
)
for c in "${configs[@]}"; do
  # shellcheck disable=SC2086
  rt=$(OMP_NUM_THREADS=2 bazel-bin/bench/train_step_bench $c --steps "$steps" "${extra[@]}")
  # shellcheck disable=SC2086
  pt=$(MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 "$PY" bench/train_step_bench_torch.py $c --steps "$steps" --threads 2 "${extra[@]}")
  echo "$rt"
  echo "$pt"
  "$PY" - "$rt" "$pt" <<'PYEOF'
import json, sys
r, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ratio = r["step_ms"] / t["step_ms"]
print(f"{r['model']} batch {r['batch']} {r['size']}: ringtape {r['step_ms']:.1f} ms, torch {t['step_ms']:.1f} ms, "
      f"ratio {ratio:.2f} (target <= 1.2: {'MET' if ratio <= 1.2 else 'NOT MET'})")
PYEOF
done
