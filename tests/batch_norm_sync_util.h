// The harness of the synchronised batch-norm tests (tests/batch_norm_sync_test.cc on the
// CPU, tests/cuda/batch_norm_sync_cuda_test.cc on a GPU): K shards of one batch, each in
// its own thread with a BatchNormSync that all-gathers in memory, against the op on the
// whole batch.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/ops.h"
#include "tests/test_util.h"

namespace rt::bn_sync_test {

// An all_gather in memory among k threads (ranks 0..k-1): each call returns every rank's
// block, rank after rank.
class Exchange {
 public:
  explicit Exchange(int k) : slots_(size_t(k)) {}
  int size() const { return int(slots_.size()); }

  std::vector<double> all_gather(int rank, const std::vector<double>& block) {
    std::unique_lock<std::mutex> lk(m_);
    slots_[size_t(rank)] = block;
    arrive(lk);
    std::vector<double> all;
    for (const auto& s : slots_) all.insert(all.end(), s.begin(), s.end());
    arrive(lk);  // every rank has read before any writes its next block
    return all;
  }

 private:
  void arrive(std::unique_lock<std::mutex>& lk) {
    const uint64_t gen = generation_;
    if (++arrived_ == size()) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return generation_ != gen; });
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::vector<double>> slots_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// Rank `rank` of an Exchange: dist::SyncBatchNorm's contract, the blocks passed through the
// host (a CUDA block is copied down and the result up, synchronously). Counts the calls:
// blocks of 1 + 2C values are the forward's, of 2C the backward's.
class ShardSync final : public BatchNormSync {
 public:
  ShardSync(Exchange& ex, int rank, int64_t C) : ex_(ex), rank_(rank), C_(C) {}
  Tensor all_gather(const Tensor& block) override {
    REQUIRE(block.dtype() == DType::f64);
    if (block.numel() == 1 + 2 * C_) ++stats_calls;
    else if (block.numel() == 2 * C_) ++grad_calls;
    else FAIL("unexpected block ", block.str());
    const std::vector<double> all = ex_.all_gather(rank_, block.to_vector<double>());
    return Tensor::from_vector(all, {int64_t(ex_.size()), block.numel()}).to(block.device());
  }
  int stats_calls = 0, grad_calls = 0;

 private:
  Exchange& ex_;
  int rank_;
  int64_t C_;
};

enum class Op { bn, bn_relu, bn_add_relu };
inline const char* op_name(Op op) {
  return op == Op::bn ? "batch_norm" : op == Op::bn_relu ? "batch_norm_relu" : "batch_norm_add_relu";
}

// What one op call produced (a shard's or the whole batch's), as f64 vectors in logical order.
struct Result {
  std::vector<double> y, dx, dw, db, dr, rm, rv;
};

struct Inputs {
  Tensor x, r, g;  // (N, C, ...) f64: input, residual, upstream gradient
  Tensor w, b, rm, rv;
};

// Rows [n0, n1) of t (f64, logical order) as a tensor of dtype dt in format f.
inline Tensor rows(const Tensor& t, int64_t n0, int64_t n1, DType dt, MemoryFormat f) {
  const std::vector<double> v = t.to_vector<double>();
  const int64_t per = t.numel() / t.size(0);
  Shape s = t.shape();
  s[0] = n1 - n0;
  return Tensor::from_vector(std::vector<double>(v.begin() + n0 * per, v.begin() + n1 * per), s).to(dt).to(f);
}

// The op on rows [n0, n1) of `in`, training, with `sync` (null: none), on device `dev`.
inline Result run_op(Op op, const Inputs& in, int64_t n0, int64_t n1, DType dt, MemoryFormat f,
              std::shared_ptr<BatchNormSync> sync, Device dev = Device::cpu()) {
  const Tensor x = test::leaf(rows(in.x, n0, n1, dt, f).to(dev)), r = test::leaf(rows(in.r, n0, n1, dt, f).to(dev));
  const Tensor w = test::leaf(in.w.to(dt).to(dev)), b = test::leaf(in.b.to(dt).to(dev));
  Tensor rm = in.rm.to(dt).to(dev).clone(), rv = in.rv.to(dt).to(dev).clone();
  const double momentum = 0.1, eps = 1e-5;
  Tensor y;
  if (op == Op::bn) y = batch_norm(x, w, b, rm, rv, true, momentum, eps, sync);
  else if (op == Op::bn_relu) y = batch_norm_relu(x, w, b, rm, rv, true, momentum, eps, sync);
  else y = batch_norm_add_relu(x, r, w, b, rm, rv, true, momentum, eps, sync);
  y.backward(rows(in.g, n0, n1, dt, f).to(dev));
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).to_vector<double>(); };
  Result res{host(y), host(x.grad()), host(w.grad()), host(b.grad()), {}, host(rm), host(rv)};
  if (op == Op::bn_add_relu) res.dr = host(r.grad());
  return res;
}

