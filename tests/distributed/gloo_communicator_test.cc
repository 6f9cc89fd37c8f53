// The Gloo backend across real processes on 127.0.0.1 (tests/distributed/launch.h forks them with
// torchrun's environment; rank 0 hosts the TCP store). Every rank checks its own results
// against a reference it computes from every rank's deterministic inputs, and a failed
// check is that rank's non-zero exit with the message. The parent test process creates no
// threads (the launcher forks it).
//
// Tolerances: integer-valued floats must come out exact (sums of small integers are exact in
// f32 and f64 whatever the order). For random floats, a sum of N terms in any order is
// within gamma(N-1) * sum|x_i| of the exact sum, gamma(k) = k u / (1 - k u), u = 2^-24
// (f32) or 2^-53 (f64) (Higham, Accuracy and Stability, 4.2); two orders (ring or tree
// against Gloo's ring) are within twice that of each other.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/random.h"
#include "tests/distributed/communicator_test_util.h"
#include "tests/distributed/launch.h"

namespace rt::dist {
namespace {

using namespace std::chrono_literals;
using testing::expect_equal;
using testing::int_tensor;
using testing::int_value;
using Clock = std::chrono::steady_clock;

// Runs `body` on each of these world sizes; every rank must exit 0 within `limit`.
void check_worlds(std::initializer_list<int> worlds, int (*body)(int), std::chrono::milliseconds limit) {
  for (int world : worlds) {
    testing::LaunchOptions o;
    o.limit = limit;
    const auto r = testing::launch(world, body, o);
    INFO(r.report());
    CHECK(r.ok());
  }
}

constexpr AllReduceAlgo kAlgos[] = {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};
constexpr DType kTypes[] = {DType::f32, DType::f64};

// The all-reduce of int_value over `world` ranks at elements [first, first + n), as the
// backend computes it in dtype t (an average: the sum times 1/N rounded to t).
std::vector<double> reference(ReduceOp op, int world, int64_t first, int64_t n, DType t) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = op == ReduceOp::max ? -1e300 : 0.0;
    for (int r = 0; r < world; ++r)
      acc = op == ReduceOp::max ? std::max(acc, int_value(r, first + i)) : acc + int_value(r, first + i);
    if (op == ReduceOp::avg)
      acc = t == DType::f32 ? double(float(acc) * float(1.0 / world)) : acc * (1.0 / world);
    out[size_t(i)] = acc;
  }
  return out;
}

std::vector<double> values_of(int rank, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int_value(rank, i);
  return v;
}

std::string label(const char* op, AllReduceAlgo a, ReduceOp r, DType t, int64_t n) {
  return detail::cat(op, " ", algo_name(a), " ", reduce_op_name(r), " ", dtype_name(t), " x ", n);
}

