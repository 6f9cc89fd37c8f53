// GPU-vs-CPU tests of pooling: the max_pool2d launchers (values and int64 argmax) on
// NaN-poisoned outputs against kernels/cpu/pool.cc, then max_pool2d, adaptive_avg_pool2d
// and global_avg_pool through autograd on CUDA against the CPU ops. NCHW and NHWC, batch 1,
// odd sizes, padding, dilation, ceil_mode, NaN inputs, every float dtype. Without a GPU the
// GPU tests print SKIPPED lines; the launchers' host-side argument checks still run.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/pool.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kFormats[] = {MemoryFormat::contiguous, MemoryFormat::channels_last};

cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

// v64 with every `every`-th element replaced by NaN (every = 0: unchanged).
Tensor with_nans(const Tensor& v64, int64_t every) {
  if (every == 0) return v64;
  std::vector<double> v = v64.to_vector<double>();
  for (size_t i = 3; i < v.size(); i += size_t(every)) v[i] = std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_vector<double>(v, v64.shape());
}

// Like check_close, but a NaN on both sides counts as equal (NaN-propagation tests).
void check_close_nan(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  REQUIRE(g.size() == w.size());
  int nans = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK_MESSAGE(std::isnan(g[i]) == std::isnan(w[i]), what, ": NaN mismatch at ", i, ": got ", g[i], ", want ",
                  w[i]);
    if (std::isnan(g[i]) && std::isnan(w[i])) g[i] = w[i] = 0, ++nans;
  }
  check_close(g, w, tol, what);
}

struct MaxCase {
  Shape shape;
  Pool2dParams p;
};
// ResNet's stem pool, odd sizes, batch 1, stride > kernel, dilation, ceil_mode (with a last
// window hanging over the edge), rectangular kernels.
const std::vector<MaxCase> kMaxCases = {
    {{2, 3, 16, 16}, Pool2dParams::make(3, 2, 1)},
    {{1, 5, 7, 9}, Pool2dParams::make(3, 2, 1)},
    {{1, 1, 5, 5}, Pool2dParams::make(2, 2, 0)},
    {{3, 4, 11, 13}, Pool2dParams::make(3, 2, 1, 2)},
    {{2, 3, 9, 10}, Pool2dParams::make(3, 2, 0, 1, true)},
    {{1, 6, 8, 7}, Pool2dParams::make(2, 3, 1, 1, true)},
    {{2, 37, 6, 5}, Pool2dParams{3, 2, 1, 2, 1, 0, 1, 2, false}},
    {{1, 2, 4, 4}, Pool2dParams::make(1, 1, 0)},
};