// The op on shards of sizes `split` of the batch, one thread each, synchronised.
inline std::vector<Result> run_shards(Op op, const Inputs& in, const std::vector<int64_t>& split, DType dt,
                                      MemoryFormat f, std::vector<std::shared_ptr<ShardSync>>& syncs,
                                      Device dev = Device::cpu()) {
  const int k = int(split.size());
  Exchange ex(k);
  std::vector<Result> out(static_cast<size_t>(k));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(k));
  std::vector<std::thread> threads;
  // Every shard's sync is made before any thread starts: a push_back while a thread reads the
  // vector would move its elements under it (ThreadSanitizer found this).
  std::vector<std::shared_ptr<ShardSync>> mine;
  for (int i = 0; i < k; ++i) mine.push_back(std::make_shared<ShardSync>(ex, i, in.x.size(1)));
  syncs.insert(syncs.end(), mine.begin(), mine.end());
  int64_t n0 = 0;
  for (int i = 0; i < k; ++i) {
    threads.emplace_back([&, i, n0, sync = mine[size_t(i)]] {
      try {
        out[size_t(i)] = run_op(op, in, n0, n0 + split[size_t(i)], dt, f, sync, dev);
      } catch (...) {
        errors[size_t(i)] = std::current_exception();
      }
    });
    n0 += split[size_t(i)];
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::abs(e));
  return m;
}

// Largest |a - b| over `scale` (the bound's unit); checks it against `bound`.
struct Worst {
  double ratio = 0;
  std::string what;
};
inline void check_within(const std::vector<double>& a, const std::vector<double>& ref, double scale, double bound,
                  const std::string& what, Worst& worst) {
  REQUIRE_MESSAGE(a.size() == ref.size(), what, ": ", a.size(), " vs ", ref.size(), " values");
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(a[i] - ref[i]));
  const double ratio = scale > 0 ? err / scale : err;
  CHECK_MESSAGE(ratio <= bound, what, ": max |difference| ", err, " = ", ratio, " x ", scale, " > bound ", bound);
  if (ratio > worst.ratio) worst = {ratio, what};
}

inline std::vector<double> concat(const std::vector<Result>& rs, std::vector<double> Result::*field) {
  std::vector<double> v;
  for (const Result& r : rs) v.insert(v.end(), (r.*field).begin(), (r.*field).end());
  return v;
}

// Shard sums (value) and sums of magnitudes (the bound's unit) of a per-channel gradient.
inline void sum_shards(const std::vector<Result>& rs, std::vector<double> Result::*field, std::vector<double>& sum,
                double& scale) {
  sum.assign((rs[0].*field).size(), 0.0);
  std::vector<double> mag(sum.size(), 0.0);
  for (const Result& r : rs)
    for (size_t c = 0; c < sum.size(); ++c) {
      sum[c] += (r.*field)[c];
      mag[c] += std::abs((r.*field)[c]);
    }
  scale = max_abs(mag);
}

}  // namespace rt::bn_sync_test
