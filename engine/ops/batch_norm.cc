// batch_norm: PyTorch's semantics. Training normalises with the batch's biased variance
// and updates the running variance with the unbiased one (n / (n - 1)); eval uses the
// running statistics. Kernel: kernels/cpu/batch_norm.cc. batch_norm_relu and
// batch_norm_add_relu are the same op with relu (and a residual) fused into its
// elementwise passes. With a BatchNormSync the batch is every process's
// (Note [Synchronised batch norm] in engine/ops/batch_norm_sync.h).
#include "kernels/cpu/batch_norm.h"
#include "kernels/cuda/batch_norm.h"
#include "kernels/cuda/channel_reduce.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/ops.h"
#include "engine/ops/batch_norm_parts.h"
#include "engine/ops/op_util.h"

namespace rt {

using ops::data_or_null;
using ops::raw_or_null;
namespace {

// The relu's bits a CUDA fused op saved, or null.
const uint8_t* bits_or_null(const Tensor& mask) { return mask.defined() ? mask.data<uint8_t>() : nullptr; }

// r = (1 - momentum) * r + momentum * v, in r's own dtype.
void blend_running(Tensor& r, const std::vector<double>& v, double momentum) {
  ops::dispatch_float(r.dtype(), "batch_norm running stats", [&](auto z) {
    using T = decltype(z);
    T* p = r.data<T>();
    for (size_t c = 0; c < v.size(); ++c) p[c] = T((1.0 - momentum) * double(p[c]) + momentum * v[c]);
  });
}

// The fused tails (Note [Fused batch_norm + relu] in kernels/cpu/batch_norm.h): relu(bn(x)
// [+ residual]). Their backward reads dy masked by the saved output y (CPU) or by the relu's
// bits the forward wrote (CUDA: Note [Relu mask bits] in kernels/cuda/batch_norm.h).
struct Tail {
  bool relu = false;
  Tensor residual;    // undefined, or x's shape, dtype and device (relu only): recorded
  Tensor residual_x;  // its values in x's memory format: what the kernels read
};

// What the backward of all three ops keeps (besides mean and invstd). Their recorded
// inputs are x, weight, bias, residual (undefined but for batch_norm_add_relu).
struct Saved {
  bool training;
  Tensor x, w, y;  // y: the output, saved by the fused ops only (the relu's mask; on CUDA its bits, u8)
};

// Gradient buffers for what `needs` asks: dx, dweight (sv.w's dtype), dbias (`bias_dtype`),
// dresidual.
std::vector<Tensor> grad_buffers(const Saved& sv, int64_t C, DType bias_dtype, const std::vector<bool>& needs) {
  return {needs[0] ? ops::empty_like(sv.x) : Tensor(), needs[1] ? ops::empty_like(sv.w) : Tensor(),
          needs[2] ? Tensor::empty({C}, bias_dtype, sv.x.device()) : Tensor(),
          needs[3] ? ops::empty_like(sv.x) : Tensor()};
}

// SyncBN on the CPU (Note [Synchronised batch norm]): every process's moments merged into
// `mean` and `m2` in process order; returns the global count.
double sync_moments(BatchNormSync& sync, int64_t C, double count, double* mean, double* m2) {
  std::vector<double> block{count};  // count, mean[C], m2[C]
  block.insert(block.end(), mean, mean + C);
  block.insert(block.end(), m2, m2 + C);
  const Tensor all = sync.all_gather(Tensor::from_vector(block, {1 + 2 * C}));
  RT_CHECK(all.ndim() == 2 && all.size(1) == 1 + 2 * C, "batch_norm: the sync's all_gather returned ", all.str());
  return merge_moments(C, int(all.size(0)), all.contiguous().data<double>(), mean, m2);
}

// ... and every process's backward sums, added in process order.
void sync_grad_sums(BatchNormSync& sync, int64_t C, double* sum_dz, double* sum_dz_xmu) {
  std::vector<double> block(sum_dz, sum_dz + C);  // sum_dz[C], sum_dz_xmu[C]
  block.insert(block.end(), sum_dz_xmu, sum_dz_xmu + C);
  const Tensor all = sync.all_gather(Tensor::from_vector(block, {2 * C}));
  RT_CHECK(all.ndim() == 2 && all.size(1) == 2 * C, "batch_norm: the sync's all_gather returned ", all.str());
  sum_grad_sums(C, int(all.size(0)), all.contiguous().data<double>(), sum_dz, sum_dz_xmu);
}

}  // namespace

namespace ops {

BatchNormCudaStats batch_norm_cuda_stats(const char* op, const Tensor& x, Tensor running_mean, Tensor running_var,
                                         bool training, double momentum, double eps, const cuda::BatchNormGeom& g,
                                         const std::shared_ptr<BatchNormSync>& sync, const ChannelSums& sums) {
  const DType st = cuda::batch_norm_stat_dtype(x.dtype());
  const cudaStream_t s = ops::stream_of(x);
  if (running_mean.defined())
    RT_CHECK(running_mean.dtype() == running_var.dtype(), op, ": running_mean and running_var dtypes differ: ",
             running_mean.str(), " and ", running_var.str());
  BatchNormCudaStats r;
  r.mean = Tensor::empty({g.C}, st, x.device());    // (C,)
  r.invstd = Tensor::empty({g.C}, st, x.device());  // (C,)
  Tensor &mean = r.mean, &invstd = r.invstd;
  if (training) {
    // With sync the global count is on the device only: every process's own batch must
    // already have more than one value per channel (the sampler gives them equal batches).
    RT_CHECK(g.N * g.S > 1, op, ": training needs more than one value per channel, got input ", x.str(),
             sync ? " on this process (synchronised on CUDA, each process's batch must)" : "",
             " (use a batch size above 1, or eval mode)");
    const bool run = running_mean.defined();
    // The reduction's per-row-block partials (kernels/cuda/channel_reduce.cuh), bytes.
    const int64_t work_bytes = int64_t(cuda::batch_norm_stats_workspace_bytes(g, x.dtype()));
    Tensor work = sums.defined() && !sync ? Tensor() : Tensor::empty({work_bytes}, DType::u8, x.device());
    if (sync) {
      // Local moments, all-gathered, merged on the device (Note [Synchronised batch norm]).
      Tensor block = Tensor::empty({1 + 2 * g.C}, DType::f64, x.device());  // count, mean[C], m2[C]
      cuda::batch_norm_local_moments(g, x.dtype(), x.raw_data(), block.data<double>(), work.raw_data(), s);
      const Tensor all = sync->all_gather(block);  // (world, 1 + 2C)
      RT_CHECK(all.ndim() == 2 && all.size(1) == 1 + 2 * g.C && all.device() == x.device(), op,
               ": the sync's all_gather returned ", all.str());
      r.count = Tensor::empty({1}, DType::f64, x.device());
      cuda::batch_norm_merge_moments(g.C, x.dtype(), int(all.size(0)), all.data<double>(), eps, mean.raw_data(),
                                     invstd.raw_data(), r.count.data<double>(), run ? running_mean.dtype() : st,
                                     run ? running_mean.raw_data() : nullptr, run ? running_var.raw_data() : nullptr,
                                     momentum, s);
    } else if (sums.defined()) {
      cuda::batch_norm_stats_from_sums(g.C, x.dtype(), g.N * g.S, sums.sum.data<float>(), sums.sqsum.data<float>(),
                                       eps, mean.raw_data(), invstd.raw_data(), run ? running_mean.dtype() : st,
                                       run ? running_mean.raw_data() : nullptr, run ? running_var.raw_data() : nullptr,
                                       momentum, s);
    } else {
      cuda::batch_norm_stats(g, x.dtype(), x.raw_data(), eps, mean.raw_data(), invstd.raw_data(),
                             run ? running_mean.dtype() : st, run ? running_mean.raw_data() : nullptr,
                             run ? running_var.raw_data() : nullptr, momentum, work.raw_data(), s);
    }
  } else {
    RT_CHECK(running_mean.defined(), op, ": eval mode needs running_mean and running_var");
    cuda::batch_norm_eval_stats(g.C, running_mean.dtype(), running_mean.raw_data(), running_var.raw_data(), eps, st,
                                mean.raw_data(), invstd.raw_data(), s);
  }
  return r;
}

Tensor batch_norm_param_in(const Tensor& p, DType st) { return p.defined() && p.dtype() != st ? p.detach().to(st) : p; }

cuda::BatchNormGeom batch_norm_check(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, double eps,
                                     const ChannelSums& sums) {
  // The CPU computes in f32/f64; CUDA also takes bf16/f16 storage (computing in f32).
  const bool on_cuda = x.defined() && x.device().is_cuda();
  auto check_floating = [&](const Tensor& t, const char* name) {
    if (!on_cuda) return check_float(t, op, name);
    check_defined(t, op, name);
    RT_CHECK(is_floating(t.dtype()), op, ": argument '", name, "' must be f32, f64, bf16 or f16, got ", t.str());
  };
  check_floating(x, "input");
  RT_CHECK(x.ndim() >= 2, op, ": input must be (N, C, ...), got ", x.str());
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t S = x.numel() / std::max<int64_t>(N * C, 1);
  auto check_param = [&](const Tensor& t, const char* name, bool same_dtype) {
    if (!t.defined()) return;
    RT_CHECK(t.shape() == Shape{C}, op, ": ", name, " must be [", C, "] for an input with ", C, " channels, got ",
             t.str());
    check_same_device(x, t, op);
    // On CUDA weight and bias may also come in the statistics dtype, as f32 masters with a
    // bf16 or f16 input (Note [Batch norm parameters in the statistics dtype]).
    if (same_dtype && !(on_cuda && t.dtype() == cuda::batch_norm_stat_dtype(x.dtype()))) check_same_dtype(x, t, op);
    else check_floating(t, name);
  };
  check_param(weight, "weight", true);
  check_param(bias, "bias", true);
  check_param(running_mean, "running_mean", false);
  check_param(running_var, "running_var", false);
  RT_CHECK(running_mean.defined() == running_var.defined(), op, ": running_mean and running_var go together");
  RT_CHECK(eps > 0, op, ": eps must be positive, got ", eps);
  if (sums.defined()) {
    RT_CHECK(on_cuda, op, ": channel sums are a CUDA convolution's; the CPU computes its statistics itself");
    for (const Tensor* t : {&sums.sum, &sums.sqsum}) {
      RT_CHECK(t->defined() && t->shape() == Shape{C} && t->dtype() == DType::f32 && t->device() == x.device(),
               op, ": channel sums must be [", C, "] f32 on ", x.device().str(), ", got ",
               t->defined() ? t->str() : "undefined");
    }
  }
  const bool nhwc = x.ndim() == 2 || x.format() == MemoryFormat::channels_last;
  return cuda::BatchNormGeom{N, C, S, nhwc};
}

}  // namespace ops

namespace {

// The CUDA path: mean and invstd stay on the device (statistics dtype: f64 for f64 input,
// f32 otherwise) and are never read on the host; the running statistics are updated there.
// With `sync` (training) the reductions are split around the sync's all-gathers
// (Note [Synchronised batch norm]), still without a host wait.
Tensor batch_norm_cuda(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor running_mean, Tensor running_var, bool training, double momentum, double eps,
                       const cuda::BatchNormGeom& g, const Tail& tail, std::shared_ptr<BatchNormSync> sync,
                       const ChannelSums& sums) {
  const DType st = cuda::batch_norm_stat_dtype(x.dtype());
  const cudaStream_t s = ops::stream_of(x);
  if (!training) sync = nullptr;  // eval normalises with the running statistics: nothing to combine
  const ops::BatchNormCudaStats stats =
      ops::batch_norm_cuda_stats(op, x, running_mean, running_var, training, momentum, eps, g, sync, sums);
  const Tensor &mean = stats.mean, &invstd = stats.invstd, &count = stats.count;
  // The kernels take weight and bias in the statistics dtype: mixed precision's f32 masters
  // as they are, 16-bit ones converted (Note [Batch norm parameters in the statistics dtype]).
  const Tensor w_st = ops::batch_norm_param_in(weight, st), b_st = ops::batch_norm_param_in(bias, st);
  Tensor y = ops::empty_like(x);
  // The relu's bits, when a backward will need them.
  Tensor mask;  // (batch_norm_relu_mask_bytes,) u8
  if (tail.relu && any_requires_grad({x, weight, bias, tail.residual}))
    mask = Tensor::empty({int64_t(cuda::batch_norm_relu_mask_bytes(g, x.dtype()))}, DType::u8, x.device());
  if (tail.relu)
    cuda::batch_norm_apply_relu(g, x.dtype(), x.raw_data(), raw_or_null(tail.residual_x), mean.raw_data(),
                                invstd.raw_data(), raw_or_null(w_st), raw_or_null(b_st), y.raw_data(),
                                mask.defined() ? mask.data<uint8_t>() : nullptr, s);
  else
    cuda::batch_norm_apply(g, x.dtype(), x.raw_data(), mean.raw_data(), invstd.raw_data(), raw_or_null(w_st),
                           raw_or_null(b_st), y.raw_data(), s);
  const Saved sv{training, x.detach(), w_st.defined() ? w_st.detach() : Tensor(), mask};
  const DType w_dtype = weight.defined() ? weight.dtype() : st, b_dtype = bias.defined() ? bias.dtype() : st;
  record(op, y, {x, weight, bias, tail.residual},
         [sv, g, mean, invstd, sync, count, st, w_dtype, b_dtype](const Tensor& gy, const std::vector<bool>& needs) {
           const Tensor dy = ops::in_format(gy, sv.x.format());
           // dweight and dbias in the statistics dtype, converted to the parameters' below.
           std::vector<Tensor> d = grad_buffers(sv, g.C, st, needs);
           // dx coefficients k, a, b per channel, then the reduction's partials (bytes).
           Tensor work = Tensor::empty({int64_t(cuda::batch_norm_backward_workspace_bytes(g, sv.x.dtype()))},
                                       DType::u8, sv.x.device());
           const cudaStream_t s = ops::stream_of(sv.x);
           if (sync) {
             // This process's sums, all-gathered, dx from their total (Note [Synchronised batch norm]).
             Tensor sums = Tensor::empty({2 * g.C}, DType::f64, sv.x.device());  // sum_dz[C], sum_dz_xmu[C]
             cuda::batch_norm_backward_sums(g, sv.x.dtype(), sv.x.raw_data(), bits_or_null(sv.y), dy.raw_data(),
                                            mean.raw_data(), invstd.raw_data(), raw_or_null(d[1]),
                                            raw_or_null(d[2]), raw_or_null(d[3]), sums.data<double>(),
                                            work.raw_data(), s);
             const Tensor all = sync->all_gather(sums);  // (world, 2C)
             RT_CHECK(all.ndim() == 2 && all.size(1) == 2 * g.C && all.device() == sv.x.device(),
                      "batch_norm backward: the sync's all_gather returned ", all.str());
             if (d[0].defined()) {
               // The residual's gradient is dz itself: read it instead of dy and y.
               const bool dz_written = sv.y.defined() && d[3].defined();
               cuda::batch_norm_backward_dx_from_sums(
                   g, sv.x.dtype(), sv.x.raw_data(), dz_written ? nullptr : bits_or_null(sv.y),
                   dz_written ? d[3].raw_data() : dy.raw_data(), mean.raw_data(), invstd.raw_data(), raw_or_null(sv.w),
                   int(all.size(0)), all.data<double>(), count.data<double>(), d[0].raw_data(), work.raw_data(), s);
             }
           } else if (sv.y.defined()) {
             cuda::batch_norm_backward_relu(g, sv.x.dtype(), sv.x.raw_data(), sv.y.data<uint8_t>(), dy.raw_data(),
                                            mean.raw_data(), invstd.raw_data(), raw_or_null(sv.w), sv.training,
                                            raw_or_null(d[0]), raw_or_null(d[1]), raw_or_null(d[2]),
                                            raw_or_null(d[3]), work.raw_data(), s);
           } else {
             cuda::batch_norm_backward(g, sv.x.dtype(), sv.x.raw_data(), dy.raw_data(), mean.raw_data(),
                                       invstd.raw_data(), raw_or_null(sv.w), sv.training, raw_or_null(d[0]),
                                       raw_or_null(d[1]), raw_or_null(d[2]), work.raw_data(), s);
           }
           if (d[1].defined() && d[1].dtype() != w_dtype) d[1] = d[1].to(w_dtype);
           if (d[2].defined() && d[2].dtype() != b_dtype) d[2] = d[2].to(b_dtype);
           return d;
         });
  return y;
}

// The CPU path: statistics in double on the host. With `sync` (training), the statistics
// and the backward's sums are every process's (Note [Synchronised batch norm]).
Tensor batch_norm_cpu(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Tensor running_mean, Tensor running_var, bool training, double momentum, double eps,
                      const cpu::BatchNormGeom& g, const Tail& tail, std::shared_ptr<BatchNormSync> sync) {
  const int64_t N = g.N, C = g.C, S = g.S;
  auto mean = std::make_shared<std::vector<double>>(size_t(C));
  auto invstd = std::make_shared<std::vector<double>>(size_t(C));
  double count = double(N * S);  // values per channel the statistics are over
  if (!training) sync = nullptr;  // eval normalises with the running statistics: nothing to combine
  if (training) {
    std::vector<double> var(static_cast<size_t>(C));  // m2 = sum((x - mean)^2), then var
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::batch_norm_moments<T>(g, x.data<T>(), mean->data(), var.data());
    });
    if (sync) count = sync_moments(*sync, C, count, mean->data(), var.data());
    RT_CHECK(count > 1, op, ": training needs more than one value per channel, got input ", x.str(),
             sync ? " on every process together" : "", " (use a batch size above 1, or eval mode)");
    for (double& v : var) v /= count;
    for (int64_t c = 0; c < C; ++c) (*invstd)[c] = 1.0 / std::sqrt(var[c] + eps);
    if (running_mean.defined()) {
      const double unbias = count / (count - 1);
      for (double& v : var) v *= unbias;
      blend_running(running_mean, *mean, momentum);
      blend_running(running_var, var, momentum);
    }
  } else {
    RT_CHECK(running_mean.defined(), op, ": eval mode needs running_mean and running_var");
    *mean = running_mean.to_vector<double>();
    std::vector<double> var = running_var.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) (*invstd)[c] = 1.0 / std::sqrt(var[c] + eps);
  }

  Tensor y = ops::empty_like(x);
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    const T* w = data_or_null<T>(weight);
    const T* b = data_or_null<T>(bias);
    if (tail.relu)
      cpu::batch_norm_apply_relu<T>(g, x.data<T>(), data_or_null<T>(tail.residual_x),
                                    mean->data(), invstd->data(), w, b, y.data<T>());
    else
      cpu::batch_norm_apply<T>(g, x.data<T>(), mean->data(), invstd->data(), w, b, y.data<T>());
  });

  const Saved sv{training, x.detach(), weight.defined() ? weight.detach() : Tensor(),
                 tail.relu ? y.detach() : Tensor()};
  record(op, y, {x, weight, bias, tail.residual},
         [sv, g, mean, invstd, count, sync](const Tensor& gy, const std::vector<bool>& needs) {
           const Tensor dy = ops::in_format(gy, sv.x.format());
           std::vector<Tensor> d = grad_buffers(sv, g.C, sv.x.dtype(), needs);
           ops::dispatch_float(sv.x.dtype(), "batch_norm backward", [&](auto z) {
             using T = decltype(z);
             // Pass 1 (dweight and dbias from this process's sums), the sums combined, pass 2.
             std::vector<double> sum_dz(size_t(g.C)), sum_dz_xmu(size_t(g.C));
             cpu::batch_norm_grad_sums<T>(g, sv.x.data<T>(), data_or_null<T>(sv.y), dy.data<T>(), mean->data(),
                                          invstd->data(), sum_dz.data(), sum_dz_xmu.data(), data_or_null<T>(d[1]),
                                          data_or_null<T>(d[2]), data_or_null<T>(d[3]));
             if (sync) sync_grad_sums(*sync, g.C, sum_dz.data(), sum_dz_xmu.data());
             if (!d[0].defined()) return;
             // The residual's gradient is dz itself: pass 2 reads it instead of dy and y.
             const bool dz_written = sv.y.defined() && d[3].defined();
             cpu::batch_norm_backward_dx<T>(g, sv.x.data<T>(), dz_written ? nullptr : data_or_null<T>(sv.y),
                                            dz_written ? data_or_null<T>(d[3]) : dy.data<T>(), mean->data(),
                                            invstd->data(), data_or_null<T>(sv.w), sv.training, count, sum_dz.data(),
                                            sum_dz_xmu.data(), data_or_null<T>(d[0]));
           });
           return d;
         });
  return y;
}

