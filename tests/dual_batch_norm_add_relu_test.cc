// dual_batch_norm_add_relu on the CPU, where it is the composition
// batch_norm_add_relu(x, batch_norm(r, ...)) (Note [Two batch norms in one tail] in
// engine/ops/dual_batch_norm_add_relu.cc): bit for bit that composition, values, gradients and
// both running statistics; f64 gradcheck in all six inputs; argument errors; the module's
// forward_add_relu. The fused CUDA kernels: tests/cuda/dual_batch_norm_add_relu_cuda_test.cc.
#include <string>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using test::fmt_name;

MemoryFormat other(MemoryFormat f) {
  return f == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// A batch norm's weight and bias (leaves) and running statistics, dtype t.
struct Bn {
  Tensor w, b, rm, rv;
  BatchNormArgs args() const { return BatchNormArgs{w, b, rm, rv, 0.1, 1e-5, {}}; }
};
Bn make_bn(int64_t C, uint64_t seed, DType t) {
  return {test::leaf(add(test::rnd({C}, seed), 1.5).to(t)), test::leaf(test::rnd({C}, seed + 1).to(t)),
          test::rnd({C}, seed + 2).to(t), add(square(test::rnd({C}, seed + 3)), 0.5).to(t)};
}
Bn copy_of(const Bn& b) {
  return {test::leaf(b.w.detach()), test::leaf(b.b.detach()), b.rm.clone(), b.rv.clone()};
}

TEST_CASE("dual_batch_norm_add_relu on the CPU is the composition, bit for bit") {
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {3, 5, 1, 1}, {6, 4}};
  uint64_t seed = 100;
  for (const Shape& s : shapes)
    for (DType t : {DType::f32, DType::f64})
      for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
        for (bool r_other : {false, true})
          for (bool training : {true, false}) {
            if (s.size() != 4 && (f != MemoryFormat::contiguous || r_other)) continue;
            const std::string what = detail::cat(shape_str(s), " ", dtype_name(t), " ", fmt_name(f),
                                                 r_other ? " residual other format" : "",
                                                 training ? " training" : " eval");
            const int64_t C = s[1];
            const Tensor x = test::leaf(test::rnd(s, ++seed, t, f));
            const Tensor r = test::leaf(test::rnd(s, ++seed, t, r_other ? other(f) : f));
            const Bn a = make_bn(C, seed += 4, t), b = make_bn(C, seed += 4, t);
            const Tensor xc = test::leaf(x.detach()), rc = test::leaf(r.detach());
            const Bn ac = copy_of(a), bc = copy_of(b);
            const Tensor y = dual_batch_norm_add_relu(x, a.args(), r, b.args(), training);
            const Tensor yc = batch_norm_add_relu(
                xc, batch_norm(rc, bc.w, bc.b, bc.rm, bc.rv, training), ac.w, ac.b, ac.rm, ac.rv, training);
            CHECK_MESSAGE(y.to_vector<double>() == yc.to_vector<double>(), what, " y");
            CHECK(y.format() == f);
            const Tensor g = test::rnd(s, ++seed, t, f);
            y.backward(g);
            yc.backward(g);
            const std::pair<Tensor, Tensor> same[] = {{x.grad(), xc.grad()}, {r.grad(), rc.grad()},
                                                      {a.w.grad(), ac.w.grad()}, {a.b.grad(), ac.b.grad()},
                                                      {b.w.grad(), bc.w.grad()}, {b.b.grad(), bc.b.grad()},
                                                      {a.rm, ac.rm}, {a.rv, ac.rv}, {b.rm, bc.rm}, {b.rv, bc.rv}};
            int i = 0;
            for (const auto& [got, want] : same) {
              REQUIRE_MESSAGE(got.defined(), what, " #", i);
              CHECK_MESSAGE(got.to_vector<double>() == want.to_vector<double>(), what,
                            " (gradients of x, r, wa, ba, wb, bb, then running statistics) #", i);
              ++i;
            }
            CHECK(r.grad().format() == r.format());
          }
}

