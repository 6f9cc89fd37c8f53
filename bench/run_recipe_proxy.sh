#!/usr/bin/env bash
# The recipes on the Fashion-MNIST-as-JPEG proxy (bench/RESULTS.md): the plain recipe, a short
# --recipe torchvision-v2 and --recipe mlperf at a global batch of 1024 (2 CPU processes x 128
# x --accum-steps 4), plus SGD at that batch, through the ImageNet path; prints each run's
# last top-1 (and the EMA's).
#
#   bench/run_recipe_proxy.sh [--epochs 8] [--out DIR] [--shards]
#
# --shards: instead, the plain recipe twice with the same seed: from the JPEG folder
#   (--dataset imagenet) and from WebDataset shards of the same files (`ringtape pack
#   --max-side none`, --dataset webdataset), for the accuracy through shards next to the folder's.
#
# The JPEG folder is made once by bench/make_fashion_jpeg.py into OUT/fmnist_jpeg (needs
# /usr/bin/python3 with PIL and the Fashion-MNIST idx files in /usr/share/datasets/fashion-mnist).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=8
out=out/recipe_proxy
shards=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --epochs) epochs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --shards) shards=1; shift ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_recipe_proxy.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
bazel build //cli:ringtape >/dev/null 2>&1 || bazel build //cli:ringtape
mkdir -p "$out"
[[ -d "$out/fmnist_jpeg/train" ]] || /usr/bin/python3 bench/make_fashion_jpeg.py "$out/fmnist_jpeg"
proxy=(--dataset imagenet --data-path "$out/fmnist_jpeg" --model resnet18 --width 16 --train-crop-size 28
       --val-resize-size 32 --val-crop-size 28 --device cpu --no-progress --print-freq 200
       --cache-dir "$out/cache" --epochs "$epochs")
run() {  # NAME ARGS...
  local name="$1"; shift
  rm -rf "${out:?}/$name"
  echo "== $name: $*"
  bazel-bin/cli/ringtape train "${proxy[@]}" "$@" --output-dir "$out/$name" >"$out/$name.log" 2>&1
  grep "eval" "$out/$name.log" | tail -2
}
if [[ $shards == 1 ]]; then
  for split in train val; do
    [[ -f "$out/fmnist_shards/$split.json" ]] ||
      bazel-bin/cli/ringtape pack --data-path "$out/fmnist_jpeg/$split" --output "$out/fmnist_shards/$split" \
        --max-side none --shard-size 8MB --cache-dir "$out/cache" --no-progress
  done
  run plain_folder --workers 2 --batch-size 128 --lr 0.1
  proxy[1]=webdataset
  proxy[3]="$out/fmnist_shards"
  run plain_shards --workers 2 --batch-size 128 --lr 0.1
  exit 0
fi
run plain --workers 2 --batch-size 128 --lr 0.1
run v2 --recipe torchvision-v2 --workers 2 --batch-size 128 \
  --lr 0.0625 --lr-warmup-epochs 1
run mlperf --recipe mlperf --workers 1 --batch-size 128 \
  --accum-steps 4 --nproc-per-node 2 --lr-warmup-epochs 2
run sgd1024 --workers 1 --batch-size 128 --accum-steps 4 --nproc-per-node 2 --lr 0.8 --lr-warmup-epochs 2 \
  --label-smoothing 0.1
