// dropout: y = x * mask / (1 - p) in training, with mask_i = (u_i >= p) drawn from the
// Generator (Note [Dropout mask] in kernels/cpu/dropout.h: the same mask on CPU and CUDA
// for the same generator state, whatever the memory format). The backward recomputes the
// mask from the saved state, so nothing but a seed is kept.
//
// Like PyTorch: in eval, or with p = 0, or for an empty x, x itself is returned and no
// random number is drawn; p = 1 gives x * 0 (zeros; NaN stays NaN), also without drawing.
// Otherwise the generator advances by numel(x) draws, as rand_uniform(x's shape) would.
#include "kernels/cpu/dropout.h"
#include "kernels/cuda/dropout.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"
#include "engine/random.h"

namespace rt {
namespace {

struct Mask {
  uint64_t state;
  double p, scale;
};

// y = x * (keep ? scale : 0) elementwise over memory, the mask by logical index.
Tensor apply_mask(const Tensor& x, const Mask& m) {
  Tensor y = ops::empty_like(x);
  const bool nhwc = x.format() == MemoryFormat::channels_last;
  const int64_t N = nhwc ? x.size(0) : x.numel(), C = nhwc ? x.size(1) : 1, H = nhwc ? x.size(2) : 1,
                W = nhwc ? x.size(3) : 1;
  if (x.device().is_cuda()) {
    cuda::dropout(x.dtype(), m.state, cuda::RandomLayout{N, C, H, W, nhwc}, m.p, m.scale, x.raw_data(), y.raw_data(),
                  ops::stream_of(x));
  } else {
    ops::dispatch_float(x.dtype(), "dropout", [&](auto z) {
      using T = decltype(z);
      cpu::dropout<T>(m.state, cpu::DropoutLayout{N, C, H, W, nhwc}, m.p, m.scale, x.data<T>(), y.data<T>());
    });
  }
  return y;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator& g) {
  const char* op = "dropout";
  check_defined(x, op, "x");
  RT_CHECK(p >= 0.0 && p <= 1.0, op, ": p must be in [0, 1], got ", p);
  if (x.device().is_cuda()) {
    RT_CHECK(is_floating(x.dtype()), op, ": x must be f32, f64, bf16 or f16 on CUDA, got ", dtype_name(x.dtype()));
  } else {
    check_float(x, op, "x");
  }
  // Cost: a hash, a compare and a multiply per element, x read and y written; the same back.
  RT_PROFILE_OP(op, ops::elementwise_cost(x, 1, 1, 3, 1, 1, 3), &x);
  if (!training || p == 0.0 || x.numel() == 0) return x;
  const Mask m{g.state(), p, p == 1.0 ? 0.0 : 1.0 / (1.0 - p)};
  if (p < 1.0) g.skip(uint64_t(x.numel()));
  Tensor y = apply_mask(x, m);
  record(op, y, {x}, [m](const Tensor& dy, const std::vector<bool>&) {
    return std::vector<Tensor>{apply_mask(dy, m)};  // the mask follows dy's own format
  });
  return y;
}

}  // namespace rt
