// GPU-vs-CPU tests of matmul (cuBLAS strided-batched): forward and backward through autograd,
// every dtype, 2-D and batched, sizes 1 and odd, K = 0; TF32 only when allowed. Without a
// GPU the GPU tests print SKIPPED lines; the launcher's host-side checks still run.
#include <cmath>

#include "engine/ops.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/matmul.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

TEST_CASE("matmul launcher: host-side checks (runs without a GPU)") {
  CHECK_THROWS_WITH_AS(cuda::matmul(DType::i64, 1, false, false, 1, 1, 1, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::matmul(DType::f32, -1, false, false, 1, 1, 1, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("negative size"), Error);
  CHECK_THROWS_WITH_AS(cuda::matmul(DType::f32, 2, false, false, 3, 4, 5, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  cuda::matmul(DType::bf16, 0, true, true, 3, 4, 5, nullptr, nullptr, nullptr, nullptr);  // nothing to do
}

struct Case {
  int64_t B, M, K, N;  // B = 0: 2-D
};
const Case kCases[] = {{0, 1, 1, 1},   {0, 7, 13, 9},   {0, 1, 300, 1}, {0, 128, 256, 100}, {1, 5, 2, 70},
                       {4, 17, 33, 9}, {16, 8, 64, 8},  {3, 1, 7, 1},   {2, 65, 31, 33},    {0, 3, 0, 4},
                       {2, 3, 0, 5}};

Shape a_shape(const Case& k) { return k.B ? Shape{k.B, k.M, k.K} : Shape{k.M, k.K}; }
Shape b_shape(const Case& k) { return k.B ? Shape{k.B, k.K, k.N} : Shape{k.K, k.N}; }

// Error scale: sqrt(terms) for the random-walk growth of a dot product's rounding, times 4
// (a product of unit normals is up to ~4 sqrt(k) in magnitude, the error relative to that).
double scale_for(int64_t k) { return 4.0 * std::sqrt(double(std::max<int64_t>(k, 1))); }

TEST_CASE("matmul on CUDA matches the CPU: forward and backward, every dtype") {
  if (!have_gpu("matmul forward/backward")) return;
  uint64_t seed = 100;
  for (const Case& k : kCases) {
    // c sums over K; da over N; db over M.
    const double sk = scale_for(k.K), sa = scale_for(k.N), sb = scale_for(k.M);
    check_matches_cpu(
        "matmul", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {a_shape(k), b_shape(k)},
        {DType::f32, DType::f64, DType::bf16, DType::f16},
        MatchOptions()
            .with_seed(++seed)
            .with_forward_scale([sk](const Tensor&, const std::vector<Tensor>&) { return sk; })
            .with_grad_scale([sa, sb](size_t i, const Tensor&, const Tensor&) { return i == 0 ? sa : sb; }));
  }
}

// By hand: a global switch, and an f32 run within the bf16 row (TF32 inputs), not f32's.
TEST_CASE("matmul on CUDA: TF32 only when allowed") {
  if (!have_gpu("matmul tf32 switch")) return;
  const Tensor a64 = rnd({4, 64, 512}, 7), b64 = rnd({4, 512, 64}, 8);
  const Tensor ref = matmul(to_ref(a64, DType::f32), to_ref(b64, DType::f32));
  check_on_gpu(matmul(to_gpu(a64, DType::f32), to_gpu(b64, DType::f32)), ref, kGpuTolF32, "f32 no tf32",
               scale_for(512));
  cuda::set_allow_tf32(true);
  const Tensor c = matmul(to_gpu(a64, DType::f32), to_gpu(b64, DType::f32));
  cuda::set_allow_tf32(false);
  check_on_gpu(c, ref, kGpuTolBF16, "f32 with tf32", scale_for(512));  // 10-bit inputs: bf16-like tolerance
}

}  // namespace
}  // namespace rt
