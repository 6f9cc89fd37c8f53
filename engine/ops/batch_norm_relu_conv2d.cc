// batch_norm_relu_conv2d: a batch norm and relu whose output only feeds a convolution, as one
// op: conv2d(batch_norm_relu(x, ...), conv_weight). On CUDA the convolution applies the
// normalisation as its prologue; kernels: cuDNN's runtime fusion (kernels/cuda/cudnn_conv.cu)
// and kernels/cuda/batch_norm.cu's coefficients and backward.
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/conv2d.h"

#include "engine/ops.h"
#include "engine/ops/batch_norm_parts.h"
#include "engine/ops/conv2d_parts.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// Note [Batch norm as the next convolution's prologue]
// In a bottleneck, relu(bn1(.)) and relu(bn2(.)) feed only conv2 and conv3 (a basic block's
// relu(bn1(.)) only conv2). Unfused, each writes its activation a = relu(bn(x)) in a pass
// that reads x, the convolution reads a, and a is kept for the weight gradient. cuDNN's
// runtime fusion instead applies x' = relu(x * scale + bias) while the convolution loads x
// (Note [Fused convolutions] in kernels/cuda/conv2d.h), scale = gamma * invstd and bias =
// beta - mean * scale per channel (f32, cuda::batch_norm_prologue_coefs): the apply pass
// and the stored activation disappear.
//   forward:  the statistics (from the previous convolution's sums:
//             Note [Statistics from the convolution] in engine/ops/batch_norm.cc), the
//             coefficients, then the convolution with the prologue (and the sums of its own
//             output for the batch norm after it);
//   backward: da = conv^T(dy, w) (cuDNN's backward data, as unfused); dw = corr(x', dy) by
//             the weight gradient with the same prologue; batch norm's two backward passes
//             with the relu's mask recomputed from x (cuda::batch_norm_backward_relu_prologue):
//             no mask is stored either.
// The recomputed mask must be the prologue's own test, x * scale + bias > 0 in f32 with one
// rounding per operation, not the apply pass's (x - mean) * invstd * gamma + beta, whose
// roundings differ: the two could disagree at the kink. The emulator's cuDNN rounds each
// operation as the recomputation does; a GPU's compiled engine may contract the multiply and
// the add into one FMA, and then an element within a rounding of the kink may be kept by one
// and not by the other (one element's gradient). Values differ from the composition by that
// formula's rounding only (x' is rounded once to the data's dtype either way).
// Where no engine fuses (the CPU, NCHW, f64, f32 without TF32, groups, SyncBN, or a graph
// that neither the forward's nor the weight gradient's engine takes) the op is the
// composition conv2d(batch_norm_relu(...)), exactly.

// Whether the prologue can serve at all (before asking cuDNN for plans).
bool prologue_applies(const Tensor& x, bool training, const std::shared_ptr<BatchNormSync>& sync,
                      const cpu::Conv2dGeom& cg) {
  return x.device().is_cuda() && cg.nhwc && cg.groups == 1 && is_floating(x.dtype()) && x.dtype() != DType::f64 &&
         !(training && sync);
}

// The plan key of the fused forward (`genstats`: also the output's sums) or weight gradient.
// Pointers that are the op's own fresh allocations (y, dw) and dy (made 16-byte aligned in the
// backward) count as aligned, so the backward finds the key the forward asked for.
cuda::ConvKey prologue_key(cuda::ConvKind kind, const cpu::Conv2dGeom& cg, const Tensor& x, const Tensor& wk,
                           bool genstats) {
  cuda::ConvKey k = ops::conv_key(kind, cg, x, x.raw_data(), kind == cuda::ConvKind::forward ? wk.raw_data() : nullptr,
                                  nullptr, false);
  k.benchmark = false;  // fused keys take the first engine that runs them (Note [Fused convolutions])
  k.prologue = k.prologue_relu = true;
  k.genstats = genstats;
  return k;
}

