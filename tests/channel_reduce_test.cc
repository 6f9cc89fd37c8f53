// The host-compilable half of the CUDA per-channel reductions (kernels/cuda/channel_reduce.h),
// checked on the CPU: the same plan, walks and states the kernels run, driven the way the
// grid drives them (every channel block x row block x lane). No GPU needed.
//   - every element of a channel is folded exactly once, by a lane of its own row block,
//     and nothing outside the channel is touched;
//   - the plan: row blocks non-empty, within CUDA's grid limits, enough blocks to fill a GPU;
//   - ChannelWalk gives each element's channel as a division would, for any stride;
//   - Welford states folded in groups and merged in the kernels' orders give the f64
//     two-pass mean and variance (f32 within a few ulps of the data's spread; f64 tight).
// Geometries are drawn from a seeded generator: odd and 1-wide planes, channel counts off
// the 32-channel block, batch 1, S above and below the 256-lane stride.
#include "kernels/cuda/channel_reduce.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace rt::cuda::detail {
namespace {

struct G {
  int64_t N, C, S;
  bool nhwc;
};

std::string str(const G& g) {
  return "N=" + std::to_string(g.N) + " C=" + std::to_string(g.C) + " S=" + std::to_string(g.S) +
         (g.nhwc ? " NHWC" : " NCHW");
}

int64_t channel_of(const G& g, int64_t i) { return g.nhwc ? i % g.C : (i / g.S) % g.C; }

// Fixed cases (ResNet50-like and edge shapes), then seeded random ones.
std::vector<G> geometries() {
  std::vector<G> v = {{1, 1, 2, false},     {2, 1, 1, true},       {1, 3, 15, false},  {1, 3, 15, true},
                      {3, 2, 4099, false},  {300, 2, 49, false},   {6, 37, 97, true},  {1001, 3, 1, false},
                      {4, 64, 3136, true},  {4, 64, 3136, false},  {2, 2048, 49, true}, {2, 2048, 49, false},
                      {16, 64, 12544, false}, {7, 33, 257, false}, {5, 31, 255, false}, {1, 1, 70000, false}};
  std::mt19937_64 gen(20261201);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };
  for (int k = 0; k < 40; ++k) {
    const int64_t S = pick(0, 2) == 0 ? 1 : pick(1, 600);
    const int64_t C = pick(0, 3) == 0 ? pick(1, 3) : pick(1, 130);
    const int64_t N = std::max<int64_t>(1, std::min<int64_t>(pick(1, 64), 200000 / (C * S) + 1));
    v.push_back({N, C, S, pick(0, 1) == 1});
  }
  return v;
}

// Runs the grid the way channel_reduce launches it, calling visit(c, rb, idx, u).
template <int U, typename Visit>
void drive(const ChannelReducePlan& p, Visit visit) {
  for (int64_t bx = 0; bx < p.col_blocks; ++bx)
    for (int64_t rb = 0; rb < p.RB; ++rb) {
      if (p.row_layout) {
        for (int x = 0; x < kRowX; ++x) {
          const int64_t c = bx * kRowX + x;
          if (c >= p.C) continue;
          for (int y = 0; y < kRowY; ++y)
            for_each_group_rows<U>(p, c, rb, y, [&](const int64_t(&idx)[U], int u) { visit(c, rb, idx, u); });
        }
      } else {
        for (int t = 0; t < kReduceThreads; ++t)
          for_each_group_nchw<U>(p, bx, rb, t, [&](const int64_t(&idx)[U], int u) { visit(bx, rb, idx, u); });
      }
    }
}

