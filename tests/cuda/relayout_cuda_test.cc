// Memory-format changes on the GPU (kernels/cuda/relayout.cu through Tensor::to) against
// the CPU's host_copy: every dtype, odd sizes, batch 1, 1x1 images, ResNet-sized planes,
// and a dtype change combined with a format change. Moves of bits: results must be equal.
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/cuda/relayout.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

// Bits only move: exact in every dtype (integers and u8 images forward only), and the
// gradient relayouts back (to_format's backward: the transpose kernel the other way).
TEST_CASE("NCHW <-> NHWC on CUDA equals the CPU relayout, bit for bit") {
  const std::vector<DType> types = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u8};
  for (const Shape& s : {Shape{3, 5, 7, 9}, Shape{1, 3, 1, 1}, Shape{2, 64, 56, 56}, Shape{4, 33, 2, 65}}) {
    for (MemoryFormat from : {kNCHW, kNHWC}) {
      const MemoryFormat to = from == kNCHW ? kNHWC : kNCHW;
      check_matches_cpu(
          std::string("to_format ") + format_name(to),
          [to](const std::vector<Tensor>& in) { return to_format(in[0], to); }, {s}, types,
          MatchOptions().exact().with_formats({from}).with_seed(uint64_t(s[1])));
    }
    // A dtype change on the GPU (the cast kernel), then the relayout; then both in one copy_
    // (through a temporary). Tensor::to and copy_ are not recorded: forward only.
    const MatchOptions forward = MatchOptions().exact().forward_only().with_seed(uint64_t(s[1]));
    check_matches_cpu(
        "to bf16, then NHWC", [](const std::vector<Tensor>& in) { return in[0].to(DType::bf16).to(kNHWC); }, {s},
        {DType::f32}, forward);
    check_matches_cpu(
        "copy_ into f16 NHWC",
        [](const std::vector<Tensor>& in) {
          Tensor both = Tensor::empty(in[0].shape(), DType::f16, in[0].device(), kNHWC);
          both.copy_(in[0]);
          return both;
        },
        {s}, {DType::f32}, forward);
  }
}

TEST_CASE("transpose_batched rejects what it cannot do") {
  CHECK_THROWS_WITH_AS(cuda::transpose_batched(3, 1, 2, 2, nullptr, reinterpret_cast<void*>(16), nullptr),
                       doctest::Contains("element size 3"), Error);
}

}  // namespace
}  // namespace rt
