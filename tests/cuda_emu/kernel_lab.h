// Kernels with known memory behaviour, for the kernel lab's counters (tests/cuda_emu/
// kernel_lab_test.cc): each launcher queues one launch on the legacy default stream.
#pragma once

#include <cstdint>

namespace rt::emu_test::lab {

// y[i] = x[i], one float per thread, blocks of 128.
void copy(const float* x, float* y, int n);
// y[i] = x[i * stride], blocks of 128.
void strided_copy(const float* x, float* y, int n, int stride);
// One 32x32 tile through shared memory, block (32, 32): y = transpose(x). `padded`: the tile
// has a 33rd column.
void transpose32(const float* x, float* y, bool padded);
// Lanes 0-15 of each warp copy their element, the others do nothing; blocks of 128.
void half_warp_copy(const float* x, float* y, int n);
// Thread 0 stores x[0] in shared memory; after the barrier all 32 threads read it.
void broadcast(const float* x, float* y);
// Many live values per thread (ptxas: registers well over 64); blocks of 256.
void register_heavy(const float* x, float* y, int n);
// Vector copies: `width` 2 (float2) or 4 (float4) floats per thread, n vectors, blocks of 128.
void vector_copy(const float* x, float* y, int n, int width);
// One warp: lane l stores its `width`-float vector at element l * stride of a shared array,
// then reads it back and stores it to y (width 2 or 4; stride 1 or 2).
void shared_vectors(const float* x, float* y, int width, int stride);
// One block of 64 threads: every thread adds 1 to *counter with atomicAdd.
void atomic_count(float* counter);
// copy() by a kernel template whose argument the launch leaves to deduction.
void deduced_copy(const float* x, float* y, int n);
// The launch of copy() with a FLOP hint of 3 per element.
void hinted_copy(const float* x, float* y, int n);

}  // namespace rt::emu_test::lab
