// Synchronised batch norm (Note [Synchronised batch norm] in engine/ops/batch_norm_sync.h):
// batch_norm, batch_norm_relu and batch_norm_add_relu on K shards of one batch, each shard in
// its own thread with a BatchNormSync that all-gathers in memory (the ops merge what it
// gathers: merge_moments, sum_grad_sums), equal the op on the whole batch: the
// outputs, dx and dresidual shard by shard, dweight and dbias summed over the shards, and
// every shard's running statistics.
//
// The bound: every shard and the whole batch compute the same per-channel statistics and
// backward sums in double, in another order (each shard's two-pass moments merged with
// Chan's formula; the sums over shards added in shard order): shard_bound_for(dt, false),
// whose row of Note [Tolerances] in tests/test_util.h says why; relative to the largest value,
// or for the summed gradients to the largest sum of the shards' magnitudes. Measured: printed
// by the test.
#include <cmath>
#include <memory>

#include "engine/nn/layers.h"
#include "engine/ops.h"
#include "tests/batch_norm_sync_util.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using namespace bn_sync_test;  // NOLINT: the harness is this test's vocabulary

TEST_CASE("merge_moments and sum_grad_sums: Chan's merge in shard order, empty shards skipped") {
  // Shards {1, 2}, {} and {3, 4, 5} of one channel: mean 3, m2 = 4 + 1 + 0 + 1 + 4 = 10.
  const std::vector<double> blocks = {2, 1.5, 0.5, 0, 0, 0, 3, 4, 2};
  double mean = -1, m2 = -1;
  CHECK(merge_moments(1, 3, blocks.data(), &mean, &m2) == 5);
  CHECK(mean == 3);
  CHECK(m2 == 10);
  const std::vector<double> sums = {1, 10, 2, 20, 4, 40};  // 3 shards of (sum_dz, sum_dz_xmu), C = 1
  double s0 = -1, s1 = -1;
  sum_grad_sums(1, 3, sums.data(), &s0, &s1);
  CHECK(s0 == 7);
  CHECK(s1 == 70);
}

TEST_CASE("the ops on synchronised shards equal the op on the whole batch: y, every gradient, running stats") {
  struct Case {
    Shape shape;
    std::vector<std::vector<int64_t>> splits;
  };
  const std::vector<Case> cases = {
      {{6, 3, 4, 5}, {{3, 3}, {2, 2, 2}, {1, 2, 3}}},  // uneven shards: Chan's weights differ
      {{6, 5}, {{3, 3}, {1, 2, 3}}},                   // (N, C): a shard of one value per channel
      {{6, 4, 3}, {{2, 2, 2}}},                        // (N, C, L)
      {{12, 16, 12, 12}, {{6, 6}, {4, 4, 4}}},         // the kernels' multi-threaded paths
  };
  const double bound64 = test::shard_bound_for(DType::f64, false), bound32 = test::shard_bound_for(DType::f32, false);
  Worst worst64, worst32;
  uint64_t seed = 7000;
  for (const Case& cs : cases) {
    const int64_t C = cs.shape[1];
    Inputs in{test::rnd(cs.shape, ++seed), test::rnd(cs.shape, ++seed), test::rnd(cs.shape, ++seed),
              add(test::rnd({C}, ++seed), 1.0), test::rnd({C}, ++seed), test::rnd({C}, ++seed),
              add(square(test::rnd({C}, ++seed)), 0.5)};
    in.x = add(mul(in.x, 3.0), 2.0);  // a mean away from 0 and a spread away from 1
    const std::vector<MemoryFormat> formats =
        cs.shape.size() == 4 ? std::vector<MemoryFormat>{MemoryFormat::contiguous, MemoryFormat::channels_last}
                             : std::vector<MemoryFormat>{MemoryFormat::contiguous};
    for (const auto& split : cs.splits)
      for (Op op : {Op::bn, Op::bn_relu, Op::bn_add_relu})
        for (DType dt : {DType::f64, DType::f32})
          for (MemoryFormat f : formats) {
            std::string sp;
            for (int64_t n : split) sp += (sp.empty() ? "" : "+") + std::to_string(n);
            const std::string what = detail::cat(op_name(op), " ", shape_str(cs.shape), " as ", sp, " ",
                                                 dtype_name(dt), " ", test::fmt_name(f));
            const double bound = dt == DType::f64 ? bound64 : bound32;
            Worst& worst = dt == DType::f64 ? worst64 : worst32;
            const Result whole = run_op(op, in, 0, cs.shape[0], dt, f, nullptr);
            std::vector<std::shared_ptr<ShardSync>> syncs;
            const std::vector<Result> shards = run_shards(op, in, split, dt, f, syncs);
            for (const auto& s : syncs) {
              CHECK_MESSAGE(s->stats_calls == 1, what);
              CHECK_MESSAGE(s->grad_calls == 1, what);
            }
            check_within(concat(shards, &Result::y), whole.y, max_abs(whole.y), bound, what + ": y", worst);
            check_within(concat(shards, &Result::dx), whole.dx, max_abs(whole.dx), bound, what + ": dx", worst);
            if (op == Op::bn_add_relu)
              check_within(concat(shards, &Result::dr), whole.dr, max_abs(whole.dr), bound, what + ": dresidual",
                           worst);
            std::vector<double> sum;
            double scale = 0;
            sum_shards(shards, &Result::dw, sum, scale);
            check_within(sum, whole.dw, scale, bound, what + ": dweight summed", worst);
            sum_shards(shards, &Result::db, sum, scale);
            check_within(sum, whole.db, scale, bound, what + ": dbias summed", worst);
            for (size_t k = 0; k < shards.size(); ++k) {
              // Every shard merged the same blocks in the same order: the same bits.
              CHECK_MESSAGE(shards[k].rm == shards[0].rm, what, ": shard ", k, "'s running_mean");
              CHECK_MESSAGE(shards[k].rv == shards[0].rv, what, ": shard ", k, "'s running_var");
            }
            check_within(shards[0].rm, whole.rm, max_abs(whole.rm), bound, what + ": running_mean", worst);
            check_within(shards[0].rv, whole.rv, max_abs(whole.rv), bound, what + ": running_var", worst);
          }
  }
  MESSAGE("largest difference / its unit: f64 ", worst64.ratio, " (bound ", bound64, ", ", worst64.what, "); f32 ",
          worst32.ratio, " (bound ", bound32, ", ", worst32.what, ")");
}