TEST_CASE("pool launchers reject bad arguments on the host (runs without a GPU)") {
  float dummy[8];
  int64_t idx[8];
  const cuda::Pool2dGeom ok{1, 1, 2, 2, 1, 1, 2, 2, 2, 2, 0, 0, 1, 1, false};
  cuda::Pool2dGeom bad = ok;
  bad.HO = 0;
  CHECK_THROWS_WITH_AS(cuda::max_pool2d_forward(bad, DType::f32, dummy, dummy, idx, nullptr),
                       doctest::Contains("bad geometry"), Error);
  bad = ok;
  bad.sh = 0;
  CHECK_THROWS_WITH_AS(cuda::max_pool2d_backward(bad, DType::f32, dummy, idx, dummy, nullptr),
                       doctest::Contains("must be positive"), Error);
  CHECK_THROWS_WITH_AS(cuda::max_pool2d_forward(ok, DType::f32, dummy, dummy, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::adaptive_avg_pool2d_forward(ok, DType::i64, dummy, dummy, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::adaptive_avg_pool2d_backward(ok, DType::f32, nullptr, dummy, nullptr),
                       doctest::Contains("null pointer"), Error);
  // An empty batch is a no-op (no launch, so no device needed).
  cuda::Pool2dGeom empty = ok;
  empty.N = 0;
  cuda::max_pool2d_forward(empty, DType::f32, nullptr, nullptr, nullptr, nullptr);
  cuda::adaptive_avg_pool2d_backward(empty, DType::f32, nullptr, nullptr, nullptr);
}

// By hand: the launchers on raw buffers against kernels/cpu (int64 argmax exactly, NaN inputs),
// below the autograd op the harness runs.
TEST_CASE("max_pool2d launchers match the CPU kernels, argmax included") {
  if (!have_gpu("max_pool2d launchers match the CPU kernels, argmax included")) return;
  uint64_t seed = 1;
  for (DType t : kFloatTypes) {
    for (const MaxCase& mc : kMaxCases) {
      for (MemoryFormat f : kFormats) {
        for (int64_t every : {0, 7}) {
          const std::string what = label("max_pool2d launcher", t, mc.shape, f) + (every ? " NaN" : "");
          // The CPU op gives the output geometry (ceil_mode rule) and the reference.
          const Tensor x64 = with_nans(rnd(mc.shape, ++seed), every), dy64 = rnd(mc.shape, ++seed);
          const Tensor xr = to_ref(x64, t, f), xd = to_gpu(x64, t, f);
          const Tensor yr = max_pool2d(xr, mc.p);
          const auto& p = mc.p;
          const int64_t N = mc.shape[0], C = mc.shape[1], HO = yr.size(2), WO = yr.size(3);
          const bool nhwc = f == MemoryFormat::channels_last;
          const cpu::Pool2dGeom cg{N, C, mc.shape[2], mc.shape[3], HO, WO, p.kernel_h, p.kernel_w, p.stride_h,
                                   p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, nhwc};
          const cuda::Pool2dGeom g{cg.N, cg.C, cg.H, cg.W, cg.HO, cg.WO, cg.kh, cg.kw, cg.sh, cg.sw, cg.ph, cg.pw,
                                   cg.dh, cg.dw, nhwc};
          const int64_t no = N * C * HO * WO, ni = x64.numel();
          const DType rd = ref_dtype(t);
          Tensor ycpu = Tensor::empty({no}, rd), icpu = Tensor::empty({no}, DType::i64);
          const Tensor& xflat = xr;  // already in layout f
          if (rd == DType::f64) cpu::max_pool2d_forward<double>(cg, xflat.data<double>(), ycpu.data<double>(), icpu.data<int64_t>());
          else cpu::max_pool2d_forward<float>(cg, xflat.data<float>(), ycpu.data<float>(), icpu.data<int64_t>());
          Tensor yd = poisoned({no}, t), id = Tensor::full({no}, -7.0, DType::i64, gpu());
          cuda::max_pool2d_forward(g, t, xd.raw_data(), yd.raw_data(), id.data<int64_t>(), stream());
          check_close_nan(yd, ycpu, gpu_tol_for(t), what + " y");
          check_close(id.to_vector<double>(), icpu.to_vector<double>(), kExact, what + " argmax");

          // Backward from the (equal) argmax: dy in the output's layout, flat.
          const Tensor dyo64 = rnd({no}, ++seed);
          const Tensor dyd = dyo64.to(t).to(gpu()), dyr = dyo64.to(t).to(rd);
          Tensor dxd = poisoned({ni}, t), dxr = Tensor::empty({ni}, rd);
          cuda::max_pool2d_backward(g, t, dyd.raw_data(), id.data<int64_t>(), dxd.raw_data(), stream());
          if (rd == DType::f64) cpu::max_pool2d_backward<double>(cg, dyr.data<double>(), icpu.data<int64_t>(), dxr.data<double>());
          else cpu::max_pool2d_backward<float>(cg, dyr.data<float>(), icpu.data<int64_t>(), dxr.data<float>());
          check_on_gpu(dxd, dxr, gpu_tol_for(t), what + " dx");
        }
      }
    }
  }
}

TEST_CASE("max_pool2d op forward and backward on CUDA match the CPU") {
  uint64_t seed = 100;
  for (const MaxCase& mc : kMaxCases)
    for (MemoryFormat f : kFormats) {
      const Pool2dParams p = mc.p;
      const OpFn op = [p](const std::vector<Tensor>& in) {
        const Tensor y = max_pool2d(in[0], p);
        CHECK_MESSAGE(y.format() == in[0].format(), "max_pool2d: y not in x's format");
        return y;
      };
      check_matches_cpu("max_pool2d case " + std::to_string(&mc - kMaxCases.data()), op, {mc.shape},
                        {DType::f32, DType::f64, DType::bf16, DType::f16},
                        // dx's scale 1: an input gets the gradients of the few windows it is the
                        // maximum of (the harness's default is sqrt(output / input elements)).
                        MatchOptions().with_formats({f}).with_seed(++seed).with_grad_scale(
                            [](size_t, const Tensor&, const Tensor&) { return 1.0; }));
    }
}

struct AvgCase {
  Shape shape;
  int oh, ow;
};
// Global (1x1, the fast path), exact divisions, overlapping windows (7 -> 3, 5 -> 4), an
// output larger than the input, batch 1, channel counts above a warp.
const std::vector<AvgCase> kAvgCases = {
    {{2, 3, 7, 7}, 1, 1},   {{1, 37, 5, 3}, 1, 1}, {{3, 70, 9, 9}, 1, 1}, {{1, 1, 1, 1}, 1, 1},
    {{2, 4, 8, 8}, 2, 2},   {{1, 5, 7, 5}, 3, 4},  {{2, 3, 3, 2}, 5, 3},  {{1, 2, 13, 11}, 6, 5},
};

TEST_CASE("adaptive_avg_pool2d and global_avg_pool on CUDA match the CPU") {
  uint64_t seed = 300;
  for (const AvgCase& ac : kAvgCases)
    for (MemoryFormat f : kFormats) {
      const std::string what = "adaptive_avg_pool2d -> " + std::to_string(ac.oh) + "x" + std::to_string(ac.ow);
      // Sums of a window: errors grow like sqrt(window) (<= the whole plane); dx's scale 1 (a
      // sum of at most a few overlapping windows' shares), as before the harness.
      const double sq = std::sqrt(double(ac.shape[2] * ac.shape[3]));
      const MatchOptions opt = MatchOptions()
                                   .with_formats({f})
                                   .with_seed(++seed)
                                   .with_forward_scale([sq](const Tensor&, const std::vector<Tensor>&) { return sq; })
                                   .with_grad_scale([](size_t, const Tensor&, const Tensor&) { return 1.0; });
      const int oh = ac.oh, ow = ac.ow;
      check_matches_cpu(
          what, [oh, ow](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], oh, ow); }, {ac.shape},
          {DType::f32, DType::f64, DType::bf16, DType::f16}, opt);
      if (ac.oh != 1 || ac.ow != 1) continue;
      check_matches_cpu(
          "global_avg_pool",
          [](const std::vector<Tensor>& in) { return global_avg_pool(in[0]); }, {ac.shape},
          {DType::f32, DType::f64, DType::bf16, DType::f16}, opt);
    }
}

TEST_CASE("pooling on CUDA rejects what the CPU rejects") {
  if (!have_gpu("pooling on CUDA rejects what the CPU rejects")) return;
  const Tensor xi = Tensor::full({1, 1, 4, 4}, 1.0, DType::i32, gpu());
  CHECK_THROWS_WITH_AS(max_pool2d(xi, Pool2dParams::make(2, 2, 0)), doctest::Contains("must be f32, f64, bf16 or f16"),
                       Error);
  const Tensor x = Tensor::full({1, 1, 2, 2}, 1.0, DType::f32, gpu());
  CHECK_THROWS_WITH_AS(max_pool2d(x, Pool2dParams::make(3, 1, 0)), doctest::Contains("too small"), Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(x, 0, 1), doctest::Contains("must be positive"), Error);
}

}  // namespace
}  // namespace rt
