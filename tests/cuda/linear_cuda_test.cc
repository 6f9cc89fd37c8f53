// GPU-vs-CPU tests of linear (cuBLAS): forward and backward through autograd, every dtype,
// with and without bias, shapes with N = 1 and odd sizes. Without a GPU the GPU
// tests print a SKIPPED line and pass; the host-side argument checks still run.
#include <cmath>

#include "engine/ops.h"
#include "kernels/cuda/linear.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

TEST_CASE("linear launchers: host-side checks and the TF32 switch (runs without a GPU)") {
  CHECK_FALSE(cuda::allow_tf32());  // default off, like torch.backends.cuda.matmul.allow_tf32
  CHECK_THROWS_WITH_AS(cuda::linear_forward(DType::i32, 1, 1, 1, nullptr, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::linear_forward(DType::f32, -1, 1, 1, nullptr, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("negative size"), Error);
  CHECK_THROWS_WITH_AS(cuda::linear_forward(DType::f32, 2, 3, 4, nullptr, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  // Nothing to compute: no launch, no device needed.
  cuda::linear_forward(DType::f32, 0, 3, 4, nullptr, nullptr, nullptr, nullptr, nullptr);
}

struct Case {
  int64_t N, in, out;
};
const Case kCases[] = {{1, 1, 1}, {1, 17, 5}, {7, 13, 9}, {5, 2, 70}, {33, 65, 31}, {128, 256, 100}, {2, 1000, 3}};

// Error scale: sqrt(terms) for the random-walk growth of a sum's rounding error, times 4
// because the GEMM result is rounded (in bf16/f16: to 8 or 11 bits) before the bias add, an
// error relative to |x w^T| (up to ~4 sqrt(k) for unit normal inputs), not to |y|.
// Column sums of a CPU [rows, cols] tensor (the reference for db).
Tensor sum_rows_ref(const Tensor& m) {
  const std::vector<double> v = m.to_vector<double>();
  const int64_t rows = m.size(0), cols = m.size(1);
  std::vector<double> s(size_t(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[size_t(c)] += v[size_t(r * cols + c)];
  return Tensor::from_vector<double>(s, {cols});
}

double scale_for(int64_t k) { return 4.0 * std::sqrt(double(std::max<int64_t>(k, 1))); }

TEST_CASE("linear on CUDA matches the CPU: forward and backward, every dtype, with and without bias") {
  if (!have_gpu("linear forward/backward")) return;
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    for (bool with_bias : {true, false}) {
      const OpFn f = [with_bias](const std::vector<Tensor>& in) {
        return linear(in[0], in[1], with_bias ? in[2] : Tensor());
      };
      std::vector<Shape> shapes = {{c.N, c.in}, {c.out, c.in}};
      if (with_bias) shapes.push_back({c.out});
      // y sums over in; dx over out; dw and db over the batch.
      const double sy = scale_for(c.in), sx = scale_for(c.out), sn = scale_for(c.N);
      check_matches_cpu(
          std::string("linear") + (with_bias ? "+bias" : ""), f, shapes,
          {DType::f32, DType::f64, DType::bf16, DType::f16},
          MatchOptions()
              .with_seed(++seed)
              .with_forward_scale([sy](const Tensor&, const std::vector<Tensor>&) { return sy; })
              .with_grad_scale([sx, sn](size_t i, const Tensor&, const Tensor&) { return i == 0 ? sx : sn; }));
    }
  }
}

// By hand: the reference written out (y = b, db the column sums) for empty x and w.
TEST_CASE("linear on CUDA with no input features: y is the bias, dw is empty, db the column sums") {
  if (!have_gpu("linear k = 0")) return;
  for (DType t : kFloatTypes) {
    CAPTURE(dtype_name(t));
    poison_allocator(64);
    const Tensor b64 = rnd({4}, 3), dy64 = rnd({3, 4}, 4);
    Tensor x = Tensor::empty({3, 0}, t, gpu()).set_requires_grad(true);
    Tensor w = Tensor::empty({4, 0}, t, gpu()).set_requires_grad(true);
    Tensor b = to_gpu(b64, t).set_requires_grad(true);
    Tensor y = linear(x, w, b);
    y.backward(to_gpu(dy64, t));
    const std::vector<double> bv = to_ref(b64, t).to_vector<double>();
    std::vector<double> want;
    for (int r = 0; r < 3; ++r) want.insert(want.end(), bv.begin(), bv.end());
    check_close(y.to_vector<double>(), want, gpu_tol_for(t), "y = b");
    CHECK(x.grad().numel() == 0);
    CHECK(w.grad().numel() == 0);
    const Tensor dy_ref = to_ref(dy64, t).set_requires_grad(false);
    check_on_gpu(b.grad(), sum_rows_ref(dy_ref), gpu_tol_for(t), "db", 2.0);
  }
}

// By hand: a global switch, and an f32 run within the bf16 row (TF32 inputs), not f32's.
TEST_CASE("linear on CUDA: TF32 only when allowed") {
  if (!have_gpu("linear tf32 switch")) return;
  const Tensor x64 = rnd({64, 512}, 7), w64 = rnd({64, 512}, 8);
  const Tensor ref = linear(to_ref(x64, DType::f32), to_ref(w64, DType::f32), Tensor());
  // Off: full f32 accuracy.
  check_on_gpu(linear(to_gpu(x64, DType::f32), to_gpu(w64, DType::f32), Tensor()), ref, kGpuTolF32, "f32 no tf32",
              scale_for(512));
  cuda::set_allow_tf32(true);
  // On: 10-bit mantissa inputs; still close at bf16-like tolerance.
  const Tensor y = linear(to_gpu(x64, DType::f32), to_gpu(w64, DType::f32), Tensor());
  cuda::set_allow_tf32(false);
  check_on_gpu(y, ref, kGpuTolBF16, "f32 with tf32", scale_for(512));
}

}  // namespace
}  // namespace rt