// Checks the arguments of all three ops and runs the backend of x's device.
Tensor batch_norm_any(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      Tensor running_mean, Tensor running_var, bool training, double momentum, double eps,
                      Tail tail, std::shared_ptr<BatchNormSync> sync, const ChannelSums& sums) {
  const cuda::BatchNormGeom g = ops::batch_norm_check(op, x, weight, bias, running_mean, running_var, eps, sums);
  const bool on_cuda = x.device().is_cuda();
  if (tail.residual.defined()) {
    RT_CHECK(tail.residual.shape() == x.shape(), op, ": residual must have the input's shape ", shape_str(x.shape()),
             ", got ", tail.residual.str());
    check_same_dtype(x, tail.residual, op);
    check_same_device(x, tail.residual, op);
    tail.residual_x = ops::in_format(tail.residual, x.format());
  }

  // Note [Statistics from the convolution]
  // A training batch norm's statistics cost a pass over its input x. When x comes straight
  // from a convolution, cuDNN's runtime fusion computes sum(x) and sum(x^2) per channel (f32)
  // in the convolution's epilogue while the output is still on chip
  // (Note [Fused convolutions] in kernels/cuda/conv2d.h; conv2d with ChannelSums), and a
  // kernel of one thread per channel turns them into mean and invstd (cuda::batch_norm_stats_from_sums):
  // the pass disappears. The models ask for it (nn::BatchNorm2d::wants_sums) where it
  // applies: CUDA training without SyncBN, whose statistics need the moments of every
  // process. Numerics: var = sqsum / n - mean^2 from f32 sums loses about
  // eps_f32 * (mean^2 + var) / var of var's relative precision to cancellation (the Welford
  // pass does not), small for a convolution's output, whose channel means are of the order
  // of its standard deviations; the whole-model tests bound its effect (resnet_fusion_test).
  const bool from_sums = training && !sync && sums.defined();
  // Cost (training): statistics (x read, ~4 flops per value: Welford), the normalising map
  // (x [+ residual] read, y written, 2 flops [+ relu, + add]); back: the two sums (x, dy
  // [, y] read, 4 flops) then dx (x, dy [, y] read, dx [, dresidual] written, 4 flops).
  const auto cost = [&] {
    const double n = double(x.numel()), es = double(dtype_size(x.dtype()));
    const double res = tail.residual.defined() ? 1 : 0, masked = tail.relu ? 1 : 0;
    const double stats = training && !from_sums ? 1 : 0;
    const prof::Cost fwd{n * (4 * stats + 2 + res + masked), n * es * (stats + 2 + res)};
    const prof::Cost bwd{8 * n, n * es * (2 * (2 + masked) + 1 + res)};
    return prof::OpCost{fwd, bwd};
  };
  RT_PROFILE_OP(op, cost(), &x, &tail.residual);
  if (on_cuda)
    return batch_norm_cuda(op, x, weight, bias, running_mean, running_var, training, momentum, eps, g, tail,
                           std::move(sync), sums);
  return batch_norm_cpu(op, x, weight, bias, running_mean, running_var, training, momentum, eps,
                        cpu::BatchNormGeom{g.N, g.C, g.S, g.nhwc}, tail, std::move(sync));
}

}  // namespace

