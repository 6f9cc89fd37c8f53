// Elementwise ops: binary (add, sub, mul, add_relu), affine, unary (relu, square, sqrt),
// relu/sqrt backward, axpy, and the broadcast of a device scalar.
//
// Kernels first, then launchers. Every op is a functor over the compute type A (float, or
// double for f64) run by one of two grid-stride kernels: map_vec moves 16-byte packs (4
// floats, 2 doubles, 8 bf16/f16) when every pointer is 16-byte aligned and n is a multiple
// of the pack width; map_scalar handles everything else. In-place use (y == a) is allowed:
// each element is read before it is written by the same thread, so no __restrict__.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"

namespace rt::cuda {
namespace {

using detail::acc_t;
using detail::from_acc;
using detail::Pack;
using detail::to_acc;

// ---- kernels ---------------------------------------------------------------------------

template <typename T, bool HasB, typename Op>
__global__ void map_scalar(int64_t n, const T* a, const T* b, T* y, Op op) {
  using A = acc_t<T>;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const A bv = HasB ? to_acc(b[i]) : A(0);
    y[i] = from_acc<T>(op(to_acc(a[i]), bv));
  }
}

template <typename T, bool HasB, typename Op>
__global__ void map_vec(int64_t npacks, const Pack<T>* a, const Pack<T>* b, Pack<T>* y, Op op) {
  using A = acc_t<T>;
  constexpr int W = Pack<T>::kWidth;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < npacks; p += int64_t(gridDim.x) * blockDim.x) {
    const Pack<T> pa = a[p];
    Pack<T> pb;
    if constexpr (HasB) pb = b[p];
    Pack<T> py;
#pragma unroll
    for (int k = 0; k < W; ++k) py.v[k] = from_acc<T>(op(to_acc(pa.v[k]), HasB ? to_acc(pb.v[k]) : A(0)));
    y[p] = py;
  }
}

template <typename T>
__global__ void fill_from_scalar_kernel(int64_t n, const T* scalar, acc_t<T> scale, T* y) {
  const T v = from_acc<T>(to_acc(scalar[0]) * scale);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = v;
}

// The ops, over the compute type. NaN propagates through relu like std::max(x, 0) on the CPU.
template <typename A> struct AddOp { __device__ A operator()(A a, A b) const { return a + b; } };
template <typename A> struct SubOp { __device__ A operator()(A a, A b) const { return a - b; } };
template <typename A> struct MulOp { __device__ A operator()(A a, A b) const { return a * b; } };
template <typename A> struct AddReluOp {
  __device__ A operator()(A a, A b) const { const A s = a + b; return s < A(0) ? A(0) : s; }
};
template <typename A> struct ReluOp { __device__ A operator()(A x, A) const { return x < A(0) ? A(0) : x; } };
template <typename A> struct SquareOp { __device__ A operator()(A x, A) const { return x * x; } };
template <typename A> struct SqrtOp { __device__ A operator()(A x, A) const { return detail::dev_sqrt(x); } };
template <typename A> struct AffineOp {
  A s, t;
  __device__ A operator()(A x, A) const { return x * s + t; }
};
template <typename A> struct ReluBackwardOp {  // a = y, b = dy
  __device__ A operator()(A y, A dy) const { return y > A(0) ? dy : A(0); }
};
template <typename A> struct SqrtBackwardOp {  // a = y, b = dy
  __device__ A operator()(A y, A dy) const { return dy / (A(2) * y); }
};
template <typename A> struct AxpyOp {  // a = a, b = b
  A alpha;
  __device__ A operator()(A a, A b) const { return a + alpha * b; }
};

// ---- launchers -------------------------------------------------------------------------

constexpr int kThreads = 256;

