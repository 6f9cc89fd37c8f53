// Elementwise ops: add, sub, mul, scalar affine, relu, add_relu, square, sqrt; in-place
// add_/mul_ for gradient accumulation and optimizers.
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.cuh"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

using cpu::Binary;
using cpu::Unary;

// The CUDA enums list the same ops in the same order.
cuda::Binary on_cuda(Binary k) { return static_cast<cuda::Binary>(static_cast<int>(k)); }
cuda::Unary on_cuda(Unary k) { return static_cast<cuda::Unary>(static_cast<int>(k)); }
static_assert(int(Binary::add_relu) == int(cuda::Binary::add_relu) && int(Unary::sqrt) == int(cuda::Unary::sqrt));

// Checks a binary op's operands; returns b in a's memory format.
Tensor check_binary(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  RT_CHECK(a.shape() == b.shape(), op, ": shapes differ: ", a.str(), " and ", b.str(),
           " (ringtape does not broadcast elementwise ops)");
  check_same_dtype(a, b, op);
  check_same_device(a, b, op);
  return ops::in_format(b, a.format());
}

Tensor binary_raw(Binary kind, const Tensor& a, const Tensor& b, const char* op) {
  Tensor bb = check_binary(a, b, op);
  Tensor y = ops::empty_like(a);
  if (a.device().is_cuda()) {
    cuda::binary(on_cuda(kind), a.dtype(), a.numel(), a.raw_data(), bb.raw_data(), y.raw_data(), ops::stream_of(a));
    return y;
  }
  ops::dispatch_float(a.dtype(), op, [&](auto t) {
    using T = decltype(t);
    cpu::binary<T>(kind, a.numel(), a.data<T>(), bb.data<T>(), y.data<T>());
  });
  return y;
}

Tensor affine_raw(const Tensor& a, double s, double t, const char* op) {
  check_defined(a, op, "a");
  Tensor y = ops::empty_like(a);
  if (a.device().is_cuda()) {
    cuda::affine(a.dtype(), a.numel(), a.raw_data(), s, t, y.raw_data(), ops::stream_of(a));
    return y;
  }
  ops::dispatch_float(a.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::affine<T>(a.numel(), a.data<T>(), s, t, y.data<T>());
  });
  return y;
}

Tensor unary_raw(Unary kind, const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  Tensor y = ops::empty_like(x);
  if (x.device().is_cuda()) {
    cuda::unary(on_cuda(kind), x.dtype(), x.numel(), x.raw_data(), y.raw_data(), ops::stream_of(x));
    return y;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::unary<T>(kind, x.numel(), x.data<T>(), y.data<T>());
  });
  return y;
}

