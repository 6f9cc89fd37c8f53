#!/usr/bin/env bash
# The kernel lab's step report (docs/kernel-lab.md): one training step of a ResNet on the
# emulated GPU (--config=cuda-emu) with the lab's counters on (RINGTAPE_EMU_PERF), at a few
# small batches, then bench/kernel_lab_report: where an H200's time would go at the target
# batch, the step's bound, an SVG roofline.
#
#   bench/run_kernel_lab.sh [--model resnet50] [--precision bf16] [--memory-format channels_last|contiguous]
#       [--batches 1,2,4] [--target-batch 256] [--size 3x224x224] [--classes 1000] [--width 64]
#       [--small-stem] [--stem-stride S] [--cuda-graphs] [--top 15] [--out DIR]
#
# Defaults: ResNet50 at 224 px, bf16, channels-last, batches 1, 2 and 4 extrapolated to 256
# (Note [Extrapolating the lab] in profile/kernel_lab.h). --small-model: the default model of
# `ringtape train` (resnet18, width 16, small stem of stride 2, 1x28x28, 10 classes, batch
# 128 as the target). Each run is train_step_bench's step 2 (the first, warm-up step sets up
# cuDNN plans and the allocator's cache): --warmup 1 --steps 1 --profile-steps 2:3, the
# profiler's window being the lab's (profile/session.cc). Out: DIR/lab-bB.json per batch,
# DIR/report.json, DIR/roofline.svg, DIR/report.txt (default out/kernel_lab/<model>-<precision>-<format>).
# --cuda-graphs: the recorded step is a replay of the step captured as a CUDA graph
# (train_step_bench --cuda-graphs); the report's "host launches per step" then counts the
# graph launch once.
set -euo pipefail
cd "$(dirname "$0")/.."

model=resnet50 precision=bf16 format=channels_last batches=1,2,4 target=256 size=3x224x224 classes=1000 width=64
small_stem=() stem_stride=() graphs=() top=15 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --precision) precision="$2"; shift 2 ;;
    --memory-format) format="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --target-batch) target="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --classes) classes="$2"; shift 2 ;;
    --width) width="$2"; shift 2 ;;
    --small-stem) small_stem=(--small-stem); shift ;;
    --stem-stride) stem_stride=(--stem-stride "$2"); shift 2 ;;
    --small-model)
      model=resnet18 size=1x28x28 classes=10 width=16 small_stem=(--small-stem) stem_stride=(--stem-stride 2)
      target=128; shift ;;
    --cuda-graphs) graphs=(--cuda-graphs); shift ;;
    --top) top="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_kernel_lab.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
case "$format" in
  channels_last) fmt_flag=(--channels-last) ;;
  contiguous) fmt_flag=() ;;
  *) echo "run_kernel_lab.sh: --memory-format takes channels_last or contiguous, got '$format'" >&2; exit 2 ;;
esac
[[ "$batches" =~ ^[0-9]+(,[0-9]+)+$ ]] ||
  { echo "run_kernel_lab.sh: --batches takes two or more comma-separated batch sizes (e.g. 1,2,4), got '$batches'" >&2; exit 2; }
out=${out:-out/kernel_lab/$model-$precision-$format}
mkdir -p "$out"
out=$(cd "$out" && pwd)  # absolute: the step runs with the emulator's perf path as given

start=$SECONDS
bazel build --config=cuda-emu //bench:train_step_bench //bench:kernel_lab_report >"$out/build.log" 2>&1 ||
  { cat "$out/build.log" >&2; echo "run_kernel_lab.sh: the emulated build failed" >&2; exit 1; }
bin=$(bazel info --config=cuda-emu bazel-bin 2>/dev/null)

runs=""
IFS=, read -r -a bs <<<"$batches"
for b in "${bs[@]}"; do
  echo "== batch $b: one emulated training step ($model, $precision, $format)" >&2
  t0=$SECONDS
  rm -f "$out/lab-b$b.json"
  RINGTAPE_EMU_PERF="$out/lab-b$b.json" "$bin/bench/train_step_bench" --device cuda --model "$model" \
    --batch "$b" --size "$size" --classes "$classes" --width "$width" "${small_stem[@]}" "${stem_stride[@]}" \
    "${fmt_flag[@]}" "${graphs[@]}" --precision "$precision" --warmup 1 --steps 1 --profile-steps 2:3 \
    --profile-dir "$out/profile-b$b" >"$out/step-b$b.json" 2>"$out/step-b$b.log" ||
    { tail -20 "$out/step-b$b.log" >&2; echo "run_kernel_lab.sh: the batch-$b step failed (log: $out/step-b$b.log)" >&2; exit 1; }
  [[ -s "$out/lab-b$b.json" ]] || { echo "run_kernel_lab.sh: no lab records in $out/lab-b$b.json" >&2; exit 1; }
  echo "   $((SECONDS - t0)) s" >&2
  runs+="${runs:+,}$b:$out/lab-b$b.json"
done

"$bin/bench/kernel_lab_report" --runs "$runs" --target-batch "$target" --top "$top" --json "$out/report.json" \
  --svg "$out/roofline.svg" --title "kernel lab: $model $precision $format, batch $target on an H200 (modelled)" |
  tee "$out/report.txt"
echo "report: $out/report.txt, $out/report.json, $out/roofline.svg; $((SECONDS - start)) s in all" >&2