TEST_CASE("without a sync, shards normalise alone: the test above can tell") {
  // The same split without synchronisation differs far beyond the bound.
  const Shape s{6, 3, 4, 5};
  Inputs in{add(mul(test::rnd(s, 1), 3.0), 2.0), test::rnd(s, 2), test::rnd(s, 3), add(test::rnd({3}, 4), 1.0),
            test::rnd({3}, 5), test::rnd({3}, 6), Tensor::full({3}, 1.0, DType::f64)};
  const Result whole = run_op(Op::bn, in, 0, 6, DType::f64, MemoryFormat::contiguous, nullptr);
  const Result half = run_op(Op::bn, in, 0, 3, DType::f64, MemoryFormat::contiguous, nullptr);
  const std::vector<double> first(whole.y.begin(), whole.y.begin() + int64_t(half.y.size()));
  double err = 0;
  for (size_t i = 0; i < first.size(); ++i) err = std::max(err, std::abs(first[i] - half.y[i]));
  CHECK(err > 1e-3);
}

TEST_CASE("a world of one changes nothing, bit for bit; eval mode never calls the sync") {
  const Shape s{4, 3, 5, 5};
  Inputs in{test::rnd(s, 11), test::rnd(s, 12), test::rnd(s, 13), add(test::rnd({3}, 14), 1.0), test::rnd({3}, 15),
            test::rnd({3}, 16), Tensor::full({3}, 1.0, DType::f64)};
  for (Op op : {Op::bn, Op::bn_relu, Op::bn_add_relu})
    for (DType dt : {DType::f64, DType::f32}) {
      Exchange one(1);
      auto sync = std::make_shared<ShardSync>(one, 0, 3);
      const Result a = run_op(op, in, 0, 4, dt, MemoryFormat::channels_last, sync);
      const Result b = run_op(op, in, 0, 4, dt, MemoryFormat::channels_last, nullptr);
      CHECK(sync->stats_calls == 1);
      CHECK(a.y == b.y);
      CHECK(a.dx == b.dx);
      CHECK(a.dw == b.dw);
      CHECK(a.db == b.db);
      CHECK(a.dr == b.dr);
      CHECK(a.rm == b.rm);
      CHECK(a.rv == b.rv);
    }
  Exchange one(1);
  auto sync = std::make_shared<ShardSync>(one, 0, 3);
  const Tensor x = test::leaf(in.x);
  batch_norm_relu(x, in.w, in.b, in.rm, in.rv, false, 0.1, 1e-5, sync).backward(in.g);
  CHECK(sync->stats_calls == 0);
  CHECK(sync->grad_calls == 0);
}

TEST_CASE("set_batch_norm_sync reaches every BatchNorm2d of a model; training forwards and backwards call it") {
  auto model = std::make_shared<nn::Sequential>();
  auto inner = std::make_shared<nn::Sequential>();
  auto bn0 = std::make_shared<nn::BatchNorm2d>(3), bn1 = std::make_shared<nn::BatchNorm2d>(3);
  model->push_back(bn0);
  inner->push_back(bn1);
  model->push_back(inner);
  Exchange one(1);
  auto sync = std::make_shared<ShardSync>(one, 0, 3);
  CHECK(nn::set_batch_norm_sync(*model, sync) == 2);
  CHECK(bn0->sync == sync);
  CHECK(bn1->sync == sync);
  const Tensor x = test::leaf(test::rnd({2, 3, 4, 4}, 21, DType::f32));
  sum(bn1->forward_relu(model->forward(x))).backward();  // bn0, bn1, then bn1 again (fused)
  CHECK(sync->stats_calls == 3);
  CHECK(sync->grad_calls == 3);
  model->eval();
  model->forward(x);
  CHECK(sync->stats_calls == 3);
  CHECK(nn::set_batch_norm_sync(*model, nullptr) == 2);
  CHECK(bn0->sync == nullptr);
}

}  // namespace
}  // namespace rt