int every_collective(int) {
  CommOptions o;
  o.timeout = 20s;
  o.slice_bytes = 256;  // several slices even for small tensors: the pipelines' edges
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  const int rank = c.rank(), N = c.world_size();

  for (AllReduceAlgo a : kAlgos)
    for (DType t : kTypes)
      for (ReduceOp op : kOps)
        for (int64_t n : {0, 1, 13, 1031}) {
          Tensor x = int_tensor(rank, n, t);
          c.all_reduce(x, op, a).wait();
          expect_equal(x, reference(op, N, 0, n, t), label("all_reduce", a, op, t, n));
        }

  for (int root = 0; root < N; ++root) {
    Tensor x = int_tensor(rank, 37, DType::f32);
    c.broadcast(x, root).wait();
    expect_equal(x, values_of(root, 37), detail::cat("broadcast from ", root));
    Tensor ids = Tensor::full({5}, rank, DType::i64);  // any dtype moves
    c.broadcast(ids, root).wait();
    expect_equal(ids, std::vector<double>(5, root), detail::cat("broadcast i64 from ", root));
  }

  for (int64_t n : {0, 1, 9, 1000}) {
    Tensor out = Tensor::full({N * n}, -99.0);
    c.all_gather(out, int_tensor(rank, n, DType::f32)).wait();
    std::vector<double> want;
    for (int r = 0; r < N; ++r)
      for (double v : values_of(r, n)) want.push_back(v);
    expect_equal(out, want, detail::cat("all_gather x ", n));
  }

  for (DType t : kTypes)
    for (ReduceOp op : kOps)
      for (int64_t n : {0, 1, 7, 100}) {
        Tensor out = Tensor::full({n}, -99.0, t);
        c.reduce_scatter(out, int_tensor(rank, N * n, t), op).wait();
        expect_equal(out, reference(op, N, rank * n, n, t), label("reduce_scatter", AllReduceAlgo::ring, op, t, n));
      }

  c.barrier().wait();

  // A ring shift: each rank sends to the next and receives from the previous, together.
  const int next = (rank + 1) % N, prev = (rank + N - 1) % N;
  Tensor got = Tensor::zeros({11});
  c.send_recv(int_tensor(rank, 11, DType::f32), next, got, prev).wait();
  expect_equal(got, values_of(prev, 11), "send_recv around the ring");

  // Transfers between two ranks meet in issue order.
  if (rank == 0) {
    std::vector<Work> sent;
    for (int k = 0; k < 3; ++k) sent.push_back(c.send(Tensor::full({4 + k}, 10 + k), N - 1));
    for (Work& w : sent) w.wait();
  } else if (rank == N - 1) {
    std::vector<Tensor> in;
    std::vector<Work> works;
    for (int k = 0; k < 3; ++k) {
      in.push_back(Tensor::zeros({4 + k}));
      works.push_back(c.recv(in.back(), 0));
    }
    for (int k = 0; k < 3; ++k) {
      works[size_t(k)].wait();
      expect_equal(in[size_t(k)], std::vector<double>(size_t(4 + k), 10 + k), detail::cat("recv #", k));
    }
  }
  return 0;
}

TEST_CASE("gloo: every collective and send/recv against a reference on 2, 3 and 4 ranks") {
  check_worlds({2, 3, 4}, every_collective, 60s);
}

// gamma(k) of the summation bound, for the unit roundoff of t.
double gamma_of(int k, DType t) {
  const double u = t == DType::f32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
  return k * u / (1 - k * u);
}

int random_floats(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), N = c.world_size();
  const int64_t n = 100003;
  for (DType t : kTypes) {
    // Every rank's input, rounded to t: each rank can bound every element's sum.
    std::vector<std::vector<double>> x;
    for (int r = 0; r < N; ++r) {
      Generator gen(1000 + uint64_t(r));
      x.push_back(rand_uniform({n}, gen, -1.0, 1.0, t).to_vector<double>());
    }
    std::vector<double> abs_sum(size_t(n), 0.0), exact(size_t(n), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int r = 0; r < N; ++r) {
        abs_sum[size_t(i)] += std::abs(x[size_t(r)][size_t(i)]);
        exact[size_t(i)] += x[size_t(r)][size_t(i)];  // f64: exact for f32 inputs; f64's own
      }                                                // error is inside the bound's slack
    std::vector<std::vector<double>> result;
    for (AllReduceAlgo a : kAlgos) {
      Tensor mine = Tensor::from_vector(x[size_t(rank)], {n}).to(t);
      c.all_reduce(mine, ReduceOp::sum, a).wait();
      result.push_back(mine.to_vector<double>());
    }
    const double gam = gamma_of(N - 1, t), slack = gamma_of(N, DType::f64);
    for (int64_t i = 0; i < n; ++i) {
      const double bound = gam * abs_sum[size_t(i)] + slack * abs_sum[size_t(i)];
      for (size_t a = 0; a < 3; ++a)
        RT_CHECK(std::abs(result[a][size_t(i)] - exact[size_t(i)]) <= bound, dtype_name(t), " ",
                 algo_name(kAlgos[a]), " element ", i, ": ", result[a][size_t(i)], " vs exact ", exact[size_t(i)],
                 ", bound ", bound);
      for (size_t a = 1; a < 3; ++a)
        RT_CHECK(std::abs(result[a][size_t(i)] - result[0][size_t(i)]) <= 2 * bound, dtype_name(t), " ",
                 algo_name(kAlgos[a]), " vs library at element ", i);
    }
  }
  return 0;
}