template <int U>
void check_coverage(const G& g) {
  const ChannelReducePlan p = plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
  const int64_t n = g.N * g.C * g.S;
  std::vector<int> seen(size_t(n), 0);
  bool in_channel = true, in_block = true, u_ok = true;
  drive<U>(p, [&](int64_t c, int64_t rb, const int64_t(&idx)[U], int u) {
    u_ok = u_ok && u >= 1 && u <= U;
    for (int k = 0; k < u; ++k) {
      const int64_t i = idx[k];
      if (i < 0 || i >= n) {
        in_channel = false;
        continue;
      }
      ++seen[size_t(i)];
      in_channel = in_channel && channel_of(g, i) == c;
      // The value's position among the channel's M values lies in row block rb.
      const int64_t j = g.nhwc || g.S == 1 ? i / g.C : (i / (g.C * g.S)) * g.S + i % g.S;
      in_block = in_block && j / p.chunk == rb;
    }
  });
  int64_t wrong = 0;
  for (int v : seen) wrong += v != 1;
  CHECK_MESSAGE(wrong == 0, str(g), " U=", U, ": ", wrong, " elements folded other than once");
  CHECK_MESSAGE(in_channel, str(g), " U=", U, ": an index outside the tensor or its channel");
  CHECK_MESSAGE(in_block, str(g), " U=", U, ": a value folded by another row block");
  CHECK_MESSAGE(u_ok, str(g), " U=", U, ": a group with no element");
}

TEST_CASE("channel reduction: every element folded exactly once, by its own channel and row block") {
  for (const G& g : geometries()) {
    check_coverage<2>(g);   // f64
    check_coverage<4>(g);   // f32
    check_coverage<8>(g);   // bf16, f16
  }
}

TEST_CASE("channel reduction plan: non-empty row blocks within grid limits, enough blocks to fill a GPU") {
  for (const G& g : geometries()) {
    const ChannelReducePlan p = plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
    CHECK_MESSAGE((p.RB >= 1 && p.RB <= 65535), str(g));
    CHECK_MESSAGE(p.RB * p.chunk >= p.M, str(g));
    CHECK_MESSAGE((p.RB - 1) * p.chunk < p.M, str(g), ": an empty last row block");
    CHECK(p.row_layout == (g.nhwc || g.S == 1));
  }
  // ResNet50 batch 256: the stem's 64 channels of 112x112 (3.2M values each) and layer4's
  // 2048 channels of 7x7. One block per channel would be 64 blocks; the plan fills ~2 waves.
  const ChannelReducePlan stem = plan_channel_reduce(256, 64, 112 * 112, false);
  CHECK(stem.col_blocks * stem.RB >= kReduceTargetBlocks);
  const ChannelReducePlan stem_nhwc = plan_channel_reduce(256, 64, 112 * 112, true);
  CHECK(stem_nhwc.col_blocks * stem_nhwc.RB >= kReduceTargetBlocks);
  const ChannelReducePlan deep = plan_channel_reduce(256, 2048, 49, true);
  CHECK(deep.col_blocks * deep.RB >= kReduceTargetBlocks);
  // A small tensor is not split below kMinValuesPerLane values per lane.
  CHECK(plan_channel_reduce(2, 4, 9, false).RB == 1);
}

TEST_CASE("ChannelWalk: the channel of every element under a fixed stride, as a division gives it") {
  std::mt19937_64 gen(7);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };
  int64_t bad = 0;
  for (int k = 0; k < 400; ++k) {
    const bool nhwc = k % 2 == 1;
    const int64_t C = pick(1, 70), S = nhwc ? 1 : pick(1, 300);
    const int64_t start = pick(0, 5000), stride = k % 5 == 0 ? pick(1, 3) : pick(1, 1 << 20);
    ChannelWalk w(start, stride, C, S);
    int64_t i = start;
    for (int step = 0; step < 50; ++step, i += stride, w.advance()) {
      bad += w.c != (i / S) % C || w.s != i % S;
      int64_t ch[8];
      w.channels<8>(ch);
      for (int q = 0; q < 8; ++q) bad += ch[q] != ((i + q) / S) % C;
    }
  }
  CHECK(bad == 0);
}

