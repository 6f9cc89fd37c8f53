#!/usr/bin/env bash
# One training step (forward, loss, backward, SGD) of ringtape and PyTorch, in the same run.
#
# CPU (default): the two configurations of the CPU-training milestone (ResNet50 on
# ImageNet-sized images; the default Fashion-MNIST model of `ringtape train`), 2 threads;
# prints the ratios. --channels-last runs both in NHWC (ringtape's default layout).
# --cpu-conv im2col times ringtape's own im2col + GEMM convolutions instead of oneDNN's.
# --inference times ResNet50 inference instead (eval mode, no autograd) at batch 1 and 32.
# Each side's peak resident memory (max RSS of the process) is printed with its time.
#   bench/run_train_step_bench.sh [--steps N] [--channels-last] [--cpu-conv onednn|im2col] [--inference]
#
# GPU (--gpu): ResNet50, batch 256, 3x224x224, channels-last, cuDNN benchmark mode:
# ringtape (--precision, default bf16) against PyTorch eager with torch.autocast bf16 and,
# unless --no-compile, torch.compile'd; a table of img/s, the ratio to each PyTorch row, the
# peak of tensor memory, and the fraction of MLPerf Training's ResNet50 rate per H200
# (7,950 img/s). The torch rows are skipped (with the reason) where python has no torch or
# torch sees no GPU.
#   bench/run_train_step_bench.sh --gpu [--steps N] [--batch N] [--precision P] [--no-compile]
#                                       [--rt-bin PATH] [--out DIR]
# The ringtape binary: --rt-bin, else bazel-bin's after a `bazel build` where Bazel exists,
# else gpu_check_out/bin/bench__train_step_bench (tools/gpu_check.sh prepare, for GPU machines
# without Bazel). Python: $RINGTAPE_TORCH_PYTHON, else (GPU) the first of python3 and
# /usr/bin/python3 that imports torch, (CPU) /usr/bin/python3. JSON lines and the table go to
# --out (default out/train_step_bench_gpu).
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=0 inference=0 compile=1 steps="" batch=256 precision=bf16 rt_bin="" out=out/train_step_bench_gpu
extra=()
rt_extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --channels-last) extra+=(--channels-last); shift ;;
    --cpu-conv) rt_extra+=(--cpu-conv "$2"); shift 2 ;;
    --gpu) gpu=1; shift ;;
    --inference) inference=1; extra+=(--inference); shift ;;
    --batch) batch="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --no-compile) compile=0; shift ;;
    --rt-bin) rt_bin="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "run_train_step_bench.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

if [[ $gpu -eq 0 ]]; then
  steps=${steps:-5}
  PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"
  bazel build //bench:train_step_bench >/dev/null 2>&1 || bazel build //bench:train_step_bench
  configs=(
    "--model resnet50 --batch 8 --size 3x224x224 --classes 1000 --width 64"
    "--model resnet18 --batch 128 --size 1x28x28 --classes 10 --width 16 --small-stem --stem-stride 2"
  )
  if [[ $inference -eq 1 ]]; then
    configs=(
      "--model resnet50 --batch 1 --size 3x224x224 --classes 1000 --width 64"
      "--model resnet50 --batch 32 --size 3x224x224 --classes 1000 --width 64"
    )
  fi
  rss=$(mktemp)
  for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    rt=$(OMP_NUM_THREADS=2 /usr/bin/time -f %M -o "$rss" bazel-bin/bench/train_step_bench $c --steps "$steps" "${extra[@]}" "${rt_extra[@]}")
    rt_rss=$(tail -1 "$rss")
    # shellcheck disable=SC2086
    pt=$(MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 /usr/bin/time -f %M -o "$rss" "$PY" bench/train_step_bench_torch.py $c --steps "$steps" --threads 2 "${extra[@]}")
    pt_rss=$(tail -1 "$rss")
    echo "$rt"
    echo "$pt"
    "$PY" - "$rt" "$pt" "$rt_rss" "$pt_rss" "$inference" <<'PYEOF'
import json, sys
r, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
rt_rss, pt_rss, inference = int(sys.argv[3]) / 1024, int(sys.argv[4]) / 1024, sys.argv[5] == "1"
ratio = r["step_ms"] / t["step_ms"]
what = "inference" if inference else "training step"
print(f"{r['model']} batch {r['batch']} {r['size']} {what}: ringtape {r['step_ms']:.1f} ms, torch {t['step_ms']:.1f} ms, "
      f"ratio {ratio:.2f} (target <= 1.0: {'MET' if ratio <= 1.0 else 'NOT MET'}); "
      f"peak RSS ringtape {rt_rss:.0f} MiB, torch {pt_rss:.0f} MiB")
PYEOF
  done
  rm -f "$rss"
  exit 0
fi

# ---- GPU -------------------------------------------------------------------------------
steps=${steps:-20}
mkdir -p "$out"
if [[ -z "$rt_bin" ]]; then
  if command -v bazel >/dev/null; then
    bazel build //bench:train_step_bench >/dev/null 2>&1 || bazel build //bench:train_step_bench
    rt_bin=bazel-bin/bench/train_step_bench
  else
    rt_bin=gpu_check_out/bin/bench__train_step_bench
  fi
