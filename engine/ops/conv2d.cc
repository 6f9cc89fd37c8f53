// conv2d: checks, output geometry, dispatch, backward. Kernels: kernels/cpu/conv2d.cc and,
// on CUDA, cuDNN (kernels/cuda/cudnn_conv.cu) with the bias kernels of kernels/cuda/conv2d.cu.
#include "kernels/cpu/conv2d.h"
#include "kernels/cuda/conv2d.h"

#include <map>
#include <mutex>

#include "engine/memory_tag.h"
#include "engine/ops.h"
#include "engine/ops/conv2d_parts.h"
#include "engine/ops/op_util.h"

namespace rt {

using ops::data_or_null;
using ops::raw_or_null;
namespace ops {

// Note [Conv workspace]
// One cuDNN workspace per device, a u8 tensor from the device's allocator, replaced by a
// larger one when a plan needs more. It is used on the device's current stream only; a
// replaced buffer returns to the allocator's cache of that stream, so work still queued on
// it finishes first (Note [Streams and blocks]). Leaked at exit so it never outlives the
// allocator. One stream per device today: concurrent convolutions on two streams would need
// a workspace each.
void* conv_workspace(Device d, size_t bytes) {
  if (bytes == 0) return nullptr;
  static std::mutex mu;
  static auto* buffers = new std::map<int, Tensor>();
  std::lock_guard<std::mutex> g(mu);
  Tensor& ws = (*buffers)[d.index];
  if (!ws.defined() || ws.nbytes() < bytes) {
    ws = Tensor();  // return the old buffer before asking for the larger one
    const MemoryTagScope tag(MemoryTag::workspace);
    ws = Tensor::empty({int64_t(bytes)}, DType::u8, d);
  }
  return ws.raw_data();
}

cuda::ConvKey conv_key(cuda::ConvKind kind, const cpu::Conv2dGeom& g, const Tensor& like, const void* x, const void* w,
                       const void* y, bool accumulate) {
  cuda::ConvKey k;
  k.kind = kind;
  k.N = g.N, k.C = g.C, k.H = g.H, k.W = g.W, k.O = g.O, k.KH = g.KH, k.KW = g.KW;
  k.sh = g.sh, k.sw = g.sw, k.ph = g.ph, k.pw = g.pw, k.dh = g.dh, k.dw = g.dw, k.groups = g.groups;
  k.dtype = like.dtype();
  k.nhwc = g.nhwc;
  k.align = cuda::pointer_alignment({x, w, y});
  k.allow_tf32 = cuda::cudnn_allow_tf32();
  k.benchmark = cuda::cudnn_benchmark();
  k.accumulate = accumulate;
  k.device = like.device().index;
  return k;
}

void cuda_conv(cuda::ConvKind kind, const cpu::Conv2dGeom& g, const Tensor& like, const void* x, const void* w,
               const void* y, bool accumulate) {
  const cuda::ConvKey k = conv_key(kind, g, like, x, w, y, accumulate);
  const cudaStream_t s = ops::stream_of(like);
  const Device d = like.device();
  const cuda::ConvBenchArgs bench{x, w, y, s, [d](size_t bytes) { return conv_workspace(d, bytes); }};
  const cuda::ConvPlan& plan = cuda::conv_plan(k, k.benchmark ? &bench : nullptr);
  void* ws = conv_workspace(d, cuda::conv_workspace_bytes(plan));
  cuda::conv_execute(plan, x, w, y, ws, s);
}

cpu::Conv2dGeom conv2d_geom(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Conv2dParams& p) {
  check_ndim(x, 4, op, "input");
  check_ndim(weight, 4, op, "weight");
  // The CPU computes in f32/f64; cuDNN also takes bf16/f16 (fp32 accumulation).
  if (x.device().is_cuda())
    RT_CHECK(is_floating(x.dtype()), op, ": argument 'input' must be f32, f64, bf16 or f16, got ", x.str());
  else
    check_float(x, op, "input");
  check_same_dtype(x, weight, op);
  check_same_device(x, weight, op);
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
  return cpu::Conv2dGeom{N, C, H, W, O, KH, KW, HO, WO, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                         p.dilation_h, p.dilation_w, p.groups, x.format() == MemoryFormat::channels_last,
                         weight.format() == MemoryFormat::channels_last};
}

prof::OpCost conv2d_cost(const cpu::Conv2dGeom& g, DType t) {
  // A multiply-add per output element per (C/groups)*KH*KW taps; the backward computes dx and
  // dw, each as many; bytes: x, w, y once each forward, dy twice and x, w, dx, dw back.
  const double macs = double(g.N * g.O * g.HO * g.WO) * double(g.C / g.groups * g.KH * g.KW);
  const double xb = nbytes_of(g.N * g.C * g.H * g.W, t), wb = nbytes_of(g.O * g.C / g.groups * g.KH * g.KW, t),
               yb = nbytes_of(g.N * g.O * g.HO * g.WO, t);
  return prof::OpCost{{2 * macs, xb + wb + yb}, {4 * macs, 2 * yb + 2 * xb + 2 * wb}};
}

}  // namespace ops
namespace {
using ops::conv_key;
using ops::conv_workspace;
using ops::cuda_conv;

// The forward with y's channel sums in *sums, when a fused engine computes them
// (Note [Statistics from the convolution] in engine/ops/batch_norm.cc); false, nothing run,
// when none does or the convolution is not of the kind cuDNN fuses.
bool cuda_conv_with_sums(const cpu::Conv2dGeom& g, const Tensor& x, const Tensor& wk, const Tensor& y,
                         ChannelSums* sums) {
  if (!g.nhwc || g.groups != 1 || !(is_floating(x.dtype()) && x.dtype() != DType::f64)) return false;
  cuda::ConvKey k = conv_key(cuda::ConvKind::forward, g, x, x.raw_data(), wk.raw_data(), y.raw_data(), false);
  k.benchmark = false;  // fused keys take the first engine that runs them (Note [Fused convolutions])
  k.genstats = true;
  const cuda::ConvPlan* plan = cuda::conv_fused_plan(k);
  if (!plan) return false;
  Tensor sum = Tensor::empty({g.O}, DType::f32, x.device()), sqsum = Tensor::empty({g.O}, DType::f32, x.device());
  cuda::ConvFusedArgs f;
  f.sum = sum.raw_data(), f.sqsum = sqsum.raw_data();
  void* ws = conv_workspace(x.device(), cuda::conv_workspace_bytes(*plan));
  cuda::conv_execute(*plan, x.raw_data(), wk.raw_data(), y.raw_data(), ws, ops::stream_of(x), f);
  sums->sum = std::move(sum), sums->sqsum = std::move(sqsum);
  return true;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  return conv2d(x, weight, bias, p, nullptr);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p, ChannelSums* sums) {
  const char* op = "conv2d";
  if (sums) *sums = ChannelSums{};
  const cpu::Conv2dGeom g = ops::conv2d_geom(op, x, weight, bias, p);
  RT_PROFILE_OP(op, ops::conv2d_cost(g, x.dtype()), &x, &weight);
  // cuDNN takes the weight in x's layout (OIHW with NCHW, OHWI with NHWC).
  const bool on_cuda = x.device().is_cuda();
  const Tensor wk = on_cuda ? ops::in_format(weight, x.format()) : weight;
  Tensor y = Tensor::empty({g.N, g.O, g.HO, g.WO}, x.dtype(), x.device(), x.format());
  if (on_cuda) {
    if (!(sums && !bias.defined() && cuda_conv_with_sums(g, x, wk, y, sums)))
      cuda_conv(cuda::ConvKind::forward, g, x, x.raw_data(), wk.raw_data(), y.raw_data());
    if (bias.defined())
      cuda::conv_bias_add(x.dtype(), g.N, g.O, g.HO * g.WO, g.nhwc, y.raw_data(), bias.raw_data(), ops::stream_of(x));
  } else {
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::conv2d_forward<T>(g, x.data<T>(), weight.data<T>(), data_or_null<T>(bias), y.data<T>());
    });
  }

