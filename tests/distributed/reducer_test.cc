// The data-parallel reducer (distributed/reducer.h) on the Gloo backend across real processes. Each rank's loss is
// sum_k sum(x_k * w_k) over weights w_k of various sizes, with rank-specific small-integer inputs x_k: d loss
// / d w_k = x_k exactly, so every rank knows the averaged gradient mean_r x_k(r) (its f32 rounding included).
// Checked: averaged gradients against that reference for tiny, default and huge bucket caps (one all-reduce
// per bucket per step, buckets in reverse registration order, the first one capped at its own size);
// accumulation communicates once per optimizer step; a parameter without a gradient is an error naming it and
// the rank, or zeros with find_unused; a bucket is all-reduced while backward still runs;
// broadcast_from_rank0; a rank with another model is refused at construction.
#include "distributed/reducer.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "tests/distributed/communicator_test_util.h"
#include "tests/distributed/launch.h"
#include "tests/distributed/test_errors.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;

// The chain's weights: K tensors of the given sizes, values 1 + (k + i) % 3 (same on every rank: the model is
// the same), leaves requiring grad.
const std::vector<int64_t> kSizes = {5, 300, 7, 1024, 3, 2000, 11};

std::vector<Reducer::Param> make_params(const std::vector<int64_t>& sizes) {
  std::vector<Reducer::Param> ps;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> v(static_cast<size_t>(sizes[k]));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0 + double((k + i) % 3);
    Tensor w = Tensor::from_vector(v, {sizes[k]}).to(DType::f32);
    w.set_requires_grad(true);
    ps.emplace_back("chain." + std::to_string(k), w);
  }
  return ps;
}

// A rank's input to weight k (broadcast over the weight's size): small integers.
Tensor input(int rank, int64_t n, int step) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = double((rank * 5 + i * 3 + step) % 7) - 3.0;
  return Tensor::from_vector(v, {n}).to(DType::f32);
}

// loss = sum_k sum(x_k * w_k) over the `used` weights (x_k drawn for step + k).
Tensor loss_of(const std::vector<Reducer::Param>& ps, int rank, int step, const std::vector<bool>& used) {
  Tensor loss;
  for (size_t k = 0; k < ps.size(); ++k) {
    if (!used[k]) continue;
    const Tensor t = sum(mul(ps[k].second, input(rank, ps[k].second.numel(), step + int(k))));
    loss = loss.defined() ? add(loss, t) : t;
  }
  return loss;
}

std::vector<double> mean_input(int world, int64_t n, int step, int k) {
  std::vector<double> m(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < world; ++r) {
    const std::vector<double> x = input(r, n, step + k).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) m[size_t(i)] += x[size_t(i)];
  }
  for (double& v : m) v = double(float(v) * float(1.0 / world));  // the f32 average
  return m;
}

// Within 1e-6 relative: the expected average is the sum of integers (exact) times 1/W rounded
// to f32, and a backend may divide by W instead (a 1-ulp difference, 6e-8, at W = 3); a
// gradient that is wrong (another rank's, not averaged, stale) is off by 1e-1 or more.
void expect_close(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  const std::vector<double> g = got.to_vector<double>();
  RT_CHECK(g.size() == want.size(), what, ": size ", g.size(), " vs ", want.size());
  for (size_t i = 0; i < g.size(); ++i)
    RT_CHECK(std::abs(g[i] - want[i]) <= 1e-6 * (1 + std::abs(want[i])), what, ": element ", i, " is ", g[i],
             ", expected ", want[i]);
}