double merge_moments(int64_t C, int k, const double* blocks, double* mean, double* m2) {
  // Chan, Golub and LeVeque's merge, the one the CUDA kernels use (cuda::detail::WelfordState
  // in kernels/cuda/channel_reduce.h): the same merges in the same order.
  const size_t stride = size_t(1 + 2 * C);
  double n = 0;
  for (int i = 0; i < k; ++i) n += blocks[size_t(i) * stride];
  for (int64_t c = 0; c < C; ++c) {
    auto st = cuda::detail::WelfordState<double>::empty();
    for (int i = 0; i < k; ++i) {
      const double* b = blocks + size_t(i) * stride;
      st.merge(cuda::detail::WelfordState<double>{b[1 + c], b[1 + C + c], int64_t(b[0])});
    }
    mean[c] = st.mean;
    m2[c] = st.m2;
  }
  return n;
}

void sum_grad_sums(int64_t C, int k, const double* blocks, double* sum_dz, double* sum_dz_xmu) {
  std::fill(sum_dz, sum_dz + C, 0.0);
  std::fill(sum_dz_xmu, sum_dz_xmu + C, 0.0);
  for (int i = 0; i < k; ++i) {
    const double* b = blocks + size_t(i) * size_t(2 * C);
    for (int64_t c = 0; c < C; ++c) {
      sum_dz[c] += b[c];
      sum_dz_xmu[c] += b[C + c];
    }
  }
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum, double eps, std::shared_ptr<BatchNormSync> sync,
                  const ChannelSums& sums) {
  return batch_norm_any("batch_norm", x, weight, bias, running_mean, running_var, training, momentum, eps, Tail{},
                        std::move(sync), sums);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                       Tensor running_var, bool training, double momentum, double eps,
                       std::shared_ptr<BatchNormSync> sync, const ChannelSums& sums) {
  return batch_norm_any("batch_norm_relu", x, weight, bias, running_mean, running_var, training, momentum, eps,
                        Tail{true, Tensor(), Tensor()}, std::move(sync), sums);
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           Tensor running_mean, Tensor running_var, bool training, double momentum, double eps,
                           std::shared_ptr<BatchNormSync> sync, const ChannelSums& sums) {
  const char* op = "batch_norm_add_relu";
  check_defined(residual, op, "residual");
  return batch_norm_any(op, x, weight, bias, running_mean, running_var, training, momentum, eps,
                        Tail{true, residual, Tensor()}, std::move(sync), sums);
}

}  // namespace rt