// dx = dy where y > 0.
Tensor relu_grad(const Tensor& y, const Tensor& g) {
  Tensor gg = ops::in_format(g, y.format());
  Tensor dx = ops::empty_like(y);
  if (y.device().is_cuda()) {
    cuda::relu_backward(y.dtype(), y.numel(), y.raw_data(), gg.raw_data(), dx.raw_data(), ops::stream_of(y));
    return dx;
  }
  ops::dispatch_float(y.dtype(), "relu backward", [&](auto z) {
    using T = decltype(z);
    cpu::relu_backward<T>(y.numel(), y.data<T>(), gg.data<T>(), dx.data<T>());
  });
  return dx;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("add", ops::elementwise_cost(a, 2, 1, 1), &a, &b);
  Tensor y = binary_raw(Binary::add, a, b, "add");
  record("add", y, {a, b}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g, g}; });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("sub", ops::elementwise_cost(a, 2, 1, 1), &a, &b);
  Tensor y = binary_raw(Binary::sub, a, b, "sub");
  record("sub", y, {a, b}, [](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{g, needs[1] ? mul(g, -1.0) : Tensor()};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("mul", ops::elementwise_cost(a, 2, 1, 1), &a, &b);
  Tensor y = binary_raw(Binary::mul, a, b, "mul");
  // d(a*b)/da needs b and vice versa: save each only if the other side needs a gradient.
  const Tensor sa = b.defined() && b.requires_grad() ? a.detach() : Tensor();
  const Tensor sb = a.defined() && a.requires_grad() ? b.detach() : Tensor();
  record("mul", y, {a, b}, [sa, sb](const Tensor& g, const std::vector<bool>& needs) {
    return std::vector<Tensor>{needs[0] ? mul(ops::in_format(g, sb.format()), sb) : Tensor(),
                               needs[1] ? mul(ops::in_format(g, sa.format()), sa) : Tensor()};
  });
  return y;
}

Tensor mul(const Tensor& a, double s) {
  RT_PROFILE_OP("mul_scalar", ops::elementwise_cost(a, 1, 1, 1), &a);
  Tensor y = affine_raw(a, s, 0.0, "mul");
  record("mul_scalar", y, {a}, [s](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{mul(g, s)}; });
  return y;
}

Tensor add(const Tensor& a, double s) {
  RT_PROFILE_OP("add_scalar", ops::elementwise_cost(a, 1, 1, 1), &a);
  Tensor y = affine_raw(a, 1.0, s, "add");
  record("add_scalar", y, {a}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
  return y;
}

Tensor relu(const Tensor& x) {
  RT_PROFILE_OP("relu", ops::elementwise_cost(x, 1, 1, 1, 2, 1, 1), &x);
  Tensor y = unary_raw(Unary::relu, x, "relu");
  record("relu", y, {x}, [y = y.detach()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{relu_grad(y, g)};
  });
  return y;
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("add_relu", ops::elementwise_cost(a, 2, 1, 2, 2, 1, 1), &a, &b);
  Tensor y = binary_raw(Binary::add_relu, a, b, "add_relu");
  record("add_relu", y, {a, b}, [y = y.detach()](const Tensor& g, const std::vector<bool>&) {
    Tensor d = relu_grad(y, g);
    return std::vector<Tensor>{d, d};
  });
  return y;
}

Tensor square(const Tensor& x) {
  RT_PROFILE_OP("square", ops::elementwise_cost(x, 1, 1, 1), &x);
  Tensor y = unary_raw(Unary::square, x, "square");
  record("square", y, {x}, [x = x.detach()](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{mul(mul(ops::in_format(g, x.format()), x), 2.0)};
  });
  return y;
}

Tensor sqrt(const Tensor& x) {
  RT_PROFILE_OP("sqrt", ops::elementwise_cost(x, 1, 1, 1, 2, 1, 2), &x);
  Tensor y = unary_raw(Unary::sqrt, x, "sqrt");
  record("sqrt", y, {x}, [y = y.detach()](const Tensor& g, const std::vector<bool>&) {
    // d sqrt(x) = g / (2 sqrt(x))
    Tensor gg = ops::in_format(g, y.format());
    Tensor dx = ops::empty_like(y);
    if (y.device().is_cuda()) {
      cuda::sqrt_backward(y.dtype(), y.numel(), y.raw_data(), gg.raw_data(), dx.raw_data(), ops::stream_of(y));
      return std::vector<Tensor>{dx};
    }
    ops::dispatch_float(y.dtype(), "sqrt backward", [&](auto z) {
      using T = decltype(z);
      const T* yp = y.data<T>();
      const T* gp = gg.data<T>();
      T* dp = dx.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) dp[i] = gp[i] / (T(2) * yp[i]);
    });
    return std::vector<Tensor>{dx};
  });
  return y;
}

void add_(Tensor a, const Tensor& b, double alpha) {
  RT_PROFILE_OP("add_", ops::elementwise_cost(a, 2, 1, 2), &a, &b);
  Tensor bb = check_binary(a, b, "add_");
  if (a.device().is_cuda()) {
    cuda::axpy(a.dtype(), a.numel(), alpha, bb.raw_data(), a.raw_data(), ops::stream_of(a));
    return;
  }
  ops::dispatch_float(a.dtype(), "add_", [&](auto z) {
    using T = decltype(z);
    cpu::axpy<T>(a.numel(), alpha, bb.data<T>(), a.data<T>());
  });
}

void mul_(Tensor a, double s) {
  RT_PROFILE_OP("mul_", ops::elementwise_cost(a, 1, 1, 1), &a);
  check_defined(a, "mul_", "a");
  if (a.device().is_cuda()) {
    cuda::affine(a.dtype(), a.numel(), a.raw_data(), s, 0.0, a.raw_data(), ops::stream_of(a));
    return;
  }
  ops::dispatch_float(a.dtype(), "mul_", [&](auto z) {
    using T = decltype(z);
    cpu::affine<T>(a.numel(), a.data<T>(), s, 0.0, a.data<T>());
  });
}

}  // namespace rt