int buckets_and_values(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), W = c.world_size();
  const std::vector<bool> all(kSizes.size(), true);
  // caps (first, rest) in bytes: tiny (one parameter per bucket), default, huge (one bucket).
  const std::vector<std::pair<size_t, size_t>> caps = {
      {4, 4}, {size_t(1) << 20, size_t(25) << 20}, {1 << 30, 1 << 30}, {5000, 9000}};
  for (auto [first, rest] : caps) {
    auto ps = make_params(kSizes);
    ReducerOptions o;
    o.first_bucket_bytes = first;
    o.bucket_bytes = rest;
    Reducer red(c, ps, o);
    const auto info = red.buckets();
    // Reverse registration order, every parameter once.
    std::vector<std::string> order;
    for (const auto& b : info) order.insert(order.end(), b.params.begin(), b.params.end());
    RT_CHECK(order.size() == ps.size(), "bucketed ", order.size(), " of ", ps.size());
    for (size_t i = 0; i < order.size(); ++i)
      RT_CHECK(order[i] == ps[ps.size() - 1 - i].first, "bucket order: position ", i, " holds ", order[i]);
    if (first == 4) RT_CHECK(info.size() == ps.size(), "tiny caps: ", info.size(), " buckets");
    if (first == (1 << 30)) RT_CHECK(info.size() == 1, "huge caps: ", info.size(), " buckets");
    if (first == 5000) {  // 11+2000 floats = 8044 bytes > 5000: the first bucket
                          // holds w6 alone
      RT_CHECK(info[0].params.size() == 1 && info[0].numel == 11, "first bucket ", info[0].numel);
      for (size_t b = 1; b < info.size(); ++b)
        RT_CHECK(info[b].numel * 4 <= 9000 || info[b].params.size() == 1, "bucket ", b, " over its cap");
    }
    for (int step = 0; step < 2; ++step) {
      const int64_t before = red.collectives();
      red.prepare(true);
      loss_of(ps, rank, step, all).backward();
      red.finish();
      RT_CHECK(red.collectives() - before == int64_t(info.size()), "one all-reduce per bucket per step");
      for (size_t k = 0; k < ps.size(); ++k)
        expect_close(ps[k].second.grad(), mean_input(W, kSizes[k], step, int(k)),
                     "cap " + std::to_string(first) + " step " + std::to_string(step) + " " + ps[k].first);
      for (auto &[n, p] : ps) p.zero_grad();
    }
  }
  return 0;
}

TEST_CASE(
    "reducer: averaged gradients in buckets of any cap, buckets in "
    "reverse order, one all-reduce each") {
  for (int world : {2, 3}) {
    const auto r = testing::launch(world, buckets_and_values, testing::LaunchOptions{30s, 0, {}});
    INFO(r.report());
    CHECK(r.ok());
  }
}

int reduce_dtype(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank();
  RT_CHECK(c.world_size() == 2, "written for 2 ranks");
  // f64 gradients carried as f32 (Note [Reduce dtype]): the f32 average, widened back.
  std::vector<Reducer::Param> ps;
  for (auto& [name, w] : make_params(kSizes)) {
    Tensor w64 = w.detach().to(DType::f64);
    w64.set_requires_grad(true);
    ps.emplace_back(name, w64);
  }
  ReducerOptions o;
  o.bucket_bytes = 8000;
  o.reduce_dtype = DType::f32;
  Reducer red(c, ps, o);
  for (const auto& b : red.buckets()) RT_CHECK(b.dtype == DType::f32, "a bucket carries ", dtype_name(b.dtype));
  red.prepare(true);
  Tensor loss;
  for (size_t k = 0; k < ps.size(); ++k) {
    // x / 3 is not exact in f32: the rounding of the carried dtype shows.
    const Tensor t = sum(mul(ps[k].second, mul(input(rank, kSizes[k], int(k)).to(DType::f64), 1.0 / 3.0)));
    loss = loss.defined() ? add(loss, t) : t;
  }
  loss.backward();
  red.finish();
  for (size_t k = 0; k < ps.size(); ++k) {
    RT_CHECK(ps[k].second.grad().dtype() == DType::f64, "the gradient's dtype changed");
    const std::vector<double> got = ps[k].second.grad().to_vector<double>();
    // Two ranks: the f32 sum rounds once and halving is exact, so the result is known bit for
    // bit; an f64 reduction (no staging) would differ in the ninth digit.
    const std::vector<double> x0 = input(0, kSizes[k], int(k)).to_vector<double>();
    const std::vector<double> x1 = input(1, kSizes[k], int(k)).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      const double f32 = double((float(x0[i] / 3.0) + float(x1[i] / 3.0)) * 0.5f);
      RT_CHECK(got[i] == f32, ps[k].first, "[", i, "] = ", got[i], ", expected the f32 average ", f32);
    }
  }
  return 0;
}

