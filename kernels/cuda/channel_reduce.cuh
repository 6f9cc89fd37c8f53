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
#include <cstring>

#include "kernels/cuda/channel_reduce.h"
#include "kernels/cuda/common.cuh"

namespace rt::cuda::detail {

template <typename T>
constexpr int reduce_unroll() {
  return int(16 / sizeof(T));
}

// Note [Whole states]
// The partials live in global memory as an array of states, read and written one state
// per thread with neighbouring threads on neighbouring states. Field by field, each access
// is a gather at the state's stride (the kernel lab measured 38% sector efficiency for
// channel_finalize over 16-byte Welford states); a state of 8 or 16 bytes, aligned to its
// size, moves instead as one 8- or 16-byte access, coalesced.
template <typename State>
__device__ __forceinline__ State load_state(const State* p) {
  State s;
  if constexpr (sizeof(State) == 16 && alignof(State) == 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    memcpy(&s, &v, sizeof s);
  } else if constexpr (sizeof(State) == 8 && alignof(State) == 8) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    memcpy(&s, &v, sizeof s);
  } else {
    s = *p;
  }
  return s;
}
template <typename State>
__device__ __forceinline__ void store_state(State* p, const State& s) {
  if constexpr (sizeof(State) == 16 && alignof(State) == 16) {
    uint4 v;
    memcpy(&v, &s, sizeof v);
    *reinterpret_cast<uint4*>(p) = v;
  } else if constexpr (sizeof(State) == 8 && alignof(State) == 8) {
    uint2 v;
    memcpy(&v, &s, sizeof v);
    *reinterpret_cast<uint2*>(p) = v;
  } else {
    *p = s;
  }
}

// Note [States in shared memory]
// A block's states meet in shared memory. Stored as an array of structs, a warp's access to
// one field of 32 neighbouring states is a strided gather: the kernel lab measured 1 extra
// wavefront per request for the 8-byte SumState<float> and 2.7 for the 16-byte
// WelfordState<float> in ResNet50's backward and statistics passes. Stored word-major
// instead (word k of state i at w[k][i]), each word of 32 neighbouring states is 32
// consecutive words: one wavefront, no conflict, and the same wavefronts in all as one
// 16-byte access per state would take.
template <typename State, int N>
struct SharedStates {
  static_assert(sizeof(State) % 4 == 0, "states are whole 4-byte words");
  static constexpr int kWords = int(sizeof(State) / 4);
  uint32_t w[kWords][N];
  __device__ void put(int i, const State& s) {
    uint32_t v[kWords];
    memcpy(v, &s, sizeof v);
    RT_UNROLL
    for (int k = 0; k < kWords; ++k) w[k][i] = v[k];
  }
  __device__ State get(int i) const {
    uint32_t v[kWords];
    RT_UNROLL
    for (int k = 0; k < kWords; ++k) v[k] = w[k][i];
    State s;
    memcpy(&s, v, sizeof s);
    return s;
  }
};

// Stage 1, NCHW. F: `State` type, and fold(State&, c, const int64_t (&idx)[U], u) that loads
// the first u indices and folds them (loads first, then arithmetic and any stores).
template <typename F, int U, typename Sink>
__global__ void __launch_bounds__(kReduceThreads) channel_partials_nchw(ChannelReducePlan p, F f, Sink sink) {
  using State = typename F::State;
  using Shared = SharedStates<State, kReduceThreads>;  // Note [States in shared memory]
  RT_SHARED(Shared, sm, [1]);
  const int64_t c = blockIdx.x, rb = blockIdx.y;
  const int t = int(threadIdx.x);
  State st = State::empty();
  for_each_group_nchw<U>(p, c, rb, t, [&](const int64_t(&idx)[U], int u) { f.fold(st, c, idx, u); });
  sm[0].put(t, st);
  __syncthreads();
  for (int w = kReduceThreads / 2; w > 0; w >>= 1) {  // fixed tree: deterministic
    if (t < w) {
      st.merge(sm[0].get(t + w));
      sm[0].put(t, st);
    }
    __syncthreads();
  }
  if (t == 0) sink(c, rb, st);
}

