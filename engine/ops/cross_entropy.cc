// cross_entropy: softmax cross-entropy with label smoothing, mean over the batch, with
// PyTorch's formula: loss_i = (1 - e) * (-log p_i[y_i]) + e * mean_k(-log p_ik).
// Kernel: kernels/cpu/cross_entropy.cc.
#include "kernels/cpu/cross_entropy.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const char* op = "cross_entropy";
  check_ndim(logits, 2, op, "logits");
  check_float(logits, op, "logits");
  check_dtype(target, DType::i64, op, "target");
  check_ndim(target, 1, op, "target");
  check_same_device(logits, target, op);
  check_cpu_only(logits, op);
  const int64_t N = logits.size(0), K = logits.size(1);
  RT_CHECK(target.size(0) == N, op, ": ", N, " rows of logits but ", target.size(0), " targets");
  RT_CHECK(N > 0 && K > 0, op, ": empty logits ", logits.str());
  RT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    RT_CHECK(t[i] >= 0 && t[i] < K, op, ": target ", t[i], " at row ", i, " is outside [0, ", K, ")");

  Tensor probs = Tensor::empty({N, K}, logits.dtype(), logits.device());
  const double loss = ops::dispatch_float(logits.dtype(), op, [&](auto z) {
    using T = decltype(z);
    return cpu::cross_entropy_forward<T>(N, K, logits.data<T>(), t, label_smoothing, probs.data<T>());
  });
  Tensor y = Tensor::full({}, loss, logits.dtype(), logits.device());
  record(op, y, {logits}, [probs, target = target.detach(), label_smoothing](const Tensor& g, const std::vector<bool>&) {
    const int64_t N = probs.size(0), K = probs.size(1);
    Tensor d = ops::empty_like(probs);
    ops::dispatch_float(probs.dtype(), "cross_entropy backward", [&](auto z) {
      using T = decltype(z);
      cpu::cross_entropy_backward<T>(N, K, probs.data<T>(), target.data<int64_t>(), label_smoothing, g.item(),
                                     d.data<T>());
    });
    return std::vector<Tensor>{d};
  });
  return y;
}

}  // namespace rt