TEST_CASE("reducer: f64 gradients carried as f32 come back as the f32 average (reduce dtype)") {
  const auto r = testing::launch(2, reduce_dtype, testing::LaunchOptions{30s, 0, {}});
  INFO(r.report());
  CHECK(r.ok());
}

int accumulation(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), W = c.world_size();
  auto ps = make_params(kSizes);
  ReducerOptions o;
  o.first_bucket_bytes = 4096;
  o.bucket_bytes = 4096;
  Reducer red(c, ps, o);
  const std::vector<bool> all(kSizes.size(), true);
  const int64_t before = red.collectives();
  for (int micro = 0; micro < 3; ++micro) {
    red.prepare(micro == 2);
    loss_of(ps, rank, micro, all).backward();
    red.finish();
    if (micro < 2) RT_CHECK(red.collectives() == before, "micro-step ", micro, " communicated");
  }
  RT_CHECK(red.collectives() - before == int64_t(red.buckets().size()), "the last micro-step: one per bucket");
  // The average over ranks of the sum over the three micro-steps.
  for (size_t k = 0; k < ps.size(); ++k) {
    std::vector<double> want(static_cast<size_t>(kSizes[k]), 0.0);
    for (int r = 0; r < W; ++r)
      for (int m = 0; m < 3; ++m) {
        const std::vector<double> x = input(r, kSizes[k], m + int(k)).to_vector<double>();
        for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
      }
    for (double& v : want) v = double(float(v) * float(1.0 / W));
    expect_close(ps[k].second.grad(), want, "accumulated " + ps[k].first);
  }
  return 0;
}

TEST_CASE("reducer: accumulation communicates once per optimizer step") {
  const auto r = testing::launch(2, accumulation, testing::LaunchOptions{30s, 0, {}});
  INFO(r.report());
  CHECK(r.ok());
}

int unused(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), W = c.world_size();
  std::vector<bool> used(kSizes.size(), true);
  used[2] = false;  // chain.2 unused on every rank
  {
    auto ps = make_params(kSizes);
    Reducer red(c, ps);
    red.prepare(true);
    loss_of(ps, rank, 0, used).backward();
    const std::string e = testing::error_of([&] { red.finish(); });
    RT_CHECK(e.find("rank " + std::to_string(rank)) != std::string::npos && e.find("chain.2") != std::string::npos &&
                 e.find("find_unused_parameters") != std::string::npos,
             "unused parameter error: ", e);
  }
  // With find_unused: rank 0 uses chain.4, the others do not; its average is rank 0's input / W.
  auto ps = make_params(kSizes);
  ReducerOptions o;
  o.find_unused = true;
  Reducer red(c, ps, o);
  std::vector<bool> mine(kSizes.size(), true);
  mine[4] = rank == 0;
  red.prepare(true);
  loss_of(ps, rank, 0, mine).backward();
  red.finish();
  std::vector<double> want = input(0, kSizes[4], 4).to_vector<double>();
  for (double& v : want) v = double(float(v) * float(1.0 / W));
  expect_close(ps[4].second.grad(), want, "find_unused chain.4");
  return 0;
}

TEST_CASE(
    "reducer: a parameter without a gradient is an error naming it, or "
    "zeros with find_unused") {
  const auto r = testing::launch(2, unused, testing::LaunchOptions{30s, 0, {}});
  INFO(r.report());
  CHECK(r.ok());
}

