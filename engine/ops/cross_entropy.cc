// cross_entropy: softmax cross-entropy with label smoothing, mean over the batch, with
// PyTorch's formula: loss_i = (1 - e) * (-log p_i[y_i]) + e * mean_k(-log p_ik).
// Kernels: kernels/cpu/cross_entropy.cc; for CUDA tensors (f32, f64, bf16, f16)
// kernels/cuda/cross_entropy.cu, where the loss and its gradient stay on the device.
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"

#include <cstdlib>
#include <string>

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

// Note [CUDA target validation] (kernels/cuda/cross_entropy.h): CUDA targets are checked
// on the device; a bad one makes the loss NaN. With RINGTAPE_SYNC_CHECKS set (a debug
// switch: it waits for the GPU on every call) the op also reads the device's error flag and
// throws like the CPU does.
bool sync_checks() {
  static const bool on = [] {
    const char* v = std::getenv("RINGTAPE_SYNC_CHECKS");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

Tensor cross_entropy_cuda(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const char* op = "cross_entropy";
  const int64_t N = logits.size(0), K = logits.size(1);
  const DType t = logits.dtype();
  const cudaStream_t s = ops::stream_of(logits);
  Tensor probs = Tensor::empty({N, K}, t, logits.device());                                // (N, K)
  Tensor row_loss = Tensor::empty({N}, cuda::cross_entropy_acc_dtype(t), logits.device());  // (N,)
  Tensor y = Tensor::empty({}, t, logits.device());                                        // ()
  const bool check = sync_checks();
  Tensor bad = check ? Tensor::zeros({1}, DType::i32, logits.device()) : Tensor();
  cuda::cross_entropy_forward(t, N, K, logits.raw_data(), target.data<int64_t>(), label_smoothing, probs.raw_data(),
                              row_loss.raw_data(), y.raw_data(), check ? bad.data<int32_t>() : nullptr, s);
  if (check)
    RT_CHECK(bad.item() == 0, op, ": a target is outside [0, ", K, ") (checked on the device because ",
             "RINGTAPE_SYNC_CHECKS is set)");
  record(op, y, {logits}, [probs, target = target.detach(), label_smoothing](const Tensor& g, const std::vector<bool>&) {
    const int64_t N = probs.size(0), K = probs.size(1);
    RT_CHECK(g.dtype() == probs.dtype() && g.device() == probs.device() && g.numel() == 1,
             "cross_entropy backward: the loss gradient must be a one-element ", dtype_name(probs.dtype()),
             " tensor on ", probs.device().str(), ", got ", g.str());
    Tensor d = ops::empty_like(probs);
    cuda::cross_entropy_backward(probs.dtype(), N, K, probs.raw_data(), target.data<int64_t>(), label_smoothing,
                                 g.raw_data(), d.raw_data(), ops::stream_of(probs));
    return std::vector<Tensor>{d};
  });
  return y;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const char* op = "cross_entropy";
  check_ndim(logits, 2, op, "logits");
  const bool on_cuda = logits.device().is_cuda();
  if (on_cuda)
    RT_CHECK(is_floating(logits.dtype()), op, ": argument 'logits' must be f32, f64, bf16 or f16, got ", logits.str());
  else
    check_float(logits, op, "logits");
  check_dtype(target, DType::i64, op, "target");
  check_ndim(target, 1, op, "target");
  check_same_device(logits, target, op);
  const int64_t N = logits.size(0), K = logits.size(1);
  RT_CHECK(target.size(0) == N, op, ": ", N, " rows of logits but ", target.size(0), " targets");
  RT_CHECK(N > 0 && K > 0, op, ": empty logits ", logits.str());
  RT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  // Cost: log-softmax (max, exp, sum, log: ~4 per logit) and the probabilities kept; back:
  // probabilities read, gradient written.
  const auto cost = [&] {
    const double n = double(N * K), b = ops::nbytes_of(N * K, logits.dtype());
    return prof::OpCost{{4 * n, 2 * b}, {2 * n, 2 * b}};
  };
  RT_PROFILE_OP(op, cost(), &logits);
  if (on_cuda) return cross_entropy_cuda(logits, target, label_smoothing);
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