TEST_CASE("gloo: ring and tree sums of random floats agree with the library within the summation bound") {
  check_worlds({2, 3, 4}, random_floats, 30s);
}

int in_issue_order(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), N = c.world_size();
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 24; ++k) {
    const int64_t n = k % 3 == 0 ? 200000 : 17 + k;
    ts.push_back(int_tensor(rank, n, DType::f32));
    works.push_back(c.all_reduce(ts.back(), ReduceOp::sum, kAlgos[k % 3]));
  }
  // Done flags are always a prefix: no call completes before one issued earlier. Read from
  // the last call back: a call seen done implies that every earlier one is done by then.
  int samples = 0;
  while (!works.back().done()) {
    bool seen_done = false;
    for (size_t k = works.size(); k-- > 0;) {
      const bool d = works[k].done();
      RT_CHECK(d || !seen_done, "call ", k + 1, " completed before call ", k);
      seen_done = seen_done || d;
    }
    ++samples;
  }
  for (size_t k = 0; k < works.size(); ++k) {
    works[k].wait();
    expect_equal(ts[k], reference(ReduceOp::sum, N, 0, ts[k].numel(), DType::f32), detail::cat("call ", k));
  }
  RT_CHECK(samples > 0, "every call was done before the first sample: the test checked nothing");
  return 0;
}

TEST_CASE("gloo: several calls in flight complete in issue order") {
  check_worlds({2, 4}, in_issue_order, 30s);
}

int any_world(int) {
  CommOptions o;
  o.timeout = 20s;
  o.slice_bytes = 128;
  testing::GlooRank g(o);
  Communicator& c = g.comm();
  const int rank = c.rank(), N = c.world_size();
  for (AllReduceAlgo a : {AllReduceAlgo::ring, AllReduceAlgo::tree})
    for (int64_t n : {0, 1, 2, 3, 7, 8, 13, 97, 1009})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        if (op == ReduceOp::max && n != 1009) continue;  // sums cover the schedules; one max
        Tensor x = int_tensor(rank, n, DType::f32);
        c.all_reduce(x, op, a).wait();
        expect_equal(x, reference(op, N, 0, n, DType::f32), label("all_reduce", a, op, DType::f32, n));
      }
  return 0;
}

TEST_CASE("gloo: ring and tree on 1 to 8 ranks, for 0, 1, prime and indivisible counts") {
  check_worlds({1, 2, 3, 4, 5, 6, 7, 8}, any_world, 60s);
}

int large(int) {
  testing::GlooRank g;
  Communicator& c = g.comm();
  const int rank = c.rank(), N = c.world_size();
  const int64_t n = (int64_t(1) << 25) + 3;  // 128 MiB of f32
  std::vector<float> mine(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    mine[size_t(i)] = float(int_value(rank, i));
    double sum = 0;
    for (int r = 0; r < N; ++r) sum += int_value(r, i);
    want[size_t(i)] = float(sum);
  }
  for (AllReduceAlgo a : kAlgos) {
    Tensor x = Tensor::from_vector(mine, {n});
    c.all_reduce(x, ReduceOp::sum, a).wait();
    const float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i)
      RT_CHECK(p[i] == want[size_t(i)], algo_name(a), " at element ", i, ": ", p[i], ", expected ", want[size_t(i)]);
  }
  return 0;
}

TEST_CASE("gloo: 128 MiB all-reduced exactly by library, ring and tree on 2 ranks") {
  check_worlds({2}, large, 60s);
}

}  // namespace
}  // namespace rt::dist
