// Helpers of the batch-norm launcher tests (batch_norm_cuda_test, dual_batch_norm_add_relu_cuda_test):
// geometries that reach every path of kernels/cuda/batch_norm.cu, poisoned workspaces, the
// running statistics' update and tolerance, the relu's mask bits built on the host, and
// buffers one element off 16-byte alignment.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/batch_norm.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt::cuda_test {

inline cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

struct Geom {
  int64_t N, C, S;
  bool nhwc;
};
// (N, C, S): S = H*W. Batch 1, one channel, odd sizes, C above 32 and not a multiple of it.
// The last rows split every channel over several row blocks
// (Note [Two-stage channel reduction]), with a short last block: NCHW with S above and
// below the 256-thread stride, and the row layout with chunks that are not a multiple of
// the 8 row lanes. NHWC with C a multiple of the pack width takes the channel-stationary
// passes (Note [Channel-stationary packs]): C = 64 (packs per pixel dividing the block),
// 24 (3 or 6 packs per pixel: a grid rounded to their multiple) and 2560 (more packs per
// pixel than a block has threads).
inline const std::vector<Geom> kGeoms = {
    {1, 3, 15, false},   {1, 3, 15, true},    {2, 1, 9, false},   {2, 1, 9, true},    {4, 5, 49, false},
    {4, 5, 49, true},    {8, 37, 1, true},    {3, 70, 25, false}, {3, 70, 25, true},  {16, 64, 64, false},
    {16, 64, 64, true},  {3, 2, 4099, false}, {300, 2, 49, false}, {6, 37, 97, true}, {1001, 3, 1, false},
    {5, 24, 7, true},    {2, 2560, 3, true},
};

// The op tests' shapes: (N, C, H, W) in both layouts, (N, C) and (N, C, L), C off the pack width.
struct OpShape {
  Shape shape;
  MemoryFormat fmt;
};
inline const std::vector<OpShape> kOpShapes = {
    {{1, 3, 3, 5}, MemoryFormat::contiguous}, {{1, 3, 3, 5}, MemoryFormat::channels_last},
    {{2, 5, 7, 7}, MemoryFormat::contiguous}, {{2, 5, 7, 7}, MemoryFormat::channels_last},
    {{8, 37}, MemoryFormat::contiguous},      {{3, 4, 11}, MemoryFormat::contiguous},
    {{4, 40, 6, 6}, MemoryFormat::channels_last},
};

// A device workspace of `bytes`, every byte 0xFF (NaN in any float view).
inline Tensor workspace(size_t bytes) { return Tensor::full({int64_t(bytes)}, 255.0, DType::u8).to(gpu()); }

inline std::string glabel(const char* what, DType t, const Geom& g) {
  return std::string(what) + " " + dtype_name(t) + " N=" + std::to_string(g.N) + " C=" + std::to_string(g.C) +
         " S=" + std::to_string(g.S) + (g.nhwc ? " NHWC" : " NCHW");
}

// Calls f(R{}) with the CPU reference's compute type for dtype t.
template <typename F>
void with_ref_type(DType t, F f) {
  if (ref_dtype(t) == DType::f64) f(double{});
  else f(float{});
}

// Note [Running statistics of any dtype]
// The running statistics' dtype is dispatched apart from x's (WriteStats<A, R> and
// eval_stats_kernel<A, R> in kernels/cuda/batch_norm.cu), so the launchers that read or write
// them are run with every float dtype for every float x. Their tolerance is the wider of the
// statistics' own (computed in float, or double for an f64 x: gpu_tol_for(ref_dtype(t)))
// and one rounding to the running dtype r (gpu_tol_for(r)).
inline Tol running_tol(DType t, DType r) {
  const Tol a = gpu_tol_for(ref_dtype(t)), b = gpu_tol_for(r);
  return Tol{std::max(a.atol, b.atol), std::max(a.rtol, b.rtol)};
}