template <typename T, bool HasB, typename Op>
void launch_map(int64_t n, const T* a, const T* b, T* y, Op op, cudaStream_t s) {
  RT_CHECK(n >= 0, "elementwise: negative element count ", n);
  if (n == 0) return;
  RT_CHECK(a != nullptr && y != nullptr && (!HasB || b != nullptr), "elementwise: null pointer");
  constexpr int W = Pack<T>::kWidth;
  if (n % W == 0 && detail::aligned16(a) && detail::aligned16(b) && detail::aligned16(y)) {
    const int64_t np = n / W;
    map_vec<T, HasB, Op><<<detail::grid_for(np, kThreads), kThreads, 0, s>>>(
        np, reinterpret_cast<const Pack<T>*>(a), reinterpret_cast<const Pack<T>*>(b), reinterpret_cast<Pack<T>*>(y), op);
  } else {
    map_scalar<T, HasB, Op><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(n, a, b, y, op);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void binary(Binary op, DType t, int64_t n, const void* a, const void* b, void* y, cudaStream_t s) {
  detail::dispatch_floating(t, "binary", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto pa = static_cast<const T*>(a);
    auto pb = static_cast<const T*>(b);
    auto py = static_cast<T*>(y);
    switch (op) {
      case Binary::add: return launch_map<T, true>(n, pa, pb, py, AddOp<A>{}, s);
      case Binary::sub: return launch_map<T, true>(n, pa, pb, py, SubOp<A>{}, s);
      case Binary::mul: return launch_map<T, true>(n, pa, pb, py, MulOp<A>{}, s);
      case Binary::add_relu: return launch_map<T, true>(n, pa, pb, py, AddReluOp<A>{}, s);
    }
    RT_FAIL("binary: unknown op");
  });
}

void affine(DType t, int64_t n, const void* a, double s, double sh, void* y, cudaStream_t st) {
  detail::dispatch_floating(t, "affine", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    launch_map<T, false>(n, static_cast<const T*>(a), nullptr, static_cast<T*>(y), AffineOp<A>{A(s), A(sh)}, st);
  });
}

void unary(Unary op, DType t, int64_t n, const void* x, void* y, cudaStream_t s) {
  detail::dispatch_floating(t, "unary", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto px = static_cast<const T*>(x);
    auto py = static_cast<T*>(y);
    switch (op) {
      case Unary::relu: return launch_map<T, false>(n, px, nullptr, py, ReluOp<A>{}, s);
      case Unary::square: return launch_map<T, false>(n, px, nullptr, py, SquareOp<A>{}, s);
      case Unary::sqrt: return launch_map<T, false>(n, px, nullptr, py, SqrtOp<A>{}, s);
    }
    RT_FAIL("unary: unknown op");
  });
}

void relu_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s) {
  detail::dispatch_floating(t, "relu_backward", [&](auto z) {
    using T = decltype(z);
    launch_map<T, true>(n, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx),
                        ReluBackwardOp<acc_t<T>>{}, s);
  });
}

void sqrt_backward(DType t, int64_t n, const void* y, const void* dy, void* dx, cudaStream_t s) {
  detail::dispatch_floating(t, "sqrt_backward", [&](auto z) {
    using T = decltype(z);
    launch_map<T, true>(n, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx),
                        SqrtBackwardOp<acc_t<T>>{}, s);
  });
}

void axpy(DType t, int64_t n, double alpha, const void* b, void* a, cudaStream_t s) {
  detail::dispatch_floating(t, "axpy", [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    launch_map<T, true>(n, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(a),
                        AxpyOp<A>{A(alpha)}, s);
  });
}

void fill_from_scalar(DType t, int64_t n, const void* scalar, double scale, void* y, cudaStream_t s) {
  RT_CHECK(n >= 0, "fill_from_scalar: negative element count ", n);
  RT_CHECK(scalar != nullptr && (n == 0 || y != nullptr), "fill_from_scalar: null pointer");
  if (n == 0) return;
  detail::dispatch_floating(t, "fill_from_scalar", [&](auto z) {
    using T = decltype(z);
    fill_from_scalar_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, s>>>(
        n, static_cast<const T*>(scalar), acc_t<T>(scale), static_cast<T*>(y));
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace rt::cuda
