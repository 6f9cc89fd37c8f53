// Memory-format changes on the GPU (kernels/cuda/relayout.cu through Tensor::to) against
// the CPU's host_copy: every dtype, odd sizes, batch 1, 1x1 images, ResNet-sized planes,
// and a dtype change combined with a format change. Moves of bits: results must be equal.
#include "engine/ops.h"
#include "kernels/cuda/relayout.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

// By hand: bit for bit, integer and u8 dtypes too, and no gradient: the harness allows gpu_tol_for.
TEST_CASE("NCHW <-> NHWC on CUDA equals the CPU relayout, bit for bit") {
  if (!have_gpu("relayout")) return;
  for (const Shape& s : {Shape{3, 5, 7, 9}, Shape{1, 3, 1, 1}, Shape{2, 64, 56, 56}, Shape{4, 33, 2, 65}}) {
    const Tensor v = rnd(s, uint64_t(s[1]));
    for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32}) {
      for (MemoryFormat from : {kNCHW, kNHWC}) {
        const MemoryFormat to = from == kNCHW ? kNHWC : kNCHW;
        const Tensor host = v.to(t).to(from);
        const Tensor got = host.to(gpu()).to(to);
        REQUIRE(got.format() == to);
        const Tensor want = host.to(to);
        CHECK_MESSAGE(got.to(Device::cpu()).to_vector<double>() == want.to_vector<double>(), shape_str(s), " ",
                      dtype_name(t), " -> ", format_name(to));
      }
    }
    // u8 images (a loader batch viewed as NCHW) and a combined dtype + format change.
    std::vector<uint8_t> bytes(size_t(shape_numel(s)));
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + 3);
    const Tensor u8 = Tensor::from_vector<uint8_t>(bytes, s);
    CHECK(u8.to(gpu()).to(kNHWC).to_vector<uint8_t>() == u8.to(kNHWC).to_vector<uint8_t>());
    const Tensor f32 = v.to(DType::f32);
    CHECK(f32.to(gpu()).to(DType::bf16).to(kNHWC).to_vector<double>() ==
          f32.to(DType::bf16).to(kNHWC).to_vector<double>());
    Tensor both = Tensor::empty(s, DType::f16, gpu(), kNHWC);
    both.copy_(f32.to(gpu()));  // f32 NCHW -> f16 NHWC in one copy_
    CHECK(both.to_vector<double>() == f32.to(DType::f16).to_vector<double>());
  }
}

TEST_CASE("transpose_batched rejects what it cannot do") {
  CHECK_THROWS_WITH_AS(cuda::transpose_batched(3, 1, 2, 2, nullptr, reinterpret_cast<void*>(16), nullptr),
                       doctest::Contains("element size 3"), Error);
}

}  // namespace
}  // namespace rt
