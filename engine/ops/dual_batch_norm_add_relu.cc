// dual_batch_norm_add_relu: the tail of a residual block whose shortcut has its own batch
// norm (a downsample: conv, batch norm), relu(batch_norm(x, ...) + batch_norm(r, ...)), as one
// op. Kernels: kernels/cuda/batch_norm.cu (dual_batch_norm_apply_relu,
// dual_batch_norm_backward_relu); elsewhere the composition of batch_norm and
// batch_norm_add_relu.
#include "kernels/cuda/batch_norm.h"

#include "engine/ops.h"
#include "engine/ops/batch_norm_parts.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// Note [Two batch norms in one tail]
// A bottleneck with a downsample ends in relu(bn3(y3) + bn_ds(y_ds)). Composed, the
// shortcut's batch norm writes r = bn_ds(y_ds) in a pass that reads y_ds, the tail
// (batch_norm_add_relu) reads y3 and r, and the backward runs two batch-norm backwards: the
// tail's reduction writes dz (r's gradient), which the shortcut's reduction and dx pass each
// read again. Fused, one forward pass reads y3 and y_ds and writes y and the relu's bits; one
// reduction reads dy, the bits, y3 and y_ds for both batch norms' sums (sum(dz) is theirs in
// common: cuda::detail::SumState3), and one dx pass writes both inputs' gradients. Per element
// of bf16 that is 4 bytes less forward and 6 less backward (r written and read; dz written
// and read twice, against y_ds read once more).
// Numerics: bn_ds(y_ds) is added in the statistics type without a rounding to the data's
// dtype first (as batch_norm_add_relu adds its own bn(x) unrounded to the residual). For f32
// and f64 data that rounding is the identity, and the op computes the composition's
// operations in the same order; for bf16 and f16, y differs from the composition by that one
// rounding. Given the same relu mask the backward is the composition's arithmetic, its sums in
// the same order (the same reduction plan), and r's statistics come from r in its own layout
// as the composition's do: bit for bit under the emulator (a GPU compiler could contract the
// fused kernel's multiply-adds differently from the separate ones').
// Where it would not fuse (the CPU; SyncBN in training, whose sums are every process's) the
// op is the composition, exactly.

// One input's batch norm on CUDA: its statistics and its parameters in the statistics dtype.
struct Side {
  ops::BatchNormCudaStats stats;
  Tensor w_st, b_st;
  DType w_dtype, b_dtype;  // the parameters' own dtypes, for their gradients
  cuda::BatchNormChannels channels() const {
    return {stats.mean.raw_data(), stats.invstd.raw_data(), ops::raw_or_null(w_st), ops::raw_or_null(b_st)};
  }
};

Side side_of(const char* op, const Tensor& x, const BatchNormArgs& a, bool training, const cuda::BatchNormGeom& g) {
  const DType st = cuda::batch_norm_stat_dtype(x.dtype());
  Side s;
  s.stats = ops::batch_norm_cuda_stats(op, x, a.running_mean, a.running_var, training, a.momentum, a.eps, g, nullptr,
                                       a.sums);
  s.w_st = ops::batch_norm_param_in(a.weight, st);
  s.b_st = ops::batch_norm_param_in(a.bias, st);
  if (s.w_st.defined()) s.w_st = s.w_st.detach();
  s.w_dtype = a.weight.defined() ? a.weight.dtype() : st;
  s.b_dtype = a.bias.defined() ? a.bias.dtype() : st;
  return s;
}

}  // namespace

