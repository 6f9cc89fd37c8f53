// Synchronised batch norm on CUDA (Note [Synchronised batch norm] in
// engine/ops/batch_norm_sync.h): K shards of one batch, each in its own thread on the GPU with
// an in-memory all-gather (tests/batch_norm_sync_util.h), against the CUDA op on the whole
// batch: y, dx, dresidual shard by shard, dweight and dbias summed over the shards, running
// statistics; and every shard's running statistics the same bits (merged in process order on
// the device). The merge launcher alone against the host's merge_moments, for every x dtype and
// every running statistics dtype.
//
// Tolerances, relative to the largest value of each result: shard_bound_for(dt, true) and
// one_shard_bound_for, rows of Note [Tolerances] in tests/test_util.h that say why.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/cuda/batch_norm.h"
#include "tests/batch_norm_sync_util.h"
#include "tests/cuda/batch_norm_cuda_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace rt {
namespace {

using namespace bn_sync_test;  // NOLINT: the harness is this test's vocabulary

// By hand: shards on several devices against the whole batch, not one op on the GPU against the CPU.
TEST_CASE("CUDA batch norm on synchronised shards equals the whole batch") {
  if (!cuda_test::have_gpu("batch_norm_sync_cuda_test")) return;
  struct Case {
    Shape shape;
    std::vector<std::vector<int64_t>> splits;
  };
  const std::vector<Case> cases = {
      {{8, 3, 7, 9}, {{4, 4}, {1, 3, 4}}},       // odd spatial, uneven shards
      {{6, 37}, {{3, 3}, {2, 4}}},                // (N, C), channels off the vector width
      {{16, 64, 14, 14}, {{8, 8}, {4, 4, 8}}},    // several row blocks per shard
      {{4, 5, 1, 1}, {{2, 2}}},                   // 1x1 spatial
  };
  const Device dev = cuda_test::gpu();
  uint64_t seed = 9100;
  Worst worst[3];
  for (const Case& cs : cases) {
    const int64_t C = cs.shape[1];
    Inputs in{test::rnd(cs.shape, ++seed), test::rnd(cs.shape, ++seed), test::rnd(cs.shape, ++seed),
              add(test::rnd({C}, ++seed), 1.0), test::rnd({C}, ++seed), test::rnd({C}, ++seed),
              add(square(test::rnd({C}, ++seed)), 0.5)};
    in.x = add(mul(in.x, 3.0), 2.0);
    const std::vector<MemoryFormat> formats =
        cs.shape.size() == 4 ? std::vector<MemoryFormat>{MemoryFormat::contiguous, MemoryFormat::channels_last}
                             : std::vector<MemoryFormat>{MemoryFormat::contiguous};
    for (const auto& split : cs.splits)
      for (Op op : {Op::bn, Op::bn_relu, Op::bn_add_relu})
        for (int di = 0; di < 3; ++di)
          for (MemoryFormat f : formats) {
            const DType dt = di == 0 ? DType::f64 : di == 1 ? DType::f32 : DType::bf16;
            std::string sp;
            for (int64_t n : split) sp += (sp.empty() ? "" : "+") + std::to_string(n);
            const std::string what = detail::cat(op_name(op), " ", shape_str(cs.shape), " as ", sp, " ",
                                                 dtype_name(dt), " ", test::fmt_name(f));
            const double bound = test::shard_bound_for(dt, true);
            const Result whole = run_op(op, in, 0, cs.shape[0], dt, f, nullptr, dev);
            std::vector<std::shared_ptr<ShardSync>> syncs;
            const std::vector<Result> shards = run_shards(op, in, split, dt, f, syncs, dev);
            for (const auto& s : syncs) {
              CHECK_MESSAGE(s->stats_calls == 1, what);
              CHECK_MESSAGE(s->grad_calls == 1, what);
            }
            check_within(concat(shards, &Result::y), whole.y, max_abs(whole.y), bound, what + ": y", worst[di]);
            check_within(concat(shards, &Result::dx), whole.dx, max_abs(whole.dx), bound, what + ": dx", worst[di]);
            if (op == Op::bn_add_relu)
              check_within(concat(shards, &Result::dr), whole.dr, max_abs(whole.dr), bound, what + ": dresidual",
                           worst[di]);
            std::vector<double> sum;
            double scale = 0;
            sum_shards(shards, &Result::dw, sum, scale);
            check_within(sum, whole.dw, scale, bound, what + ": dweight summed", worst[di]);
            sum_shards(shards, &Result::db, sum, scale);
            check_within(sum, whole.db, scale, bound, what + ": dbias summed", worst[di]);
            for (size_t k = 0; k < shards.size(); ++k) {
              CHECK_MESSAGE(shards[k].rm == shards[0].rm, what, ": shard ", k, "'s running_mean");
              CHECK_MESSAGE(shards[k].rv == shards[0].rv, what, ": shard ", k, "'s running_var");
            }
            check_within(shards[0].rm, whole.rm, max_abs(whole.rm), bound, what + ": running_mean", worst[di]);
            check_within(shards[0].rv, whole.rv, max_abs(whole.rv), bound, what + ": running_var", worst[di]);
          }
  }
  MESSAGE("largest difference / its unit: f64 ", worst[0].ratio, " (", worst[0].what, "); f32 ", worst[1].ratio, " (",
          worst[1].what, "); bf16 ", worst[2].ratio, " (", worst[2].what, ")");
}

// By hand: sync against no sync on the GPU, and the sync's call counts.
TEST_CASE("CUDA synchronised batch norm: a world of one equals no sync; one value per channel is refused") {
  if (!cuda_test::have_gpu("batch_norm_sync_cuda_test")) return;
  const Device dev = cuda_test::gpu();
  const Shape s{4, 3, 5, 5};
  Inputs in{test::rnd(s, 11), test::rnd(s, 12), test::rnd(s, 13), add(test::rnd({3}, 14), 1.0), test::rnd({3}, 15),
            test::rnd({3}, 16), Tensor::full({3}, 1.0, DType::f64)};
  for (Op op : {Op::bn, Op::bn_relu, Op::bn_add_relu})
    for (DType dt : {DType::f64, DType::f32}) {
      Exchange one(1);
      auto sync = std::make_shared<ShardSync>(one, 0, 3);
      const Result a = run_op(op, in, 0, 4, dt, MemoryFormat::channels_last, sync, dev);
      const Result b = run_op(op, in, 0, 4, dt, MemoryFormat::channels_last, nullptr, dev);
      CHECK(sync->stats_calls == 1);
      CHECK(sync->grad_calls == 1);
      // One shard: the same Welford states, finished through double: within float rounding.
      const double bound = test::one_shard_bound_for(dt);
      Worst w;
      check_within(a.y, b.y, max_abs(b.y), bound, "y", w);
      check_within(a.dx, b.dx, max_abs(b.dx), bound, "dx", w);
      check_within(a.dw, b.dw, max_abs(b.dw), bound, "dw", w);
      check_within(a.rv, b.rv, max_abs(b.rv), bound, "running_var", w);
    }
  // A shard with one value per channel: the global count lives on the device only.
  Exchange two(2);
  auto sync = std::make_shared<ShardSync>(two, 0, 3);
  const Tensor x = test::rnd({1, 3}, 30).to(dev);
  try {
    batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5, sync);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("more than one value per channel") != std::string::npos);
    CHECK(std::string(e.what()).find("synchronised on CUDA") != std::string::npos);
  }
}

