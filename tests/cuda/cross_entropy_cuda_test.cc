// GPU-vs-CPU tests of softmax cross-entropy: the launchers (probabilities, per-row losses and
// their deterministic mean; backward reading the loss gradient on the device) on
// NaN-poisoned outputs against kernels/cpu/cross_entropy.cc, then the op through autograd on
// CUDA against the CPU op. Batch 1, one class, odd sizes, rows longer than a block (K > 256),
// label smoothing 0, 0.1 and 1, every float dtype, and out-of-range targets (NaN loss, see
// Note [CUDA target validation]). Without a GPU the GPU tests print SKIPPED lines; the
// launchers' host-side argument checks still run.
#include <cmath>
#include <cstdlib>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

struct Case {
  int64_t N, K;
};
const std::vector<Case> kCases = {{1, 1}, {1, 5}, {7, 10}, {3, 257}, {64, 1000}, {300, 3}};
constexpr double kSmoothing[] = {0.0, 0.1, 1.0};

Tensor targets(int64_t N, int64_t K, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(N));
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((seed * 7919 + i * 104729) % uint64_t(K));
  return Tensor::from_vector<int64_t>(v, {N});
}

std::string clabel(const char* what, DType t, const Case& c, double e) {
  return std::string(what) + " " + dtype_name(t) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " e=" + std::to_string(e);
}

