#!/usr/bin/env bash
# The ImageNet training input pipeline on the CPU (read JPEG, decode, RandomResizedCrop(224),
# flip, [an auto-augment policy,] into a uint8 batch of 256 [normalised to f32]): ringtape's
# train_transform vs torchvision's PIL pipeline on the same files in the same run, per core
# and with 1..N threads / worker processes; prints the table and the cores one GPU at 8,000
# images/s would need (see bench/README.md).
#
#   bench/run_jpeg_pipeline_bench.sh [--threads 1,2] [--rounds R] [--repeats N] [--batch B]
#                                    [--count N] [--corpus DIR] [--out DIR] [--gpu-rate IMG/S]
#                                    [--policy none|imagenet|ra|ta_wide|augmix] [--normalize]
#                                    [--check]
#
# --threads LIST: thread / worker counts to measure (default 1,2; e.g. 1,2,4,8,16 on a bigger
#   machine). ringtape runs T threads in one process; torchvision a DataLoader with T workers.
# --rounds R: alternate the programs R times and report medians over the rounds (default 3).
# --repeats N: timed passes inside each program run, after one warm-up (default 3).
# --corpus DIR: time these JPEGs instead of the synthetic corpus, which is otherwise made by
#   make_jpeg_corpus.py (--count files, default 512) into out/jpeg_bench/corpus unless it
#   exists (delete it to make a new one).
# --policy P: both sides apply the automatic augmentation P after the flip, bilinear
#   (ringtape: data::auto_augment; torchvision: TrivialAugmentWide etc. on the PIL image).
# --normalize: both sides deliver the normalised f32 (B, 3, 224, 224) batch: torchvision per
#   image (ConvertImageDtype + Normalize), ringtape per batch on the CPU with the engine's
#   normalize_pixels on T OpenMP threads (in training ringtape does that on the GPU).
# --check: exit 1 when ringtape's per-core rate is under 2x torchvision's.
# Results (each run's JSON and output, summary.json, table.txt) go to OUT (default out/jpeg_bench,
# or out/jpeg_bench/<policy>[_norm] with --policy or --normalize, so configurations coexist).
set -euo pipefail

start="$PWD"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."
PY="${RINGTAPE_TORCH_PYTHON:-/usr/bin/python3}"  # Debian's python3 has torch; pyenv's does not

threads=1,2
rounds=3
repeats=3
batch=256
count=512
corpus=""
out=out/jpeg_bench
gpu_rate=8000
policy=none
normalize=()
out_given=0
check=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --count) count="$2"; shift 2 ;;
    --corpus) corpus="$2"; [[ "$corpus" = /* ]] || corpus="$start/$corpus"; shift 2 ;;
    --out) out="$2"; [[ "$out" = /* ]] || out="$start/$out"; out_given=1; shift 2 ;;
    --gpu-rate) gpu_rate="$2"; shift 2 ;;
    --policy) policy="$2"; shift 2 ;;
    --normalize) normalize=(--normalize); shift ;;
    --check) check=(--check); shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_jpeg_pipeline_bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$policy" in
  none|imagenet|ra|ta_wide|augmix) ;;
  *) echo "run_jpeg_pipeline_bench.sh: --policy wants none, imagenet, ra, ta_wide or augmix, got '$policy'" >&2
     exit 2 ;;
esac
config="$policy${normalize:+_norm}"
if ((!out_given)) && [[ "$config" != none ]]; then
  out="out/jpeg_bench/$config"
fi
IFS=, read -r -a tlist <<<"$threads"
for t in "${tlist[@]}"; do
  if [[ ! "$t" =~ ^[1-9][0-9]*$ ]]; then
    echo "run_jpeg_pipeline_bench.sh: --threads wants counts like 1,2,4, got '$threads'" >&2
    exit 2
  fi
  if ((t > $(nproc))); then
    echo "WARNING: $t threads on $(nproc) cores: that row measures oversubscription" >&2
  fi
done

bazel build //bench:jpeg_pipeline_bench >/dev/null 2>&1 || bazel build //bench:jpeg_pipeline_bench
mkdir -p "$out"
if [[ -z "$corpus" ]]; then
  corpus=out/jpeg_bench/corpus
  if [[ ! -f "$corpus/corpus.json" ]]; then
    "$PY" bench/make_jpeg_corpus.py "$corpus" --count "$count"
  fi
fi
# Earlier results would mix with this run's.
rm -f "$out"/rt_*.json "$out"/rt_*.txt "$out"/tv_*.json "$out"/tv_*.txt "$out"/table.txt "$out"/summary.json
# Warm the page cache: every run reads the files from memory, as a loader's later epochs do.
cat "$corpus"/*.jpg "$corpus"/*.jpeg 2>/dev/null >/dev/null || true

# Waits for an idle machine before each program (wait_idle).
source "$(dirname "${BASH_SOURCE[0]}")/bench_lib.sh"

common=(--files "$corpus" --batch "$batch" --rounds "$repeats" --warmup 1 --policy "$policy" "${normalize[@]}")
# ringtape: std::thread workers, no OpenMP inside train_transform or auto_augment. Without
# --normalize OMP_NUM_THREADS=1 keeps the engine's OpenMP runtime from spinning up a team;
# with it, normalize_pixels gets a team of T (the T workers wait at the batch's barrier
# meanwhile), passive so that its threads sleep rather than spin while the workers decode.
rt() {  # NAME THREADS ARGS...
  local name="$1" t="$2"; shift 2
  local omp=1
  ((${#normalize[@]})) && omp="$t"
  echo; wait_idle
  echo "== ringtape $name"
  OMP_NUM_THREADS="$omp" OMP_WAIT_POLICY=passive bazel-bin/bench/jpeg_pipeline_bench "${common[@]}" --threads "$t" \
    "$@" --json "$out/rt_$name.json" | tee "$out/rt_$name.txt"
}
# torchvision: glibc malloc never trims or mmaps (PyTorch's best setting here, as in the
# other benchmarks); torch.set_num_threads(1) in the script and in every worker.
tv() {  # NAME ARGS...
  local name="$1"; shift
  echo; wait_idle
  echo "== torchvision $name"
  MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 OMP_NUM_THREADS=1 \
    "$PY" bench/jpeg_pipeline_bench_torch.py "${common[@]}" "$@" --json "$out/tv_$name.json" | tee "$out/tv_$name.txt"
}

for ((r = 1; r <= rounds; r++)); do
  echo
  echo "######## round $r/$rounds"
  extra=()
  ((r == 1)) && extra=(--breakdown)
  rt "t1_region.$r" 1 --mode region "${extra[@]}"
  tv "inproc.$r" --workers 0 "${extra[@]}"
  rt "t1_full.$r" 1 --mode full
  for t in "${tlist[@]}"; do
    ((t == 1)) || rt "t${t}_region.$r" "$t" --mode region
    tv "w$t.$r" --workers "$t"
  done
done

echo
"$PY" bench/compare_jpeg_pipeline_bench.py --out "$out" --corpus "$corpus" --threads "$threads" \
  --rounds "$rounds" --gpu-rate "$gpu_rate" "${check[@]}" | tee "$out/table.txt"