// The statistics as the kernels form them: each lane folds its groups into a WelfordState,
// lanes merge in a fixed order, row blocks merge in order; against the f64 two-pass values.
template <typename A, int U>
void check_welford(const G& g, double mean_tol, double var_tol) {
  const ChannelReducePlan p = plan_channel_reduce(g.N, g.C, g.S, g.nhwc);
  const int64_t n = g.N * g.C * g.S;
  std::mt19937_64 gen(uint64_t(n) * 31 + uint64_t(g.C));
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<A> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = A(100.0 + 0.5 * double(channel_of(g, i)) + nd(gen));
  // Row-block partials: lanes fold into their own states, merged in lane order.
  std::vector<WelfordState<A>> part(size_t(p.RB * p.C), WelfordState<A>::empty());
  drive<U>(p, [&](int64_t c, int64_t rb, const int64_t(&idx)[U], int u) {
    A v[U] = {};
    for (int k = 0; k < u; ++k) v[k] = x[size_t(idx[k])];
    WelfordState<A> s = WelfordState<A>::empty();
    s.add(v, u);
    part[size_t(rb * p.C + c)].merge(s);
  });
  std::vector<double> sum(size_t(g.C), 0), sq(size_t(g.C), 0);
  std::vector<int64_t> cnt(size_t(g.C), 0);
  for (int64_t i = 0; i < n; ++i) sum[size_t(channel_of(g, i))] += double(x[size_t(i)]), ++cnt[size_t(channel_of(g, i))];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = channel_of(g, i);
    const double d = double(x[size_t(i)]) - sum[size_t(c)] / double(cnt[size_t(c)]);
    sq[size_t(c)] += d * d;
  }
  double worst_mean = 0, worst_var = 0;
  for (int64_t c = 0; c < g.C; ++c) {
    WelfordState<A> st = part[size_t(c)];
    for (int64_t rb = 1; rb < p.RB; ++rb) st.merge(part[size_t(rb * p.C + c)]);
    CHECK_MESSAGE(st.n == p.M, str(g));
    const double mean = sum[size_t(c)] / double(p.M), var = sq[size_t(c)] / double(p.M);
    worst_mean = std::max(worst_mean, std::abs(double(st.mean) - mean) / std::abs(mean));
    // The variance against the data's own spread: sum((x - mean)^2) has no cancellation.
    worst_var = std::max(worst_var, std::abs(double(st.m2) / double(st.n) - var) / var);
  }
  CHECK_MESSAGE(worst_mean <= mean_tol, str(g), " mean rel err ", worst_mean);
  CHECK_MESSAGE(worst_var <= var_tol, str(g), " var rel err ", worst_var);
}

TEST_CASE("Welford states merged in the kernels' order give the two-pass mean and variance") {
  // Data with mean ~100 and standard deviation 1 per channel. In f32, sum(x^2) - sum(x)^2/n
  // would be off by ~1e4 * 6e-8 = 6e-4 of the variance (cancellation). Welford's centred
  // terms x - mean carry an absolute rounding of ~eps * |mean|, so the variance is within
  // ~2 eps |mean| / std = 1.2e-5 relative: the f32 tolerance is 2e-5, the mean's 2e-6 (a
  // few ulps). f64: 1e-12 and 1e-11, above the f64 reference's own summation error over up
  // to 5e4 values (n eps = 5.5e-12 at worst).
  const std::vector<G> gs = {{3, 2, 4099, false}, {300, 2, 49, false}, {6, 37, 97, true}, {16, 5, 3136, true},
                             {1001, 3, 1, false}, {1, 1, 2, true}};
  for (const G& g : gs) {
    check_welford<double, 2>(g, 1e-12, 1e-11);
    check_welford<float, 4>(g, 2e-6, 2e-5);
    check_welford<float, 8>(g, 2e-6, 2e-5);
  }
}

}  // namespace
}  // namespace rt::cuda::detail
