// conv2d: forward against a direct seven-loop convolution in double, every layout
// combination; gradients by gradcheck in f64.
#include "engine/ops.h"
#include "tests/conv2d_cases.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

using Case = test::ConvCase;

// The definition, nothing clever: y[n,o,i,j] = b[o] + sum_{c,kh,kw} x[n, g*Cg + c, i*s - p + kh*d, ...] w[o,c,kh,kw].
std::vector<double> reference(const Case& k, const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b, int64_t HO, int64_t WO) {
  const Conv2dParams& p = k.p;
  const int64_t Cg = k.C / p.groups, Og = k.O / p.groups;
  std::vector<double> y(size_t(k.N * k.O * HO * WO));
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t o = 0; o < k.O; ++o)
      for (int64_t i = 0; i < HO; ++i)
        for (int64_t j = 0; j < WO; ++j) {
          double s = k.bias ? b[o] : 0.0;
          const int64_t grp = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < k.KH; ++kh)
              for (int64_t kw = 0; kw < k.KW; ++kw) {
                const int64_t ih = i * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t iw = j * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (ih < 0 || ih >= k.H || iw < 0 || iw >= k.W) continue;
                s += x[((n * k.C + grp * Cg + c) * k.H + ih) * k.W + iw] * w[((o * Cg + c) * k.KH + kh) * k.KW + kw];
              }
          y[((n * k.O + o) * HO + i) * WO + j] = s;
        }
  return y;
}

TEST_CASE("conv2d forward matches the direct definition in every layout") {
  for (size_t ci = 0; ci < test::conv_cases().size(); ++ci) {
    const Case& k = test::conv_cases()[ci];
    const Tensor x = test::rnd({k.N, k.C, k.H, k.W}, 10 + ci);
    const Tensor w = test::rnd({k.O, k.C / k.p.groups, k.KH, k.KW}, 20 + ci);
    const Tensor b = test::rnd({k.O}, 30 + ci);
    const Tensor y64 = conv2d(x, w, k.bias ? b : Tensor(), k.p);
    const int64_t HO = y64.size(2), WO = y64.size(3);
    const std::vector<double> ref =
        reference(k, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), HO, WO);
    for (DType dt : {DType::f64, DType::f32})
      for (MemoryFormat xf : {MemoryFormat::contiguous, MemoryFormat::channels_last})
        for (MemoryFormat wf : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
          const Tensor y = conv2d(x.to(dt).to(xf), w.to(dt).to(wf), k.bias ? b.to(dt) : Tensor(), k.p);
          CHECK(y.format() == xf);
          test::check_close(y, ref, test::tol_for(dt),
                            detail::cat("case ", ci, " ", dtype_name(dt), " x ", fmt_name(xf), " w ", fmt_name(wf)));
        }
  }
}

TEST_CASE("conv2d batches of several images through the chunked patch matrix") {
  // Small outputs (HO*WO < 256) go through the multi-image path; check it against the
  // single-image results.
  const Case k{5, 3, 6, 6, 4, 3, 3, Conv2dParams::make(1, 1), true};
  const Tensor x = test::rnd({k.N, k.C, k.H, k.W}, 1), w = test::rnd({k.O, k.C, 3, 3}, 2), b = test::rnd({k.O}, 3);
  const Tensor y = conv2d(x, w, b, k.p);
  for (int64_t n = 0; n < k.N; ++n)
    test::check_close(y.slice_batch(n, n + 1), conv2d(x.slice_batch(n, n + 1).clone(), w, b, k.p), test::kTolF64,
                      detail::cat("image ", n));
}

TEST_CASE("conv2d gradients pass gradcheck in every layout") {
  for (size_t ci = 0; ci < test::conv_cases().size(); ++ci) {
    const Case& k = test::conv_cases()[ci];
    for (MemoryFormat xf : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (MemoryFormat wf : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
        const Tensor x = test::leaf(test::rnd({k.N, k.C, k.H, k.W}, 40 + ci, DType::f64, xf));
        const Tensor w = test::leaf(test::rnd({k.O, k.C / k.p.groups, k.KH, k.KW}, 50 + ci, DType::f64, wf));
        const Tensor b = test::leaf(test::rnd({k.O}, 60 + ci));
        test::check_gradcheck(
            [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], k.bias ? in[2] : Tensor(), k.p); },
            {x, w, b}, detail::cat("case ", ci, " x ", fmt_name(xf), " w ", fmt_name(wf)));
        CHECK(x.grad().format() == xf);
        CHECK(w.grad().format() == wf);
      }
  }
}

TEST_CASE("conv2d computes only the gradients that are needed") {
  const Tensor x = test::rnd({2, 3, 5, 5}, 1);  // like a network's input: no gradient
  const Tensor w = test::leaf(test::rnd({4, 3, 3, 3}, 2));
  sum(conv2d(x, w, Tensor(), Conv2dParams::make(1, 1))).backward();
  CHECK(w.grad().defined());
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("conv2d rejects bad arguments with clear messages") {
  const Tensor x = test::rnd({1, 3, 5, 5}, 1);
  CHECK_THROWS_WITH_AS(conv2d(x, test::rnd({4, 2, 3, 3}, 2), Tensor(), Conv2dParams::make(1, 1)),
                       doctest::Contains("input has 3 channels"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, test::rnd({4, 3, 3, 3}, 2), test::rnd({5}, 3), Conv2dParams::make(1, 1)),
                       doctest::Contains("bias must be [4]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, test::rnd({4, 3, 7, 7}, 2), Tensor(), Conv2dParams::make(1, 0)),
                       doctest::Contains("larger than the padded input"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, test::rnd({4, 3, 3, 3}, 2, DType::f32), Tensor(), Conv2dParams::make(1, 1)),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, test::rnd({4, 3, 3, 3}, 2), Tensor(), Conv2dParams::make(0, 1)),
                       doctest::Contains("stride and dilation must be positive"), Error);
  CHECK_THROWS_AS(conv2d(x.view({3, 25}), test::rnd({4, 3, 3, 3}, 2), Tensor(), Conv2dParams::make(1, 1)), Error);
}

}  // namespace
}  // namespace rt