fi
[[ -x "$rt_bin" ]] || { echo "run_train_step_bench.sh: no ringtape benchmark binary at $rt_bin (--rt-bin, or tools/gpu_check.sh prepare)" >&2; exit 3; }

# RINGTAPE_TORCH_LD_LIBRARY_PATH (set by tools/gpu_check.sh, even if empty): the library path
# PyTorch runs with, instead of one that points ringtape's binaries at other CUDA libraries.
pyenv=()
[[ -n "${RINGTAPE_TORCH_LD_LIBRARY_PATH+set}" ]] && pyenv=(env "LD_LIBRARY_PATH=$RINGTAPE_TORCH_LD_LIBRARY_PATH")
PY="${RINGTAPE_TORCH_PYTHON:-}"
if [[ -z "$PY" ]]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "${pyenv[@]}" "$p" -c 'import torch, torchvision' 2>/dev/null; then PY=$p; break; fi
  done
fi
torch_skip=""
if [[ -z "$PY" ]]; then
  torch_skip="no python3 with torch and torchvision"
elif ! "${pyenv[@]}" "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch_skip="torch ($("${pyenv[@]}" "$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')) sees no CUDA device"
fi
# A python for the table even without torch (json only).
TPY=${PY:-$(command -v python3 || echo /usr/bin/python3)}

common="--model resnet50 --batch $batch --size 3x224x224 --classes 1000 --width 64 --channels-last --device cuda --cudnn-benchmark"
results=()
run_one() {  # name, command...: runs it, keeps its last JSON line (or an error line)
  local name=$1 line
  shift
  echo "== $name: $*" >&2
  local log="$out/${name// /_}.log"
  set +e
  "$@" >"$log" 2>&1
  local rc=$?
  set -e
  cat "$log" >&2
  line=$(grep '^{' "$log" | tail -1 || true)
  if [[ -z "$line" ]]; then
    line=$("$TPY" -c 'import json, sys; print(json.dumps({"impl": sys.argv[1], "error": sys.argv[2]}))' "$name" \
      "exit $rc: $(grep -v '^{' "$log" | tail -1 | cut -c1-200)")
  fi
  results+=("$line")
}

# shellcheck disable=SC2086
run_one "ringtape $precision" "$rt_bin" $common --precision "$precision" --steps "$steps" --warmup 5
if [[ -z "$torch_skip" ]]; then
  # shellcheck disable=SC2086
  run_one "torch eager bf16" "${pyenv[@]}" "$PY" bench/train_step_bench_torch.py $common --amp bf16 --steps "$steps" --warmup 5
  if [[ $compile -eq 1 ]]; then
    # shellcheck disable=SC2086
    run_one "torch compile bf16" "${pyenv[@]}" "$PY" bench/train_step_bench_torch.py $common --amp bf16 --compile \
      --steps "$steps" --warmup 3
  fi
else
  echo "== torch rows skipped: $torch_skip" >&2
fi

printf '%s\n' "${results[@]}" >"$out/results.jsonl"
"$TPY" - "$out/results.jsonl" "$torch_skip" "$batch" <<'PYEOF' | tee "$out/table.txt"
import json, sys
MLPERF = 7950.0  # MLPerf Training ResNet50 img/s per H200 (the bar for this GPU)
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
skip = sys.argv[2]
rt = rows[0]
torch_rows = [r for r in rows[1:] if "img_per_s" in r]
hdr = f"{'impl':<22} {'precision':<10} {'img/s':>8} {'step ms':>8} {'rt / this':>9} {'peak GiB':>9} {'reserved':>9} {'% MLPerf':>9}"
print(f"ResNet50 training step, batch {sys.argv[3]}, 224x224, channels-last, cuda"
      + (f", {torch_rows[0]['gpu']}" if torch_rows and 'gpu' in torch_rows[0] else ""))
print(hdr)
for r in rows:
    name = {"torch": "torch eager"}.get(r.get("impl", "?"), r.get("impl", "?"))
    prec = r.get("precision") or ("amp " + r["amp"] if "amp" in r else "")
    if "img_per_s" not in r:
        print(f"{name:<22} {prec:<10} FAILED: {r.get('error', 'no result')}")
        continue
    ratio = ""
    if r is not rt and "img_per_s" in rt:
        ratio = f"{rt['img_per_s'] / r['img_per_s']:.2f}x"
    gib = lambda k: f"{r[k] / 2**30:.1f}" if k in r else "-"
    print(f"{name:<22} {prec:<10} {r['img_per_s']:>8.0f} {r['step_ms']:>8.1f} {ratio:>9} {gib('peak_bytes'):>9} "
          f"{gib('reserved_bytes'):>9} {100 * r['img_per_s'] / MLPERF:>8.1f}%")
if skip:
    print(f"torch rows skipped: {skip}")
print("rt / this: ringtape's img/s over the row's (above 1: ringtape faster); % MLPerf: of 7,950 img/s per H200")
PYEOF
echo "JSON lines: $out/results.jsonl; table: $out/table.txt"