// A long chain: backward runs through many ops after the last weights' gradients are final.
int overlap(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank();
  const int64_t n = 1 << 16;
  std::vector<Reducer::Param> ps;
  for (int k = 0; k < 8; ++k) {
    Tensor w = Tensor::full({n}, 1.0);
    w.set_requires_grad(true);
    ps.emplace_back("w" + std::to_string(k), w);
  }
  ReducerOptions o;
  o.first_bucket_bytes = size_t(n) * 4;
  o.bucket_bytes = size_t(n) * 4;
  Reducer red(c, ps, o);
  red.prepare(true);
  // h = x * w0 * w1 * ... * w7 with extra work between: the gradient of w7 is final first.
  Tensor h = input(rank, n, 0);
  for (auto &[name, w] : ps) {
    h = mul(h, w);
    for (int rep = 0; rep < 20; ++rep) h = add(mul(h, 1.0), 0.0);
  }
  sum(h).backward();
  red.finish();
  const std::vector<StepTimeline> ts = red.take_timelines();
  RT_CHECK(ts.size() == 1, ts.size(), " timelines after one step");
  const StepTimeline& t = ts[0];
  RT_CHECK(std::string(t.clock) == "host", "clock ", t.clock);
  RT_CHECK(t.wait_end >= t.backward_end, "wait_end ", t.wait_end, " before backward_end ", t.backward_end);
  RT_CHECK(t.buckets.size() == 8, t.buckets.size(), " buckets");
  RT_CHECK(t.buckets[0].launched >= 0 && t.buckets[0].launched < t.backward_end, "the first bucket was launched at ",
           t.buckets[0].launched, " s, backward ended at ", t.backward_end, " s");
  for (const auto& b : t.buckets) RT_CHECK(b.completed >= b.launched, "a bucket without its completion time");
  const double ov = t.overlap();
  RT_CHECK(ov >= 0 && ov <= 1, "overlap ", ov);
  return 0;
}

TEST_CASE(
    "reducer: the first bucket's all-reduce starts before backward ends "
    "(timeline)") {
  const auto r = testing::launch(2, overlap, testing::LaunchOptions{30s, 0, {}});
  INFO(r.report());
  CHECK(r.ok());
}

int consistency(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank();
  // broadcast_from_rank0: rank-specific values become rank 0's.
  Tensor t = Tensor::full({1000}, double(rank + 1));
  broadcast_from_rank0(c, {t});
  testing::expect_equal(t, std::vector<double>(1000, 1.0), "broadcast");
  // Rank 1 builds another model: an extra parameter, then a different shape.
  std::vector<int64_t> sizes = kSizes;
  if (rank == 1) sizes.push_back(4);
  std::string e = testing::error_of([&] { Reducer red(c, make_params(sizes)); });
  RT_CHECK(e.find("rank 1 has 8 parameters, rank 0 has 7") != std::string::npos, "count mismatch: ", e);
  sizes = kSizes;
  if (rank == 1) sizes[3] = 1023;
  e = testing::error_of([&] { Reducer red(c, make_params(sizes)); });
  RT_CHECK(e.find("parameter 3 differs between rank 0 and rank 1") != std::string::npos, "shape mismatch: ", e);
  // The flags it names exist (it once named --arch, which ringtape does not have).
  RT_CHECK(e.find("the same model, number of classes") != std::string::npos && e.find("--arch") == std::string::npos,
           "the message names a flag ringtape does not have: ", e);
  return 0;
}

TEST_CASE("reducer: broadcast from rank 0; ranks with different models are refused") {
  const auto r = testing::launch(2, consistency, testing::LaunchOptions{30s, 0, {}});
  INFO(r.report());
  CHECK(r.ok());
}

}  // namespace
}  // namespace rt::dist
