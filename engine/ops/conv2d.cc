// conv2d: checks, output geometry, dispatch, backward. Kernel: kernels/cpu/conv2d.cc.
#include "kernels/cpu/conv2d.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const char* op = "conv2d";
  check_ndim(x, 4, op, "input");
  check_ndim(weight, 4, op, "weight");
  check_float(x, op, "input");
  check_same_dtype(x, weight, op);
  check_same_device(x, weight, op);
  check_cpu_only(x, op);
  RT_CHECK(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0 && p.pad_h >= 0 && p.pad_w >= 0 &&
               p.groups > 0,
           op, ": stride and dilation must be positive and padding non-negative, got stride (", p.stride_h, ", ",
           p.stride_w, ") padding (", p.pad_h, ", ", p.pad_w, ") dilation (", p.dilation_h, ", ", p.dilation_w,
           ") groups ", p.groups);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = weight.size(0), KH = weight.size(2), KW = weight.size(3);
  RT_CHECK(C == weight.size(1) * p.groups, op, ": input has ", C, " channels but weight ", weight.str(), " with groups=",
           p.groups, " expects ", weight.size(1) * p.groups);
  RT_CHECK(O % p.groups == 0, op, ": ", O, " output channels are not divisible by groups=", p.groups);
  if (bias.defined()) {
    check_same_dtype(x, bias, op);
    check_same_device(x, bias, op);
    RT_CHECK(bias.shape() == Shape{O}, op, ": bias must be [", O, "], got ", bias.str());
  }
  const int64_t HO = (H + 2 * p.pad_h - p.dilation_h * (KH - 1) - 1) / p.stride_h + 1;
  const int64_t WO = (W + 2 * p.pad_w - p.dilation_w * (KW - 1) - 1) / p.stride_w + 1;
  RT_CHECK(H + 2 * p.pad_h >= p.dilation_h * (KH - 1) + 1 && W + 2 * p.pad_w >= p.dilation_w * (KW - 1) + 1, op,
           ": kernel ", KH, "x", KW, " (dilation ", p.dilation_h, ", ", p.dilation_w, ") is larger than the padded input ",
           H + 2 * p.pad_h, "x", W + 2 * p.pad_w);

  const cpu::Conv2dGeom g{N, C, H, W, O, KH, KW, HO, WO, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                          p.dilation_h, p.dilation_w, p.groups, x.format() == MemoryFormat::channels_last,
                          weight.format() == MemoryFormat::channels_last};
  Tensor y = Tensor::empty({N, O, HO, WO}, x.dtype(), x.device(), x.format());
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::conv2d_forward<T>(g, x.data<T>(), weight.data<T>(), bias.defined() ? bias.data<T>() : nullptr, y.data<T>());
  });

  // The weight gradient needs x, the input gradient needs the weight: keep only those.
  const Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  const Tensor saved_w = x.requires_grad() ? weight.detach() : Tensor();
  record(op, y, {x, weight, bias}, [g, saved_x, saved_w, wfmt = weight.format(), wshape = weight.shape(),
                                    xshape = x.shape(), xfmt = x.format()](const Tensor& gy, const std::vector<bool>& needs) {
    const Tensor dy = ops::in_format(gy, xfmt);
    Tensor dx = needs[0] ? Tensor::empty(xshape, dy.dtype(), dy.device(), xfmt) : Tensor();
    Tensor dw = needs[1] ? Tensor::empty(wshape, dy.dtype(), dy.device(), wfmt) : Tensor();
    Tensor db = needs[2] ? Tensor::empty({g.O}, dy.dtype(), dy.device()) : Tensor();
    ops::dispatch_float(dy.dtype(), "conv2d backward", [&](auto z) {
      using T = decltype(z);
      cpu::conv2d_backward<T>(g, saved_x.defined() ? saved_x.data<T>() : nullptr,
                              saved_w.defined() ? saved_w.data<T>() : nullptr, dy.data<T>(),
                              dx.defined() ? dx.data<T>() : nullptr, dw.defined() ? dw.data<T>() : nullptr,
                              db.defined() ? db.data<T>() : nullptr);
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

}  // namespace rt