// The host's running update, in double: v = (1 - momentum) v + momentum s per channel, with
// the unbiased variance var * M / (M - 1) (var biased, over M values). rm, rv: the values
// before (as stored in the running dtype), updated in place.
inline void update_running(std::vector<double>& rm, std::vector<double>& rv, const std::vector<double>& mean,
                           const std::vector<double>& var, double M, double momentum) {
  for (size_t c = 0; c < rm.size(); ++c) {
    rm[c] = (1 - momentum) * rm[c] + momentum * mean[c];
    rv[c] = (1 - momentum) * rv[c] + momentum * var[c] * M / (M - 1);
  }
}

template <typename R>
R* ptr_or_null(const Tensor& t, bool on) {
  return on ? t.data<R>() : nullptr;
}

// The relu's bits for outputs y (Note [Relu mask bits] in kernels/cuda/batch_norm.h), built
// on the host from y's values in dtype t: bit k of byte i / W set when y[i] > 0, W = 16 / size.
inline std::vector<uint8_t> mask_bits(const Tensor& y, DType t) {
  const std::vector<double> v = y.to_vector<double>();
  const size_t W = 16 / dtype_size(t);
  std::vector<uint8_t> bits((v.size() + W - 1) / W, 0);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] > 0) bits[i / W] = uint8_t(bits[i / W] | (1u << (i % W)));
  return bits;
}
inline Tensor mask_on_gpu(const std::vector<uint8_t>& bits) {
  Tensor host = Tensor::empty({int64_t(bits.size())}, DType::u8);
  std::copy(bits.begin(), bits.end(), host.data<uint8_t>());
  return host.to(gpu());
}
inline std::vector<uint8_t> bits_of(const Tensor& m) {
  const Tensor h = m.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

// v64's n values on the GPU as dtype t, one element into a buffer of n + 1: a pointer that is
// not 16-byte aligned, which sends the kernels down their scalar path.
struct Shifted {
  Tensor buf;
  void* ptr;
};
inline Shifted shifted(const Tensor& v64, DType t) {
  std::vector<double> v = v64.to_vector<double>();
  v.insert(v.begin(), 0.0);
  const int64_t n = int64_t(v.size());
  Tensor buf = to_gpu(Tensor::from_vector(v, {n}), t);
  return {buf, static_cast<char*>(buf.raw_data()) + dtype_size(t)};
}
inline std::vector<double> unshift(const Shifted& s) {
  std::vector<double> v = s.buf.to_vector<double>();
  return std::vector<double>(v.begin() + 1, v.end());
}

// The CPU op's backward, with the relu's mask taken from the GPU's output: an element within
// rounding of 0 may fall on either side of it on the two devices, which would change its
// gradient from dy to 0. dz = dy where y_gpu > 0, then the unfused CPU batch_norm's backward.
struct RefGrads {
  Tensor dx, dw, db, dz;
};
// The CPU batch_norm's gradients for the incoming gradient dz (x's format), dz returned with them.
inline RefGrads batch_norm_grads(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                                 bool training, const Tensor& dz) {
  Tensor xl = x.clone().set_requires_grad(true), wl, bl;
  if (w.defined()) wl = w.clone().set_requires_grad(true), bl = b.clone().set_requires_grad(true);
  batch_norm(xl, wl, bl, rm.clone(), rv.clone(), training).backward(dz);
  return {xl.grad(), wl.defined() ? wl.grad() : Tensor(), bl.defined() ? bl.grad() : Tensor(), dz};
}
inline RefGrads reference_grads(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                                bool training, const Tensor& y_gpu, const Tensor& dy) {
  const std::vector<double> yv = y_gpu.to_vector<double>();
  std::vector<double> dz = dy.to_vector<double>();
  for (size_t i = 0; i < dz.size(); ++i)
    if (!(yv[i] > 0)) dz[i] = 0;
  return batch_norm_grads(x, w, b, rm, rv, training,
                          in_fmt(Tensor::from_vector(dz, dy.shape()).to(x.dtype()), x.format()));
}

}  // namespace rt::cuda_test