// Stage 1, row layout: threadIdx.x = channel within the block's 32, threadIdx.y = row lane.
// At least 4 blocks per SM (64 registers a thread): batch norm's backward fold, with its
// three 16-byte groups of loads in flight, took 124 registers and so 25% occupancy (the
// kernel lab, ResNet50 bf16 channels-last); ptxas fits it in 64 without spilling.
template <typename F, int U, typename Sink>
__global__ void __launch_bounds__(kRowX* kRowY, 4) channel_partials_rows(ChannelReducePlan p, F f, Sink sink) {
  using State = typename F::State;
  using Shared = SharedStates<State, kRowY * kRowX>;  // Note [States in shared memory]
  RT_SHARED(Shared, sm, [1]);
  const int64_t c = blockIdx.x * int64_t(kRowX) + threadIdx.x, rb = blockIdx.y;
  State st = State::empty();
  if (c < p.C)
    for_each_group_rows<U>(p, c, rb, int(threadIdx.y), [&](const int64_t(&idx)[U], int u) { f.fold(st, c, idx, u); });
  sm[0].put(int(threadIdx.y) * kRowX + int(threadIdx.x), st);
  __syncthreads();
  if (threadIdx.y == 0 && c < p.C) {
    for (int y = 1; y < kRowY; ++y) st.merge(sm[0].get(y * kRowX + int(threadIdx.x)));
    sink(c, rb, st);
  }
}

// Where a block's state goes: the partials (two stages), or straight to the Out functor
// when the plan has a single row block (one stage, no workspace).
template <typename State>
struct PartialSink {
  State* part;
  int64_t C;
  __device__ void operator()(int64_t c, int64_t rb, const State& st) const {
    store_state(part + rb * C + c, st);  // Note [Whole states]
  }
};
template <typename Out>
struct OutSink {
  Out out;
  template <typename State>
  __device__ void operator()(int64_t c, int64_t, const State& st) const {
    out(c, st);
  }
};

// kRowsOnly: the caller's plans are all rows (row_layout), so the NCHW kernel is not
// instantiated for it (Note [Kernel coverage] in cuda_emu/coverage.cc: code no plan reaches).
template <typename T, bool kRowsOnly = false, typename F, typename Sink>
void launch_channel_partials(const ChannelReducePlan& p, F f, Sink sink, cudaStream_t s) {
  const dim3 grid(unsigned(p.col_blocks), unsigned(p.RB));
  rt::cuda::flops_hint(F::kFlopsPerValue * double(p.N) * double(p.C) * double(p.S), std::is_same_v<T, double>);
  if (p.row_layout) {
    RT_LAUNCH(grid, dim3(kRowX, kRowY), 0, s, channel_partials_rows<F, reduce_unroll<T>()>)(p, f, sink);
  } else if constexpr (kRowsOnly) {
    RT_CHECK(false, "channel reduction: this caller plans rows (NHWC, or S == 1) only, got an NCHW plan");
  } else {
    RT_LAUNCH(grid, kReduceThreads, 0, s, channel_partials_nchw<F, reduce_unroll<T>()>)(p, f, sink);
  }
  CUDA_CHECK_LAUNCH();
}

// Stage 2: channel c's partials merged in rb order, then out(c, total).
template <typename State, typename Out>
__global__ void channel_finalize(int64_t C, int64_t RB, const State* part, Out out) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    State st = load_state(part + c);  // Note [Whole states]
    for (int64_t rb = 1; rb < RB; ++rb) st.merge(load_state(part + rb * C + c));
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
// need (p.RB must be 1): out(c, total) from the block itself, no workspace. Rows only (its
// one caller, linear's bias gradient, reduces the columns of a row-major matrix).
template <typename T, typename F, typename Out>
void channel_reduce_single(const ChannelReducePlan& p, F f, Out out, cudaStream_t s) {
  RT_CHECK(p.RB == 1, "channel_reduce_single: the plan has ", p.RB, " row blocks");
  launch_channel_partials<T, true>(p, f, OutSink<Out>{out}, s);
}

}  // namespace rt::cuda::detail