  // The weight gradient needs x, the input gradient needs the weight: keep only those.
  const Tensor saved_x = weight.requires_grad() ? x.detach() : Tensor();
  const Tensor saved_w = x.requires_grad() ? wk.detach() : Tensor();
  record(op, y, {x, weight, bias}, [g, saved_x, saved_w, wfmt = weight.format(), wshape = weight.shape(),
                                    xshape = x.shape(), xfmt = x.format()](const Tensor& gy, const std::vector<bool>& needs) {
    const Tensor dy = ops::in_format(gy, xfmt);
    const bool on_cuda = dy.device().is_cuda();
    // On CUDA, dx is added into the gradient x already has when autograd allows it
    // (Note [Gradients accumulated in place] in engine/autograd.h): a residual block's input
    // gets its two gradients without a separate add. Benchmark mode times its candidates on
    // the output, so it keeps the separate add.
    Tensor dx;
    bool accumulate = false;
    if (needs[0] && on_cuda && !cuda::cudnn_benchmark()) {
      dx = accumulated_grad(0);
      accumulate = dx.defined() && dx.dtype() == dy.dtype() && dx.format() == xfmt && dx.device() == dy.device() &&
                   dx.shape() == xshape;
      if (!accumulate) dx = Tensor();
    }
    if (needs[0] && !dx.defined()) dx = Tensor::empty(xshape, dy.dtype(), dy.device(), xfmt);
    // On CUDA dw is computed in x's layout (cuDNN's), then converted to the weight's.
    Tensor dw = needs[1] ? Tensor::empty(wshape, dy.dtype(), dy.device(), on_cuda ? xfmt : wfmt) : Tensor();
    Tensor db = needs[2] ? Tensor::empty({g.O}, dy.dtype(), dy.device()) : Tensor();
    if (on_cuda) {
      const cudaStream_t s = ops::stream_of(dy);
      if (dx.defined())
        cuda_conv(cuda::ConvKind::backward_data, g, dy, dx.raw_data(), saved_w.raw_data(), dy.raw_data(), accumulate);
      if (dw.defined()) {
        cuda_conv(cuda::ConvKind::backward_filter, g, dy, saved_x.raw_data(), dw.raw_data(), dy.raw_data());
        dw = dw.to(wfmt);
      }
      if (db.defined())
        cuda::conv_bias_grad(dy.dtype(), g.N, g.O, g.HO * g.WO, g.nhwc, dy.raw_data(), db.raw_data(), s);
      return std::vector<Tensor>{dx, dw, db};
    }
    ops::dispatch_float(dy.dtype(), "conv2d backward", [&](auto z) {
      using T = decltype(z);
      cpu::conv2d_backward<T>(g, data_or_null<T>(saved_x),
                              data_or_null<T>(saved_w), dy.data<T>(),
                              data_or_null<T>(dx), data_or_null<T>(dw),
                              data_or_null<T>(db));
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

}  // namespace rt