// The fused forward's and weight gradient's plans for x and the convolution's weight in
// cuDNN's layout wk, or none (fwd null) where the op runs as the composition.
struct ProloguePlans {
  const cuda::ConvPlan *fwd = nullptr, *wgrad = nullptr;
};
ProloguePlans prologue_plans(const Tensor& x, bool training, const std::shared_ptr<BatchNormSync>& sync,
                             const cpu::Conv2dGeom& cg, const Tensor& conv_weight, const Tensor& wk, bool genstats) {
  if (!prologue_applies(x, training, sync, cg)) return {};
  ProloguePlans r;
  r.fwd = cuda::conv_fused_plan(prologue_key(cuda::ConvKind::forward, cg, x, wk, genstats));
  if (grad_enabled() && conv_weight.requires_grad()) {
    r.wgrad = cuda::conv_fused_plan(prologue_key(cuda::ConvKind::backward_filter, cg, x, wk, false));
    if (!r.wgrad) r.fwd = nullptr;
  }
  return r;
}

}  // namespace

bool batch_norm_relu_conv2d_fuses(const Tensor& x, bool training, const std::shared_ptr<BatchNormSync>& sync,
                                  const Tensor& conv_weight, const Conv2dParams& p, bool conv_sums) {
  const cpu::Conv2dGeom cg = ops::conv2d_geom("batch_norm_relu_conv2d", x, conv_weight, Tensor(), p);
  if (!prologue_applies(x, training, sync, cg)) return false;
  const Tensor wk = ops::in_format(conv_weight, x.format());
  return prologue_plans(x, training, sync, cg, conv_weight, wk, conv_sums).fwd != nullptr;
}

