// Helpers shared by the op files (internal to engine/ops).
#pragma once

#include "engine/autograd.h"
#include "engine/profiler.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "kernels/cuda/stream.h"

namespace rt::ops {

// Calls f(T{}) with T = float or double for the tensor's dtype.
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: RT_FAIL(op, ": the CPU backend computes in f32 or f64, got ", dtype_name(t),
                     "; convert with .to(DType::f32)");
  }
}

// The stream CUDA ops on t's device queue their kernels on (the device's current stream).
// Launchers assume t's device is the CUDA current device (one GPU per process today).
inline cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(Stream::current(t.device()).handle());
}

// An optional operand's pointer for a kernel: null when the tensor is undefined (no bias, a
// gradient nobody needs); the kernels take null as "absent".
inline void* raw_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// A new tensor shaped like t (same dtype, device, format).
inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device(), t.format()); }

// g in memory format f (a no-op when it already is, or when g is not 4-D).
inline Tensor in_format(const Tensor& g, MemoryFormat f) { return g.ndim() == 4 ? g.to(f) : g; }

// Bytes of n elements of dtype t: the profiler's cost formulas (Note [Profiler scopes]).
inline double nbytes_of(int64_t n, DType t) { return double(n) * double(dtype_size(t)); }

// The cost of an elementwise op over a's elements: `reads` inputs and `writes` outputs of
// a's size and dtype, `flops` per element; likewise for the work its backward closure does
// itself (the ops it calls count their own). Zero for an undefined a (the op's checks
// report it).
inline prof::OpCost elementwise_cost(const Tensor& a, int reads, int writes, double flops, int bwd_reads = 0,
                                     int bwd_writes = 0, double bwd_flops = 0) {
  if (!a.defined()) return {};
  const double n = double(a.numel()), es = double(dtype_size(a.dtype()));
  return {{flops * n, (reads + writes) * n * es}, {bwd_flops * n, (bwd_reads + bwd_writes) * n * es}};
}

}  // namespace rt::ops