TEST_CASE("dual_batch_norm_add_relu passes gradcheck in x, r and both batch norms' weight and bias") {
  const std::vector<Shape> shapes = {{2, 3, 3, 4}, {1, 2, 3, 3}, {5, 3}};
  uint64_t seed = 300;
  for (const Shape& s : shapes)
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last})
      for (bool training : {true, false}) {
        if (s.size() != 4 && f != MemoryFormat::contiguous) continue;
        const int64_t C = s[1];
        const Tensor x = test::leaf(test::rnd(s, ++seed, DType::f64, f));
        const Tensor r = test::leaf(test::rnd(s, ++seed, DType::f64, s.size() == 4 ? other(f) : f));
        const Bn a = make_bn(C, seed += 4, DType::f64), b = make_bn(C, seed += 4, DType::f64);
        test::check_gradcheck(
            [&](const std::vector<Tensor>& v) {
              const BatchNormArgs aa{v[1], v[2], a.rm.clone(), a.rv.clone(), 0.1, 1e-5, {}};
              const BatchNormArgs ba{v[4], v[5], b.rm.clone(), b.rv.clone(), 0.1, 1e-5, {}};
              return dual_batch_norm_add_relu(v[0], aa, v[3], ba, training);
            },
            {x, a.w, a.b, r, b.w, b.b},
            detail::cat("dual_batch_norm_add_relu ", shape_str(s), " ", fmt_name(f), training ? " training" : " eval"));
      }
}

TEST_CASE("dual_batch_norm_add_relu rejects bad arguments with clear messages") {
  const Tensor x = test::rnd({2, 3, 4, 4}, 1);
  const BatchNormArgs none{};
  CHECK_THROWS_WITH_AS(dual_batch_norm_add_relu(x, none, test::rnd({2, 3, 4, 5}, 2), none, true),
                       doctest::Contains("dual_batch_norm_add_relu: the residual must have the input's shape"), Error);
  CHECK_THROWS_WITH_AS(dual_batch_norm_add_relu(x, none, test::rnd({2, 3, 4, 4}, 2, DType::f32), none, true),
                       doctest::Contains("different dtypes"), Error);
  CHECK_THROWS_WITH_AS(dual_batch_norm_add_relu(x, none, Tensor(), none, true),
                       doctest::Contains("dual_batch_norm_add_relu"), Error);
  BatchNormArgs bad_b;
  bad_b.weight = test::rnd({4}, 3);
  CHECK_THROWS_WITH_AS(dual_batch_norm_add_relu(x, none, test::rnd({2, 3, 4, 4}, 2), bad_b, true),
                       doctest::Contains("dual_batch_norm_add_relu: weight must be [3]"), Error);
  BatchNormArgs sums_a;
  sums_a.sums = ChannelSums{Tensor::zeros({3}, DType::f32), Tensor::zeros({3}, DType::f32)};
  CHECK_THROWS_WITH_AS(dual_batch_norm_add_relu(x, sums_a, test::rnd({2, 3, 4, 4}, 2), none, true),
                       doctest::Contains("channel sums are a CUDA convolution's"), Error);
}

TEST_CASE("BatchNorm2d::forward_add_relu is relu(forward(x) + shortcut.forward(r)) and counts both batches") {
  nn::BatchNorm2d bn(3), shortcut(3);
  nn::BatchNorm2d bn_c(3), shortcut_c(3);
  const Tensor x = test::rnd({2, 3, 4, 4}, 5).to(DType::f32), r = test::rnd({2, 3, 4, 4}, 6).to(DType::f32);
  const Tensor y = bn.forward_add_relu(x, {}, shortcut, r, {});
  const Tensor yc = relu(add(bn_c.forward(x), shortcut_c.forward(r)));
  test::check_close(y, yc, test::tol_for(DType::f32), "forward_add_relu");
  CHECK(bn.num_batches_tracked.item() == 1.0);
  CHECK(shortcut.num_batches_tracked.item() == 1.0);
  CHECK(shortcut.running_mean.to_vector<double>() == shortcut_c.running_mean.to_vector<double>());
  shortcut.eval();
  CHECK_THROWS_WITH_AS(bn.forward_add_relu(x, {}, shortcut, r, {}),
                       doctest::Contains("the shortcut's batch norm is in eval mode"), Error);
}

}  // namespace
}  // namespace rt