TEST_CASE("cross_entropy launchers reject bad arguments on the host (runs without a GPU)") {
  float dummy[8];
  int64_t tgt[2] = {0, 0};
  CHECK_THROWS_WITH_AS(cuda::cross_entropy_forward(DType::f32, 0, 3, dummy, tgt, 0.0, dummy, dummy, dummy, nullptr,
                                                   nullptr),
                       doctest::Contains("empty logits"), Error);
  CHECK_THROWS_WITH_AS(cuda::cross_entropy_forward(DType::f32, 2, 3, dummy, tgt, 1.5, dummy, dummy, dummy, nullptr,
                                                   nullptr),
                       doctest::Contains("label_smoothing must be in [0, 1]"), Error);
  CHECK_THROWS_WITH_AS(cuda::cross_entropy_forward(DType::i64, 2, 3, dummy, tgt, 0.0, dummy, dummy, dummy, nullptr,
                                                   nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::cross_entropy_backward(DType::f32, 2, 3, dummy, tgt, 0.0, nullptr, dummy, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK(cuda::cross_entropy_acc_dtype(DType::bf16) == DType::f32);
  CHECK(cuda::cross_entropy_acc_dtype(DType::f64) == DType::f64);
}

// By hand: the launchers on raw buffers (probabilities, the loss, backward from the GPU's own
// probabilities) against kernels/cpu, below the autograd op the harness runs.
TEST_CASE("cross_entropy launchers match the CPU kernels") {
  if (!have_gpu("cross_entropy launchers match the CPU kernels")) return;
  uint64_t seed = 1;
  for (DType t : kFloatTypes) {
    const DType rd = ref_dtype(t), at = cuda::cross_entropy_acc_dtype(t);
    for (const Case& c : kCases) {
      for (double e : kSmoothing) {
        const Tensor z64 = mul(rnd({c.N, c.K}, ++seed), 3.0);
        const Tensor tr = targets(c.N, c.K, ++seed), td = tr.to(gpu());
        const Tensor zd = to_gpu(z64, t), zr = to_ref(z64, t);
        Tensor pr = Tensor::empty({c.N, c.K}, rd);
        const double loss = rd == DType::f64
            ? cpu::cross_entropy_forward<double>(c.N, c.K, zr.data<double>(), tr.data<int64_t>(), e, pr.data<double>())
            : cpu::cross_entropy_forward<float>(c.N, c.K, zr.data<float>(), tr.data<int64_t>(), e, pr.data<float>());
        Tensor pd = poisoned({c.N, c.K}, t), rl = poisoned({c.N}, at), ld = poisoned({}, t);
        Tensor bad = Tensor::zeros({1}, DType::i32, gpu());
        cuda::cross_entropy_forward(t, c.N, c.K, zd.raw_data(), td.data<int64_t>(), e, pd.raw_data(), rl.raw_data(),
                                    ld.raw_data(), bad.data<int32_t>(), stream());
        check_on_gpu(pd, pr, gpu_tol_for(t), clabel("probs", t, c, e));
        // The loss sums K terms per row (log-sum-exp) and N rows: errors grow like sqrt(N + K).
        check_close(std::vector<double>{ld.item()}, std::vector<double>{loss}, gpu_tol_for(t), clabel("loss", t, c, e),
                    std::sqrt(double(c.N + c.K)));
        CHECK(bad.item() == 0);

        // Backward with a device-side loss gradient g = 0.75.
        const Tensor gd = Tensor::full({}, 0.75, t, gpu());
        Tensor dd = poisoned({c.N, c.K}, t), dr = Tensor::empty({c.N, c.K}, rd);
        const Tensor prr = pd.to(rd).to(Device::cpu());  // the GPU's own probabilities, widened
        cuda::cross_entropy_backward(t, c.N, c.K, pd.raw_data(), td.data<int64_t>(), e, gd.raw_data(), dd.raw_data(),
                                     stream());
        if (rd == DType::f64)
          cpu::cross_entropy_backward<double>(c.N, c.K, prr.data<double>(), tr.data<int64_t>(), e, 0.75,
                                              dr.data<double>());
        else
          cpu::cross_entropy_backward<float>(c.N, c.K, prr.data<float>(), tr.data<int64_t>(), e, 0.75,
                                             dr.data<float>());
        check_on_gpu(dd, dr, gpu_tol_for(t), clabel("dlogits", t, c, e));
      }
    }
  }
}

TEST_CASE("cross_entropy op forward and backward on CUDA match the CPU") {
  uint64_t seed = 100;
  for (const Case& c : kCases) {
    for (double e : kSmoothing) {
      // The targets are not compared: the op takes them on its logits' device (the GPU run's
      // upstream gradient, a scalar, stays on the device too: backward must read it there).
      const Tensor tr = targets(c.N, c.K, seed + 1);
      const OpFn op = [tr, e](const std::vector<Tensor>& in) {
        const Tensor loss = cross_entropy(in[0], tr.to(in[0].device()), e);
        CHECK(loss.ndim() == 0);
        return loss;
      };
      // The loss sums K terms per row (log-sum-exp) and N rows: errors grow like sqrt(N + K);
      // logits of spread 2.
      const double sq = std::sqrt(double(c.N + c.K));
      const std::string what = "cross_entropy e=" + std::to_string(e);  // the harness adds the shape
      check_matches_cpu(what, op, {{c.N, c.K}}, {DType::f32, DType::f64, DType::bf16, DType::f16},
                        MatchOptions().scaled_inputs(2.0).with_seed(seed).with_forward_scale(
                            [sq](const Tensor&, const std::vector<Tensor>&) { return sq; }));
      seed += 2;
    }
  }
}

// By hand: NaN rows and the error flag for bad targets, and rejected arguments: no CPU comparison.
TEST_CASE("cross_entropy on CUDA: out-of-range targets give a NaN loss; bad arguments are rejected") {
  if (!have_gpu("cross_entropy on CUDA: out-of-range targets give a NaN loss; bad arguments are rejected")) return;
  const Tensor z = rnd({3, 4}, 7).to(DType::f32).to(gpu());
  for (int64_t bad : {int64_t(-1), int64_t(4)}) {
    const Tensor tgt = Tensor::from_vector<int64_t>({0, bad, 2}, {3}).to(gpu());
    // With RINGTAPE_SYNC_CHECKS set the op throws instead (the flag is read back).
    if (std::getenv("RINGTAPE_SYNC_CHECKS") != nullptr) {
      CHECK_THROWS_WITH_AS(cross_entropy(z, tgt), doctest::Contains("outside [0, 4)"), Error);
      continue;
    }
    Tensor zz = z.detach().set_requires_grad(true);
    const Tensor loss = cross_entropy(zz, tgt);
    CHECK(std::isnan(loss.item()));
    loss.backward();
    const std::vector<double> d = zz.grad().to_vector<double>();
    for (int k = 0; k < 4; ++k) {
      CHECK(std::isnan(d[size_t(4 + k)]));   // the bad row
      CHECK(!std::isnan(d[size_t(k)]));      // a good row
    }
    // The launcher's flag reports it.
    Tensor p = poisoned({3, 4}, DType::f32), rl = poisoned({3}, DType::f32), l = poisoned({}, DType::f32);
    Tensor flag = Tensor::zeros({1}, DType::i32, gpu());
    cuda::cross_entropy_forward(DType::f32, 3, 4, z.raw_data(), tgt.data<int64_t>(), 0.0, p.raw_data(), rl.raw_data(),
                                l.raw_data(), flag.data<int32_t>(), stream());
    CHECK(flag.item() == 1);
  }
  const Tensor zi = Tensor::full({2, 3}, 1.0, DType::i32, gpu());
  const Tensor t2 = Tensor::from_vector<int64_t>({0, 1}, {2}).to(gpu());
  CHECK_THROWS_WITH_AS(cross_entropy(zi, t2), doctest::Contains("must be f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, t2), doctest::Contains("3 rows of logits but 2 targets"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(z, Tensor::from_vector<int64_t>({0, 1, 2}, {3})),
                       doctest::Contains("different devices"), Error);
}

}  // namespace
}  // namespace rt