// batch_norm_merge_moments against the host's merge_moments (engine/ops/batch_norm_sync.h):
// three processes' blocks, the middle one empty (skipped), merged for x of every float dtype
// with running statistics of every float dtype (Note [Running statistics of any dtype] in
// tests/cuda/batch_norm_cuda_util.h).
// By hand: a launcher against the host merge, running statistics in place.
TEST_CASE("CUDA batch_norm_merge_moments equals the host merge for every x and running statistics dtype") {
  if (!cuda_test::have_gpu("batch_norm_merge_moments")) return;
  const int64_t C = 5;
  const int k = 3;
  const double counts[k] = {12, 0, 7}, eps = 1e-5, momentum = 0.1;
  uint64_t seed = 9400;
  for (DType t : cuda_test::kFloatTypes)
    for (DType r : cuda_test::kFloatTypes) {
      const std::string what = detail::cat("merge_moments ", dtype_name(t), " running ", dtype_name(r));
      const DType st = cuda::batch_norm_stat_dtype(t);
      // Block i: count, mean[C] (offset from 0, so the merge's mean matters), m2[C] = count * var.
      std::vector<double> blocks;
      for (double n : counts) {
        const std::vector<double> m = test::rnd({C}, ++seed).to_vector<double>();
        const std::vector<double> v = add(square(test::rnd({C}, ++seed)), 0.5).to_vector<double>();
        blocks.push_back(n);
        for (int64_t c = 0; c < C; ++c) blocks.push_back(n > 0 ? m[size_t(c)] + 2.0 : 0.0);
        for (int64_t c = 0; c < C; ++c) blocks.push_back(n * v[size_t(c)]);
      }
      const size_t nc = size_t(C);
      std::vector<double> mean(nc), m2(nc), var(nc), invstd(nc);
      const double n = merge_moments(C, k, blocks.data(), mean.data(), m2.data());
      for (size_t c = 0; c < nc; ++c) {
        var[c] = m2[c] / n;
        invstd[c] = 1.0 / std::sqrt(var[c] + eps);
      }
      const Tensor rm_r = test::rnd({C}, ++seed).to(r), rv_r = add(square(test::rnd({C}, ++seed)), 0.5).to(r);
      std::vector<double> rm = rm_r.to_vector<double>(), rv = rv_r.to_vector<double>();
      cuda_test::update_running(rm, rv, mean, var, n, momentum);

      const Tensor gblocks = Tensor::from_vector(blocks, {k, 1 + 2 * C}).to(cuda_test::gpu());
      Tensor gm = cuda_test::poisoned({C}, st), gi = cuda_test::poisoned({C}, st);
      Tensor gcount = cuda_test::poisoned({1}, DType::f64);
      Tensor grm = rm_r.to(cuda_test::gpu()), grv = rv_r.to(cuda_test::gpu());
      cuda::batch_norm_merge_moments(C, t, k, gblocks.data<double>(), eps, gm.raw_data(), gi.raw_data(),
                                     gcount.data<double>(), r, grm.raw_data(), grv.raw_data(), momentum,
                                     cuda_test::stream());
      CHECK_MESSAGE(gcount.to_vector<double>()[0] == n, what, ": count");
      // The merged moments are rounded once to the statistics dtype, var and invstd computed in it.
      const test::Tol stat_tol = test::gpu_tol_for(st), run_tol = cuda_test::running_tol(t, r);
      test::check_close(gm.to_vector<double>(), mean, stat_tol, what + ": mean");
      test::check_close(gi.to_vector<double>(), invstd, stat_tol, what + ": invstd");
      test::check_close(grm.to_vector<double>(), rm, run_tol, what + ": running_mean");
      test::check_close(grv.to_vector<double>(), rv, run_tol, what + ": running_var");
    }
}

}  // namespace
}  // namespace rt
