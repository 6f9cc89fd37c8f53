// The host-compilable half of the per-channel CUDA kernels (batch norm's reductions and
// elementwise passes): the reduction plan, the index walks and the reduction states,
// compiled for the device by nvcc and for the host by the C++ compiler, so that a CPU test
// (tests/channel_reduce_test.cc) checks on every machine that each thread visits exactly the
// elements the kernels mean it to (the partition of a channel's rows into row blocks and
// lanes: Note [Two-stage channel reduction] in kernels/cuda/channel_reduce.cuh; the channel
// of each element under a fixed stride) and that the states merge to the right statistics.
//
// No division per element: a 64-bit division costs more than the element's memory traffic
// on a GPU, so positions advance by additions of the stride's fixed quotient and remainder.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/launch.cuh"  // RT_UNROLL

#ifdef __CUDACC__
#define RT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define RT_HOST_DEVICE inline
#endif

namespace rt::cuda::detail {

constexpr int kReduceThreads = 256;            // NCHW block: lanes over one channel's rows
constexpr int kRowX = 32, kRowY = 8;           // row-layout block: 32 channels x 8 row lanes
constexpr int64_t kReduceTargetBlocks = 2048;  // ~2 waves of 256-thread blocks on a 132-SM GPU
constexpr int64_t kMinValuesPerLane = 16;      // below this a row block is not worth its partial

// How the rows of every channel are split (Note [Two-stage channel reduction]). Depends on
// the geometry only, never on the device: results are the same on every GPU.
struct ChannelReducePlan {
  bool row_layout;     // element (r, c) at r*C + c (NHWC, or S == 1)
  int64_t N, C, S, M;  // M = N*S values per channel
  int64_t col_blocks;  // blockIdx.x extent: C (NCHW) or ceil(C / kRowX)
  int64_t RB, chunk;   // row blocks, values per row block (the last may have fewer)
  int64_t q_stride, r_stride;  // NCHW: kReduceThreads = q_stride * S + r_stride
};

// max_row_blocks: 1 for a one-stage reduction (channel_reduce_single).
inline ChannelReducePlan plan_channel_reduce(int64_t N, int64_t C, int64_t S, bool nhwc,
                                             int64_t max_row_blocks = 65535) {
  ChannelReducePlan p{};
  p.row_layout = nhwc || S == 1;
  p.N = N, p.C = C, p.S = S, p.M = N * S;
  p.col_blocks = p.row_layout ? (C + kRowX - 1) / kRowX : C;
  const int64_t lanes = p.row_layout ? kRowY : kReduceThreads;  // threads sharing one channel's rows
  const int64_t by_size = (p.M + lanes * kMinValuesPerLane - 1) / (lanes * kMinValuesPerLane);
  const int64_t by_fill = (kReduceTargetBlocks + p.col_blocks - 1) / p.col_blocks;
  const int64_t rb = std::max<int64_t>(1, std::min<int64_t>({by_size, by_fill, max_row_blocks, 65535}));
  p.chunk = (p.M + rb - 1) / rb;
  p.RB = (p.M + p.chunk - 1) / p.chunk;  // every row block non-empty
  p.q_stride = kReduceThreads / S;
  p.r_stride = kReduceThreads % S;
  return p;
}

// Calls visit(idx, u) for the elements of channel c in row block rb that lane `lane` folds,
// U at a time: idx[0..u) are flat element indices (u >= 1; idx[u..U) are not elements).
// NCHW: lane t takes values j = rb*chunk + t, + kReduceThreads, ... of the channel, value j
// being x[(n*C + c)*S + s] with n = j / S, s = j % S. Row layout: lane (x = channel within
// the block, y) takes rows r = rb*chunk + y, + kRowY, ...; element r*C + c.
template <int U, typename Visit>
RT_HOST_DEVICE void for_each_group_nchw(const ChannelReducePlan& p, int64_t c, int64_t rb, int lane, Visit&& visit) {
  const int64_t j_end = (rb + 1) * p.chunk < p.M ? (rb + 1) * p.chunk : p.M;
  int64_t j = rb * p.chunk + lane;
  if (j >= j_end) return;
  int64_t s = j % p.S;
  int64_t i = ((j / p.S) * p.C + c) * p.S + s;
  // Stepping j by kReduceThreads moves n by q_stride and s by r_stride, plus one image when
  // s passes S (r_stride < S, so at most once).
  const int64_t di = p.q_stride * p.C * p.S + p.r_stride, wrap = p.C * p.S - p.S;
  while (j < j_end) {
    int64_t idx[U];
    int u = 0;
RT_UNROLL
    for (int k = 0; k < U; ++k) {
      idx[k] = i;
      if (j < j_end) u = k + 1;
      j += kReduceThreads;
      s += p.r_stride;
      i += di;
      if (s >= p.S) {
        s -= p.S;
        i += wrap;
      }
    }
    visit(idx, u);
  }
}

template <int U, typename Visit>
RT_HOST_DEVICE void for_each_group_rows(const ChannelReducePlan& p, int64_t c, int64_t rb, int lane_y, Visit&& visit) {
  const int64_t r_end = (rb + 1) * p.chunk < p.M ? (rb + 1) * p.chunk : p.M;
  for (int64_t r = rb * p.chunk + lane_y; r < r_end; r += int64_t(kRowY) * U) {
    int64_t idx[U];
    int u = 0;
RT_UNROLL
    for (int k = 0; k < U; ++k) {
      const int64_t rr = r + int64_t(k) * kRowY;
      idx[k] = rr * p.C + c;
      if (rr < r_end) u = k + 1;
    }
    visit(idx, u);
  }
}

// Where element i sits, advanced by a fixed stride with additions only. NCHW: s = i % S,
// channel (i / S) % C; NHWC is the same walk with S = 1 (channel i % C).
struct ChannelWalk {
  int64_t s, c, S, C, ds, dc;
  RT_HOST_DEVICE ChannelWalk(int64_t i, int64_t stride, int64_t C_, int64_t S_) : S(S_), C(C_) {
    s = i % S;
    c = (i / S) % C;
    ds = stride % S;
    dc = (stride / S) % C;
  }
  RT_HOST_DEVICE void advance() {  // c stays below 2C before the wrap: dc <= C - 1, plus one carry
    s += ds;
    c += dc;
    if (s >= S) {
      s -= S;
      ++c;
    }
    if (c >= C) c -= C;
  }
  // The channels of the W consecutive elements from here (a 16-byte pack may run past the
  // end of an NCHW row or an NHWC pixel).
  template <int W>
  RT_HOST_DEVICE void channels(int64_t (&out)[W]) const {
    int64_t ss = s, ch = c;
RT_UNROLL
    for (int k = 0; k < W; ++k) {
      out[k] = ch;
      if (++ss == S) {
        ss = 0;
        if (++ch == C) ch = 0;
      }
    }
  }
};

// Welford state (count, mean, sum of squared deviations), merged with Chan et al.'s
// formula: one pass over x for the mean and a variance free of the cancellation of
// sum(x^2) - sum(x)^2 / n.
// Aligned to its size where that is a power of two (16 bytes for float), so that a whole
// state moves as one vector access (Note [Whole states] in channel_reduce.cuh).
template <typename A>
struct alignas(sizeof(A) == 4 ? 16 : 8) WelfordState {
  A mean, m2;
  int64_t n;
  RT_HOST_DEVICE static WelfordState empty() { return {A(0), A(0), 0}; }
  RT_HOST_DEVICE void merge(const WelfordState& b) {
    if (b.n == 0) return;
    if (n == 0) {
      *this = b;
      return;
    }
    const int64_t nn = n + b.n;
    const A d = b.mean - mean, fb = A(b.n) / A(nn);
    mean += d * fb;
    m2 += b.m2 + d * d * A(n) * fb;
    n = nn;
  }
  // Folds v[0..u), u >= 1: the group's own mean and centred squares, then one merge.
  template <int U>
  RT_HOST_DEVICE void add(const A (&v)[U], int u) {
    A s = 0;
RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) s += v[k];
    const A gm = s / A(u);
    A g2 = 0;
RT_UNROLL
    for (int k = 0; k < U; ++k)
      if (k < u) g2 += (v[k] - gm) * (v[k] - gm);
    merge(WelfordState{gm, g2, int64_t(u)});
  }
};

// Two plain sums (aligned to their size, as WelfordState).
template <typename A>
struct alignas(2 * sizeof(A)) SumState {
  A a, b;
  RT_HOST_DEVICE static SumState empty() { return {A(0), A(0)}; }
  RT_HOST_DEVICE void merge(const SumState& o) {
    a += o.a;
    b += o.b;
  }
};

// Three plain sums, padded to four so that a state moves as one 16-byte access in f32
// (Note [Whole states] in kernels/cuda/channel_reduce.cuh): the backward of two batch norms
// that share one dz (Note [Two batch norms in one tail] in engine/ops/dual_batch_norm_add_relu.cc).
template <typename A>
struct alignas(4 * sizeof(A)) SumState3 {
  A a, b, c, unused;
  RT_HOST_DEVICE static SumState3 empty() { return {A(0), A(0), A(0), A(0)}; }
  RT_HOST_DEVICE void merge(const SumState3& o) {
    a += o.a;
    b += o.b;
    c += o.c;
  }
};

}  // namespace rt::cuda::detail
