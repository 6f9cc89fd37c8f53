// batch_norm_relu_conv2d on the CPU, where it is the composition conv2d(batch_norm_relu(...))
// (Note [Batch norm as the next convolution's prologue] in engine/ops/batch_norm_relu_conv2d.cc):
// f64 gradcheck of the op in every argument, bit-for-bit equality with the two ops written
// out, the prologue's f32 references (cpu::batch_norm_prologue_coefs, cpu::prologue_keeps),
// and its argument errors. The CUDA path: tests/cuda/batch_norm_relu_conv2d_cuda_test.cc.
#include <cmath>
#include <vector>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "kernels/cpu/batch_norm.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

TEST_CASE("batch_norm_relu_conv2d passes f64 gradcheck in x, weight, bias and the convolution's weight") {
  struct Geo {
    Shape x;
    int64_t O, K;
    int stride, pad;
  };
  int si = 0;
  for (const Geo& d : {Geo{{2, 3, 5, 4}, 4, 3, 1, 1}, Geo{{1, 5, 3, 3}, 2, 1, 2, 0}, Geo{{3, 2, 1, 1}, 3, 1, 1, 0}})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (bool training : {true, false}) {
        ++si;
        const int64_t C = d.x[1];
        const Tensor x = test::leaf(test::rnd(d.x, 10 + si, DType::f64, f));
        const Tensor w = test::leaf(add(test::rnd({C}, 20 + si), 1.5)), b = test::leaf(test::rnd({C}, 30 + si));
        const Tensor cw = test::leaf(test::rnd({d.O, C, d.K, d.K}, 40 + si, DType::f64, f));
        Tensor rm = test::rnd({C}, 50 + si), rv = add(mul(test::rnd({C}, 60 + si), 0.2), 1.0);
        const Conv2dParams p = Conv2dParams::make(d.stride, d.pad);
        test::check_gradcheck(
            [&](const std::vector<Tensor>& in) {
              return batch_norm_relu_conv2d(in[0], in[1], in[2], rm, rv, training, 0.1, 1e-5, nullptr, {}, in[3], p);
            },
            {x, w, b, cw},
            detail::cat("x ", shape_str(d.x), " ", fmt_name(f), training ? " training" : " eval", " kernel ", d.K,
                        " stride ", d.stride));
      }
}

TEST_CASE("batch_norm_relu_conv2d on the CPU is the two ops, bit for bit, running statistics included") {
  const Shape s{2, 6, 7, 5};
  for (DType t : {DType::f32, DType::f64})
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      const Tensor x0 = test::rnd(s, 1, t, f), w0 = test::rnd({6}, 2, t), b0 = test::rnd({6}, 3, t);
      const Tensor cw0 = test::rnd({8, 6, 3, 3}, 4, t, f), dy = test::rnd({2, 8, 4, 3}, 5, t, f);
      const Conv2dParams p = Conv2dParams::make(2, 1);
      auto run = [&](bool fused, Tensor* rm, std::vector<Tensor>* grads) {
        const Tensor x = test::leaf(x0.clone()), w = test::leaf(w0.clone()), b = test::leaf(b0.clone());
        const Tensor cw = test::leaf(cw0.clone());
        *rm = Tensor::zeros({6}, t);
        Tensor rv = Tensor::full({6}, 1.0, t);
        const Tensor y = fused ? batch_norm_relu_conv2d(x, w, b, *rm, rv, true, 0.1, 1e-5, nullptr, {}, cw, p)
                               : conv2d(batch_norm_relu(x, w, b, *rm, rv, true), cw, Tensor(), p);
        y.backward(dy);
        *grads = {y, x.grad(), w.grad(), b.grad(), cw.grad(), rv};
      };
      Tensor rm_a, rm_b;
      std::vector<Tensor> a, b;
      run(true, &rm_a, &a);
      run(false, &rm_b, &b);
      const char* names[] = {"y", "dx", "dweight", "dbias", "dconv_weight", "running_var"};
      for (size_t i = 0; i < a.size(); ++i)
        test::check_close(a[i], b[i], test::kExact, detail::cat(names[i], " ", dtype_name(t), " ", fmt_name(f)));
      test::check_close(rm_a, rm_b, test::kExact, "running_mean");
    }
}

TEST_CASE("the prologue's f32 references round every operation once") {
  // scale = gamma * invstd, bias = beta - mean * scale; null gamma and beta are 1 and 0.
  const float mean[2] = {0.5f, -2.0f}, invstd[2] = {4.0f, 0.25f}, gamma[2] = {3.0f, -1.0f}, beta[2] = {1.0f, 0.5f};
  float scale[2], bias[2];
  cpu::batch_norm_prologue_coefs(2, mean, invstd, gamma, beta, scale, bias);
  CHECK(scale[0] == 12.0f);
  CHECK(bias[0] == -5.0f);
  CHECK(scale[1] == -0.25f);
  CHECK(bias[1] == 0.0f);
  cpu::batch_norm_prologue_coefs(2, mean, invstd, nullptr, nullptr, scale, bias);
  CHECK(scale[0] == 4.0f);
  CHECK(bias[0] == -2.0f);
  // The kink, where one rounding and two disagree: (1 + 2^-23)^2 = 1 + 2^-22 + 2^-46 rounds to
  // 1 + 2^-22, so x * s + b is 0 (not kept) with two roundings; an FMA would give 2^-46 > 0.
  const float a = 1.0f + std::ldexp(1.0f, -23), c = -(1.0f + std::ldexp(1.0f, -22));
  CHECK_FALSE(cpu::prologue_keeps(a, a, c));
  CHECK(cpu::prologue_keeps(a, a, c + std::ldexp(1.0f, -22)));
  CHECK_FALSE(cpu::prologue_keeps(std::nanf(""), 1.0f, 1.0f));  // NaN > 0 is false, as relu's max(v, 0) gives 0
}

TEST_CASE("batch_norm_relu_conv2d names what is wrong with its arguments") {
  const Tensor x = test::rnd({2, 4, 5, 5}, 1);
  const Tensor w = test::rnd({4}, 2), b = test::rnd({4}, 3);
  Tensor rm = Tensor::zeros({4}), rv = Tensor::full({4}, 1.0);
  const Conv2dParams p = Conv2dParams::make(1, 1);
  CHECK_THROWS_WITH_AS(
      batch_norm_relu_conv2d(x, w, b, rm, rv, true, 0.1, 1e-5, nullptr, {}, test::rnd({6, 3, 3, 3}, 4), p),
      doctest::Contains("batch_norm_relu_conv2d: input has 4 channels but weight"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_relu_conv2d(x, test::rnd({3}, 5), b, rm, rv, true, 0.1, 1e-5, nullptr, {},
                                              test::rnd({6, 4, 3, 3}, 4), p),
                       doctest::Contains("batch_norm_relu_conv2d: weight must be [4]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_relu_conv2d(x, w, b, rm, rv, true, 0.1, 1e-5, nullptr, {},
                                              test::rnd({6, 4, 7, 7}, 4), Conv2dParams::make(1, 0)),
                       doctest::Contains("is larger than the padded input"), Error);
}

}  // namespace
}  // namespace rt
