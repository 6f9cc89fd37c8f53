// Per-channel reductions over an (N, C, S) tensor in either layout, spread over rows and
// channels: batch norm's statistics and backward sums (kernels/cuda/batch_norm.cu).
//
// Note [Two-stage channel reduction]
// A channel of a ResNet50 batch-256 activation holds up to 3.2M values (64 channels at
// 112x112) and a layer can have as few as 64 channels, so one block per channel leaves most
// of the GPU idle. Instead:
//   stage 1: a 2-D grid, blockIdx.x over channels (one channel per block in NCHW, 32
//            channels per block in the row layout), blockIdx.y over RB row blocks of
//            `chunk` values each; every block folds its rows into a State per channel
//            and writes it to partial[rb * C + c];
//   stage 2: one thread per channel merges partial[0..RB) in rb order and hands the total
//            to the caller's `Out` functor, which finishes the channel.
// The plan (RB, chunk) depends on the geometry and the element type only, never on the
// device, every thread folds its values in a fixed order, and blocks merge in a fixed tree,
// so results are bit-identical run to run and GPU to GPU.
//
// Layouts: NCHW reads channel c as N runs of S contiguous values; a thread walks its values
// with additions only (no division per value: the stride's quotient and remainder by S are
// fixed). Any layout with S == 1 and NHWC are the "row layout", element (r, c) at r*C + c:
// a warp reads 32 neighbouring channels of one row, coalesced. The plan and the walks are
// in kernels/cuda/channel_reduce.h, host-compilable and tested on the CPU with the states.
//
// Each thread issues U = 16 / sizeof(T) loads before folding them (16 bytes in flight per
// thread and per group, as a vector load would have), which is what keeps enough requests
// in flight for a memory-bound pass.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/channel_reduce.h"
#include "kernels/cuda/common.cuh"

namespace rt::cuda::detail {

template <typename T>
constexpr int reduce_unroll() {
  return int(16 / sizeof(T));
}

// Stage 1, NCHW. F: `State` type, and fold(State&, c, const int64_t (&idx)[U], u) that loads
// the first u indices and folds them (loads first, then arithmetic and any stores).
template <typename F, int U, typename Sink>
__global__ void __launch_bounds__(kReduceThreads) channel_partials_nchw(ChannelReducePlan p, F f, Sink sink) {
  using State = typename F::State;
  RT_SHARED(State, sm, [kReduceThreads]);
  const int64_t c = blockIdx.x, rb = blockIdx.y;
  State st = State::empty();
  for_each_group_nchw<U>(p, c, rb, int(threadIdx.x), [&](const int64_t(&idx)[U], int u) { f.fold(st, c, idx, u); });
  sm[threadIdx.x] = st;
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {  // fixed tree: deterministic
    if (int(threadIdx.x) < w) sm[threadIdx.x].merge(sm[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) sink(c, rb, sm[0]);
}

// Stage 1, row layout: threadIdx.x = channel within the block's 32, threadIdx.y = row lane.
template <typename F, int U, typename Sink>
__global__ void __launch_bounds__(kRowX* kRowY) channel_partials_rows(ChannelReducePlan p, F f, Sink sink) {
  using State = typename F::State;
  RT_SHARED(State, sm, [kRowY][kRowX]);
  const int64_t c = blockIdx.x * int64_t(kRowX) + threadIdx.x, rb = blockIdx.y;
  State st = State::empty();
  if (c < p.C)
    for_each_group_rows<U>(p, c, rb, int(threadIdx.y), [&](const int64_t(&idx)[U], int u) { f.fold(st, c, idx, u); });
  sm[threadIdx.y][threadIdx.x] = st;
  __syncthreads();
  if (threadIdx.y == 0 && c < p.C) {
    for (int y = 1; y < kRowY; ++y) st.merge(sm[y][threadIdx.x]);
    sink(c, rb, st);
  }
}

// Where a block's state goes: the partials (two stages), or straight to the Out functor
// when the plan has a single row block (one stage, no workspace).
template <typename State>
struct PartialSink {
  State* part;
  int64_t C;
  __device__ void operator()(int64_t c, int64_t rb, const State& st) const { part[rb * C + c] = st; }
};
template <typename Out>
struct OutSink {
  Out out;
  template <typename State>
  __device__ void operator()(int64_t c, int64_t, const State& st) const {
    out(c, st);
  }
};

template <typename T, typename F, typename Sink>
void launch_channel_partials(const ChannelReducePlan& p, F f, Sink sink, cudaStream_t s) {
  const dim3 grid(unsigned(p.col_blocks), unsigned(p.RB));
  if (p.row_layout) {
    RT_LAUNCH(grid, dim3(kRowX, kRowY), 0, s, channel_partials_rows<F, reduce_unroll<T>()>)(p, f, sink);
  } else {
    RT_LAUNCH(grid, kReduceThreads, 0, s, channel_partials_nchw<F, reduce_unroll<T>()>)(p, f, sink);
  }
  CUDA_CHECK_LAUNCH();
}

// Stage 2: channel c's partials merged in rb order, then out(c, total).
template <typename State, typename Out>
__global__ void channel_finalize(int64_t C, int64_t RB, const State* part, Out out) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    State st = part[c];
    for (int64_t rb = 1; rb < RB; ++rb) st.merge(part[rb * C + c]);
    out(c, st);
  }
}

// Bytes of partials the plan needs for State.
template <typename State>
size_t channel_partials_bytes(const ChannelReducePlan& p) {
  return size_t(p.RB * p.C) * sizeof(State);
}

// Both stages on stream s; `part` holds channel_partials_bytes<State>(p) bytes.
template <typename T, typename F, typename Out>
void channel_reduce(const ChannelReducePlan& p, F f, Out out, typename F::State* part, cudaStream_t s) {
  launch_channel_partials<T>(p, f, PartialSink<typename F::State>{part, p.C}, s);
  RT_LAUNCH(grid_for(p.C, kReduceThreads), kReduceThreads, 0, s, channel_finalize)(p.C, p.RB, part, out);
  CUDA_CHECK_LAUNCH();
}

// One stage, for reductions small enough that one row block per channel fills what they
// need (p.RB must be 1): out(c, total) from the block itself, no workspace.
template <typename T, typename F, typename Out>
void channel_reduce_single(const ChannelReducePlan& p, F f, Out out, cudaStream_t s) {
  RT_CHECK(p.RB == 1, "channel_reduce_single: the plan has ", p.RB, " row blocks");
  launch_channel_partials<T>(p, f, OutSink<Out>{out}, s);
}

}  // namespace rt::cuda::detail
