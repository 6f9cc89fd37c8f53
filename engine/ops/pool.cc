// Pooling: max_pool2d (PyTorch's output-size rule, ceil_mode included), adaptive average
// pooling and the global average pool of a ResNet head. Kernels: kernels/cpu/pool.cc and,
// for CUDA tensors (f32, f64, bf16, f16), kernels/cuda/pool.cu.
#include "kernels/cpu/pool.h"
#include "kernels/cuda/pool.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the
// input or its left padding.
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  // Division rounding toward -inf (C++ rounds toward zero): a window that does not fit
  // gives a non-positive size, which the caller reports.
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// The CPU computes in f32/f64; CUDA also takes bf16/f16 storage (computing in f32).
void check_image(const Tensor& x, const char* op) {
  check_ndim(x, 4, op, "input");
  if (!x.device().is_cuda()) return check_float(x, op, "input");
  RT_CHECK(is_floating(x.dtype()), op, ": argument 'input' must be f32, f64, bf16 or f16, got ", x.str());
}

cuda::Pool2dGeom on_cuda(const cpu::Pool2dGeom& g) {
  return {g.N, g.C, g.H, g.W, g.HO, g.WO, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.nhwc};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* op = "max_pool2d";
  check_image(x, op);
  RT_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 &&
               p.dilation_w > 0,
           op, ": kernel, stride and dilation must be positive");
  RT_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2, op,
           ": padding (", p.pad_h, ", ", p.pad_w, ") must be between 0 and half the kernel size (", p.kernel_h, ", ",
           p.kernel_w, ")");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t HO = pool_out(H, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h, p.ceil_mode);
  const int64_t WO = pool_out(W, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w, p.ceil_mode);
  RT_CHECK(HO > 0 && WO > 0, op, ": input ", x.str(), " is too small for kernel (", p.kernel_h, ", ", p.kernel_w,
           "): the output would be ", HO, "x", WO);
  const cpu::Pool2dGeom g{N, C, H, W, HO, WO, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                          p.dilation_h, p.dilation_w, x.format() == MemoryFormat::channels_last};
  // Cost: a comparison per tap; bytes: x, y and the i64 argmax; back: dy, argmax, dx.
  const auto cost = [&] {
    const double out = double(N * C * HO * WO), xb = ops::nbytes_of(x.numel(), x.dtype());
    const double yb = ops::nbytes_of(N * C * HO * WO, x.dtype()), ib = out * 8;
    return prof::OpCost{{out * p.kernel_h * p.kernel_w, xb + yb + ib}, {out, yb + ib + xb}};
  };
  RT_PROFILE_OP(op, cost(), &x);
  Tensor y = Tensor::empty({N, C, HO, WO}, x.dtype(), x.device(), x.format());
  Tensor idx = Tensor::empty({N, C, HO, WO}, DType::i64, x.device(), x.format());
  if (x.device().is_cuda()) {
    cuda::max_pool2d_forward(on_cuda(g), x.dtype(), x.raw_data(), y.raw_data(), idx.data<int64_t>(), ops::stream_of(x));
    record(op, y, {x}, [g, idx, xs = x.shape(), fmt = x.format()](const Tensor& gy, const std::vector<bool>&) {
      const Tensor dy = ops::in_format(gy, fmt);
      Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device(), fmt);
      cuda::max_pool2d_backward(on_cuda(g), dy.dtype(), dy.raw_data(), idx.data<int64_t>(), dx.raw_data(),
                                ops::stream_of(dy));
      return std::vector<Tensor>{dx};
    });
    return y;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::max_pool2d_forward<T>(g, x.data<T>(), y.data<T>(), idx.data<int64_t>());
  });
  record(op, y, {x}, [g, idx, xs = x.shape(), fmt = x.format()](const Tensor& gy, const std::vector<bool>&) {
    const Tensor dy = ops::in_format(gy, fmt);
    Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device(), fmt);
    ops::dispatch_float(dy.dtype(), "max_pool2d backward", [&](auto z) {
      using T = decltype(z);
      cpu::max_pool2d_backward<T>(g, dy.data<T>(), idx.data<int64_t>(), dx.data<T>());
    });
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, int out_h, int out_w) {
  const char* op = "adaptive_avg_pool2d";
  check_image(x, op);
  RT_CHECK(out_h > 0 && out_w > 0, op, ": output size must be positive, got ", out_h, "x", out_w);
  RT_CHECK(x.size(2) > 0 && x.size(3) > 0, op, ": empty input ", x.str());
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const cpu::Pool2dGeom g{N, C, H, W, out_h, out_w, 0, 0, 0, 0, 0, 0, 0, 0, x.format() == MemoryFormat::channels_last};
  // Cost: an add per input element; bytes: x and y, back dy and dx.
  const auto cost = [&] {
    const double xb = ops::nbytes_of(x.numel(), x.dtype()), yb = ops::nbytes_of(N * C * out_h * out_w, x.dtype());
    return prof::OpCost{{double(x.numel()), xb + yb}, {double(x.numel()), xb + yb}};
  };
  RT_PROFILE_OP(op, cost(), &x);
  Tensor y = Tensor::empty({N, C, out_h, out_w}, x.dtype(), x.device(), x.format());
  if (x.device().is_cuda()) {
    cuda::adaptive_avg_pool2d_forward(on_cuda(g), x.dtype(), x.raw_data(), y.raw_data(), ops::stream_of(x));
    record(op, y, {x}, [g, xs = x.shape(), fmt = x.format()](const Tensor& gy, const std::vector<bool>&) {
      const Tensor dy = ops::in_format(gy, fmt);
      Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device(), fmt);
      cuda::adaptive_avg_pool2d_backward(on_cuda(g), dy.dtype(), dy.raw_data(), dx.raw_data(), ops::stream_of(dy));
      return std::vector<Tensor>{dx};
    });
    return y;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::adaptive_avg_pool2d_forward<T>(g, x.data<T>(), y.data<T>());
  });
  record(op, y, {x}, [g, xs = x.shape(), fmt = x.format()](const Tensor& gy, const std::vector<bool>&) {
    const Tensor dy = ops::in_format(gy, fmt);
    Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device(), fmt);
    ops::dispatch_float(dy.dtype(), "adaptive_avg_pool2d backward", [&](auto z) {
      using T = decltype(z);
      cpu::adaptive_avg_pool2d_backward<T>(g, dy.data<T>(), dx.data<T>());
    });
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor global_avg_pool(const Tensor& x) { return flatten(adaptive_avg_pool2d(x, 1, 1), 1); }

}  // namespace rt