Tensor batch_norm_relu_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                              Tensor running_var, bool training, double momentum, double eps,
                              std::shared_ptr<BatchNormSync> sync, const ChannelSums& sums,
                              const Tensor& conv_weight, const Conv2dParams& p, ChannelSums* conv_sums) {
  const char* op = "batch_norm_relu_conv2d";
  if (conv_sums) *conv_sums = ChannelSums{};
  const cuda::BatchNormGeom bg = ops::batch_norm_check(op, x, weight, bias, running_mean, running_var, eps, sums);
  // x's shape is the activation's, so the convolution's checks apply to x as they are.
  const cpu::Conv2dGeom cg = ops::conv2d_geom(op, x, conv_weight, Tensor(), p);
  const auto composed = [&] {
    const Tensor a = batch_norm_relu(x, weight, bias, running_mean, running_var, training, momentum, eps, sync, sums);
    return conv2d(a, conv_weight, Tensor(), p, conv_sums);
  };
  if (!prologue_applies(x, training, sync, cg)) return composed();
  const Tensor wk = ops::in_format(conv_weight, x.format());  // cuDNN's layout: OHWI
  const ProloguePlans plans = prologue_plans(x, training, sync, cg, conv_weight, wk, conv_sums);
  if (!plans.fwd) return composed();
  const cuda::ConvPlan *fwd = plans.fwd, *wgrad = plans.wgrad;

  // Cost: the convolution's, with batch norm's statistics pass (when not from sums) forward
  // and its two backward passes (x, da read; x, da read, dx written: 11 flops per value with
  // the recomputed mask); no apply pass, no activation.
  const auto cost = [&] {
    prof::OpCost c = ops::conv2d_cost(cg, x.dtype());
    const double n = double(x.numel()), es = double(dtype_size(x.dtype()));
    const double stats = training && !sums.defined() ? 1 : 0;
    c.forward.flops += 4 * stats * n, c.forward.bytes += stats * n * es;
    c.backward.flops += 11 * n, c.backward.bytes += 5 * n * es;
    return c;
  };
  RT_PROFILE_OP(op, cost(), &x, &conv_weight);
  const cudaStream_t s = ops::stream_of(x);
  const ops::BatchNormCudaStats stats =
      ops::batch_norm_cuda_stats(op, x, running_mean, running_var, training, momentum, eps, bg, nullptr, sums);
  const Tensor w_st = ops::batch_norm_param_in(weight, DType::f32), b_st = ops::batch_norm_param_in(bias, DType::f32);
  Tensor scale = Tensor::empty({bg.C}, DType::f32, x.device());  // (C,) the prologue's
  Tensor shift = Tensor::empty({bg.C}, DType::f32, x.device());  // (C,)
  cuda::batch_norm_prologue_coefs(bg.C, stats.mean.data<float>(), stats.invstd.data<float>(),
                                  ops::data_or_null<float>(w_st), ops::data_or_null<float>(b_st),
                                  scale.data<float>(), shift.data<float>(), s);

  Tensor y = Tensor::empty({cg.N, cg.O, cg.HO, cg.WO}, x.dtype(), x.device(), x.format());
  cuda::ConvFusedArgs f;
  f.scale = scale.raw_data(), f.bias = shift.raw_data();
  Tensor ysum, ysqsum;  // (O,) f32: y's sums for the batch norm after it
  if (conv_sums) {
    ysum = Tensor::empty({cg.O}, DType::f32, x.device()), ysqsum = Tensor::empty({cg.O}, DType::f32, x.device());
    f.sum = ysum.raw_data(), f.sqsum = ysqsum.raw_data();
  }
  cuda::conv_execute(*fwd, x.raw_data(), wk.raw_data(), y.raw_data(),
                     ops::conv_workspace(x.device(), cuda::conv_workspace_bytes(*fwd)), s, f);
  if (conv_sums) conv_sums->sum = std::move(ysum), conv_sums->sqsum = std::move(ysqsum);

  const DType w_dtype = weight.defined() ? weight.dtype() : DType::f32;
  const DType b_dtype = bias.defined() ? bias.dtype() : DType::f32;
  record(op, y, {x, weight, bias, conv_weight},
         [bg, cg, training, wgrad, xs = x.detach(), wk = wk.detach(), w_st = w_st.defined() ? w_st.detach() : Tensor(),
          mean = stats.mean, invstd = stats.invstd, scale, shift, w_dtype, b_dtype, wfmt = conv_weight.format(),
          wshape = conv_weight.shape()](const Tensor& gy, const std::vector<bool>& needs) {
           Tensor dy = ops::in_format(gy, MemoryFormat::channels_last);
           // The weight gradient's key assumed a 16-byte aligned dy (prologue_key).
           if (cuda::pointer_alignment({dy.raw_data()}) < 16) dy = dy.clone();
           const cudaStream_t s = ops::stream_of(dy);
           std::vector<Tensor> d(4);
           if (needs[3]) {
             const cuda::ConvPlan* plan = wgrad;
             RT_CHECK(plan, "batch_norm_relu_conv2d backward: the weight gradient was not asked for in the forward ",
                      "(grad mode was off, or the weight did not require grad then)");
             Tensor dw = Tensor::empty(wshape, dy.dtype(), dy.device(), MemoryFormat::channels_last);
             cuda::ConvFusedArgs f;
             f.scale = scale.raw_data(), f.bias = shift.raw_data();
             cuda::conv_execute(*plan, xs.raw_data(), dw.raw_data(), dy.raw_data(),
                                ops::conv_workspace(dy.device(), cuda::conv_workspace_bytes(*plan)), s, f);
             d[3] = dw.to(wfmt);
           }
           if (!(needs[0] || needs[1] || needs[2])) return d;
           Tensor da = ops::empty_like(xs);  // the activation's gradient, x's shape and layout
           ops::cuda_conv(cuda::ConvKind::backward_data, cg, dy, da.raw_data(), wk.raw_data(), dy.raw_data());
           if (needs[0]) d[0] = ops::empty_like(xs);
           if (needs[1]) d[1] = Tensor::empty({bg.C}, DType::f32, xs.device());
           if (needs[2]) d[2] = Tensor::empty({bg.C}, DType::f32, xs.device());
           Tensor work = Tensor::empty({int64_t(cuda::batch_norm_backward_workspace_bytes(bg, xs.dtype()))},
                                       DType::u8, xs.device());
           cuda::batch_norm_backward_relu_prologue(bg, xs.dtype(), xs.raw_data(), scale.data<float>(),
                                                   shift.data<float>(), da.raw_data(), mean.raw_data(),
                                                   invstd.raw_data(), ops::raw_or_null(w_st), training,
                                                   ops::raw_or_null(d[0]), ops::raw_or_null(d[1]),
                                                   ops::raw_or_null(d[2]), work.raw_data(), s);
           if (d[1].defined() && d[1].dtype() != w_dtype) d[1] = d[1].to(w_dtype);
           if (d[2].defined() && d[2].dtype() != b_dtype) d[2] = d[2].to(b_dtype);
           return d;
         });
  return y;
}

}  // namespace rt
