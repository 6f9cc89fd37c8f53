// Small kernels for the emulator's own tests (tests/cuda_emu/checks_test.cc): each right
// version beside the same kernel with one planted bug that a check of --config=cuda-emu
// must catch. Launchers take device pointers and a stream; every launch is checked.
#pragma once

#include <cstdint>

#include "kernels/cuda/stream.h"

namespace rt::emu_test {

// y[0] = sum of x[0:n] by one block of `threads` (a power of two) with a shared-memory tree;
// `missing_barrier` drops the __syncthreads inside the tree.
void block_sum(const float* x, int n, float* y, int threads, bool missing_barrier, cudaStream_t s);
// The same with the barrier inside `if (threadIdx.x < threads / 2)`.
void block_sum_barrier_in_branch(const float* x, int n, float* y, int threads, cudaStream_t s);
// y[0] = sum of x[0:n] by a helper with barriers (inlined); `in_branches` calls it from two
// branches (even and odd threads), a copy each: two barriers on a GPU.
void helper_sum(const float* x, int n, float* y, int threads, bool in_branches, cudaStream_t s);
// One warp: lane 0 writes a shared value (after a __syncwarp of its own) that lane 1 reads into
// y[0]; `synced` puts a __syncwarp of the whole warp between the two.
void warp_handoff(float* y, bool synced, cudaStream_t s);
// Threads past n return before the block's barrier.
void block_sum_early_return(const float* x, int n, float* y, int threads, cudaStream_t s);
// y[i] = x[i] + x[i + 1] over a grid-stride loop; `overread` lets the last element read x[n].
void pair_sum(const float* x, int64_t n, float* y, bool overread, cudaStream_t s);
// y[w] = sum of x over each warp by shuffles; lanes with i >= n leave first when `early_exit`.
void warp_sums(const float* x, int n, float* y, bool early_exit, cudaStream_t s);
// y[i] = 2 * x[i], blocks of `threads` threads (any value: the launch limits are checked).
void scale(const float* x, int64_t n, float* y, int threads, cudaStream_t s);
// Reads 16-byte packs starting `offset_floats` floats into x.
void pack_copy(const float* x, int64_t packs, int offset_floats, float* y, cudaStream_t s);
// Shared memory: reads slot `read_slot` of a 64-float array of which only [0, written) was written.
void shared_read(int written, int read_slot, float* y, cudaStream_t s);
// An atomicAdd of 1 per thread into *counter over `n` threads.
void count(int64_t n, unsigned* counter, cudaStream_t s);
// The planted bug of count(): each of `n` threads adds 1 to *counter with a plain load and
// store (a lost update whenever two threads interleave between them).
void count_racy(int64_t n, unsigned* counter, cudaStream_t s);
// y[idx[i]] += x[i] for i < n (index_add), blocks of 64 threads; `atomic` false: a plain
// read-modify-write, a race between blocks where two of them hit one index.
void index_add(const float* x, const int* idx, int n, float* y, bool atomic, cudaStream_t s);
// y[0] = sum of x[0:n] by atomicAdd from blocks of 64 threads; `zero_in_kernel`: block 0's
// thread 0 first stores y[0] = 0 itself, a plain store the other blocks' atomics race with.
void atomic_total(const float* x, int n, float* y, bool zero_in_kernel, cudaStream_t s);
// y[i] = y[i + 1] for i < n - 1 in place, blocks of 64 threads: each block reads the first
// element of the next block's, which that block writes: a race between blocks.
void shift_left_in_place(float* y, int n, cudaStream_t s);
// out[b] = how many of bins[0:n] (each in [0, 16)) are b, by one block of 64 threads with
// shared-memory atomics; `peek` has thread 0 read its bin's count before the barrier, a
// plain read racing the other threads' atomics.
void shared_histogram(const int* bins, int n, unsigned* out, bool peek, cudaStream_t s);
// y[i] = __fadd_rn(__fmul_rn(a[i], b[i]), c[i]): two roundings, never one fused multiply-add.
void mul_add_rn(const float* a, const float* b, const float* c, int n, float* y, cudaStream_t s);

// y[t] = v[t % n] for the 32 threads of one block, v a thread's own array of 8 floats (local
// memory on a GPU); n = 9 lets thread 8 read v[8], past the array.
void local_pick(int n, float* y, cudaStream_t s);

}  // namespace rt::emu_test
