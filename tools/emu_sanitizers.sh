#!/usr/bin/env bash
# The emulated GPU under the sanitizers (docs/cuda-on-cpu.md, "Under sanitizers"): too slow for
# CI on 2 cores (the AddressSanitizer variant about 35 minutes with its build, ThreadSanitizer's
# 10x on top of the emulator's), so a developer runs this before resolving an issue that
# changes CUDA code (kernels/cuda, cuda_emu, a .cu file), and says in the closing note what it
# printed.
#
#   tools/emu_sanitizers.sh [asan|tsan|all]     (default all)
#
# asan: --config=cuda-emu-asan on the targets where it passes (every GPU test but
#       resnet50_cuda_test, the emulator's own tests, the distributed tests, the caching
#       allocator, CUDA training in fp32/bf16/fp16).
# tsan: --config=cuda-emu-tsan on the targets that run clean within its 30-minute test limit,
#       with blocks on two host threads (RINGTAPE_EMU_THREADS=2) so that races between
#       blocks can show.
# Each variant has its own output tree (.bazelrc); the last lines say which passed.
set -uo pipefail
cd "$(dirname "$0")/.."

which=${1:-all}
case "$which" in asan | tsan | all) ;; *)
  echo "usage: tools/emu_sanitizers.sh [asan|tsan|all]" >&2
  exit 2
  ;;
esac

asan_targets=(//tests/cuda/... -//tests/cuda:resnet50_cuda_test //tests/cuda_emu/... //tests/distributed/...
  //tests:caching_allocator_test //tests/train:cuda_train_test //tests/train:precision_cuda_test)
tsan_targets=(//tests/cuda_emu/... //tests/cuda:batch_norm_sync_cuda_test //tests/cuda:conv2d_cuda_test
  //tests/cuda:dropout_cuda_test //tests/cuda:linear_cuda_test //tests/cuda:matmul_cuda_test
  //tests/cuda:normalize_pixels_cuda_test //tests/cuda:pool_cuda_test //tests/cuda:random_cuda_test
  //tests/cuda:relayout_cuda_test //tests/cuda:shape_cuda_test //tests/cuda:softmax_cuda_test)

results=()
run() {
  local name=$1
  shift
  local t0=$SECONDS
  if bazel test "$@"; then results+=("$name: passed in $((SECONDS - t0)) s")
  else results+=("$name: FAILED after $((SECONDS - t0)) s (bazel test $*)"); fi
}
[ "$which" = tsan ] || run asan --config=cuda-emu-asan -- "${asan_targets[@]}"
[ "$which" = asan ] || run tsan --config=cuda-emu-tsan --test_env=RINGTAPE_EMU_THREADS=2 -- "${tsan_targets[@]}"
printf '%s\n' "${results[@]}"
for r in "${results[@]}"; do [[ $r == *FAILED* ]] && exit 1; done
exit 0