Tensor dual_batch_norm_add_relu(const Tensor& x, const BatchNormArgs& a, const Tensor& r, const BatchNormArgs& b,
                                bool training, const std::shared_ptr<BatchNormSync>& sync) {
  const char* op = "dual_batch_norm_add_relu";
  const cuda::BatchNormGeom g =
      ops::batch_norm_check(op, x, a.weight, a.bias, a.running_mean, a.running_var, a.eps, a.sums);
  check_defined(r, op, "residual");
  RT_CHECK(r.shape() == x.shape(), op, ": the residual must have the input's shape ", shape_str(x.shape()), ", got ",
           r.str());
  check_same_dtype(x, r, op);
  check_same_device(x, r, op);
  const cuda::BatchNormGeom gr =
      ops::batch_norm_check(op, r, b.weight, b.bias, b.running_mean, b.running_var, b.eps, b.sums);
  const Tensor rx = ops::in_format(r, x.format());  // what the kernels read: x's layout
  if (!x.device().is_cuda() || (training && sync)) {
    const Tensor rn = batch_norm(r, b.weight, b.bias, b.running_mean, b.running_var, training, b.momentum, b.eps, sync,
                                 b.sums);
    return batch_norm_add_relu(x, rn, a.weight, a.bias, a.running_mean, a.running_var, training, a.momentum, a.eps,
                               sync, a.sums);
  }

  // Cost (training): the statistics of each input when not from sums (a read, ~4 flops per
  // value), the map (x, r read, y written, 10 flops); back: the sums (dy, x, r read, 6 flops),
  // then dx and dr (dy, x, r read, both written, 11 flops).
  const auto cost = [&] {
    const double n = double(x.numel()), es = double(dtype_size(x.dtype()));
    const double stats = (training && !a.sums.defined() ? 1 : 0) + (training && !b.sums.defined() ? 1 : 0);
    return prof::OpCost{prof::Cost{n * (4 * stats + 10), n * es * (stats + 3)}, prof::Cost{17 * n, 8 * n * es}};
  };
  RT_PROFILE_OP(op, cost(), &x, &r);
  const cudaStream_t s = ops::stream_of(x);
  // r's statistics from r as it comes (the composition's reduction, bit for bit), the map in x's layout.
  const Side sa = side_of(op, x, a, training, g), sb = side_of(op, r, b, training, gr);
  Tensor y = ops::empty_like(x);
  Tensor mask;  // (batch_norm_relu_mask_bytes,) u8: the relu's bits, when a backward will need them
  if (any_requires_grad({x, a.weight, a.bias, r, b.weight, b.bias}))
    mask = Tensor::empty({int64_t(cuda::batch_norm_relu_mask_bytes(g, x.dtype()))}, DType::u8, x.device());
  cuda::dual_batch_norm_apply_relu(g, x.dtype(), x.raw_data(), sa.channels(), rx.raw_data(), sb.channels(),
                                   y.raw_data(), mask.defined() ? mask.data<uint8_t>() : nullptr, s);
  record(op, y, {x, a.weight, a.bias, r, b.weight, b.bias},
         [g, training, sa, sb, mask, xs = x.detach(), rs = rx.detach()](const Tensor& gy,
                                                                        const std::vector<bool>& needs) {
           const Tensor dy = ops::in_format(gy, xs.format());
           const DType st = cuda::batch_norm_stat_dtype(xs.dtype());
           auto per_channel = [&](bool need) { return need ? Tensor::empty({g.C}, st, xs.device()) : Tensor(); };
           // dx, dweight_a, dbias_a, dr (in x's layout), dweight_b, dbias_b
           std::vector<Tensor> d = {needs[0] ? ops::empty_like(xs) : Tensor(), per_channel(needs[1]),
                                    per_channel(needs[2]),
                                    needs[3] ? ops::empty_like(rs) : Tensor(), per_channel(needs[4]),
                                    per_channel(needs[5])};
           Tensor work = Tensor::empty({int64_t(cuda::dual_batch_norm_backward_workspace_bytes(g, xs.dtype()))},
                                       DType::u8, xs.device());
           cuda::dual_batch_norm_backward_relu(g, xs.dtype(), mask.data<uint8_t>(), dy.raw_data(), xs.raw_data(),
                                               sa.channels(), rs.raw_data(), sb.channels(), training,
                                               ops::raw_or_null(d[0]), ops::raw_or_null(d[1]),
                                               ops::raw_or_null(d[2]), ops::raw_or_null(d[3]),
                                               ops::raw_or_null(d[4]), ops::raw_or_null(d[5]), work.raw_data(),
                                               ops::stream_of(xs));
           const DType want[6] = {xs.dtype(), sa.w_dtype, sa.b_dtype, xs.dtype(), sb.w_dtype, sb.b_dtype};
           for (size_t i : {1, 2, 4, 5})
             if (d[i].defined() && d[i].dtype() != want[i]) d[i] = d[i].to(want[i]);
           return d;
         });
  return y;
}

}  // namespace rt
