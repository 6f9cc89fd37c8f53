// Batch augmentation (mixup, cutmix, random erasing: torchvision's ImageNet recipe) applied
// on the batch's device, and the loss with probability targets that mixing needs. The draws
// are the caller's (data/transforms/batch_augment.h). Kernels: kernels/cpu/batch_augment.cc and
// kernels/cuda/batch_augment.cu; cross_entropy_soft is composed of differentiable ops.
#include "kernels/cpu/batch_augment.h"
#include "kernels/cuda/batch_augment.h"

#include <algorithm>
#include <cmath>

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

void check_images(const Tensor& x, const char* op) {
  check_defined(x, op, "x");
  check_ndim(x, 4, op, "x");
  if (x.device().is_cuda())
    RT_CHECK(is_floating(x.dtype()), op, ": argument 'x' must be f32, f64, bf16 or f16, got ", x.str());
  else
    check_float(x, op, "x");
}

}  // namespace

Tensor mix_with_rolled(const Tensor& x, double lam, const ImageBox& box) {
  const char* op = "mix_with_rolled";
  check_images(x, op);
  RT_CHECK(std::isfinite(lam), op, ": lam must be finite, got ", lam);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  // Clipped to the image; an empty box leaves every image as it is.
  const int64_t y1 = std::max<int64_t>(box.y1, 0), y2 = std::min(box.y2, H);
  const int64_t x1 = std::max<int64_t>(box.x1, 0), x2 = std::min(box.x2, W);
  // Cost: two reads and a multiply-add per element (the worst case: the box is the image).
  RT_PROFILE_OP(op, ops::elementwise_cost(x, 2, 1, 3), &x);
  Tensor y = ops::empty_like(x);
  const bool nhwc = x.format() == MemoryFormat::channels_last;
  if (x.device().is_cuda()) {
    cuda::mix_with_rolled(x.dtype(), x.raw_data(), N, C, H, W, nhwc, lam, y1, y2, x1, x2, y.raw_data(),
                          ops::stream_of(x));
    return y;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::mix_with_rolled<T>(x.data<T>(), N, C, H, W, nhwc, T(lam), y1, y2, x1, x2, y.data<T>());
  });
  return y;
}

Tensor mix_targets(const Tensor& labels, int64_t num_classes, double lam, DType dtype) {
  const char* op = "mix_targets";
  check_defined(labels, op, "labels");
  check_dtype(labels, DType::i64, op, "labels");
  check_ndim(labels, 1, op, "labels");
  RT_CHECK(num_classes > 0, op, ": num_classes must be positive, got ", num_classes);
  RT_CHECK(std::isfinite(lam), op, ": lam must be finite, got ", lam);
  const int64_t N = labels.size(0), K = num_classes;
  RT_PROFILE_OP(op, (prof::OpCost{{2.0 * double(N * K), ops::nbytes_of(N * K, dtype) + 8.0 * double(N)}, {}}),
                &labels);
  Tensor t = Tensor::empty({N, K}, dtype, labels.device());  // (N, K)
  if (labels.device().is_cuda()) {
    RT_CHECK(is_floating(dtype), op, ": dtype must be f32, f64, bf16 or f16, got ", dtype_name(dtype));
    cuda::mix_targets(dtype, labels.data<int64_t>(), N, K, lam, t.raw_data(), ops::stream_of(labels));
    return t;
  }
  const int64_t* l = labels.data<int64_t>();
  for (int64_t i = 0; i < N; ++i)
    RT_CHECK(l[i] >= 0 && l[i] < K, op, ": label ", l[i], " at row ", i, " is outside [0, ", K, ")");
  ops::dispatch_float(dtype, op, [&](auto z) {
    using T = decltype(z);
    cpu::mix_targets<T>(l, N, K, T(lam), t.data<T>());
  });
  return t;
}

void erase_boxes_(const Tensor& x, const std::vector<ImageBox>& boxes, double value) {
  const char* op = "erase_boxes_";
  check_images(x, op);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  RT_CHECK(int64_t(boxes.size()) == N, op, ": ", boxes.size(), " boxes for a batch of ", N);
  std::vector<int64_t> flat(static_cast<size_t>(4 * N));  // (N, 4): y1, y2, x1, x2
  int64_t erased = 0;
  for (int64_t n = 0; n < N; ++n) {
    const ImageBox& b = boxes[size_t(n)];
    flat[size_t(4 * n)] = b.y1;
    flat[size_t(4 * n + 1)] = b.y2;
    flat[size_t(4 * n + 2)] = b.x1;
    flat[size_t(4 * n + 3)] = b.x2;
    erased += b.area();
  }
  RT_PROFILE_OP(op, (prof::OpCost{{0.0, ops::nbytes_of(erased * C, x.dtype())}, {}}), &x);
  const bool nhwc = x.format() == MemoryFormat::channels_last;
  if (x.device().is_cuda()) {
    cuda::erase_boxes(x.dtype(), x.raw_data(), N, C, H, W, nhwc, flat.data(), value, ops::stream_of(x));
    return;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::erase_boxes<T>(x.data<T>(), N, C, H, W, nhwc, flat.data(), T(value));
  });
}

Tensor cross_entropy_soft(const Tensor& logits, const Tensor& target, double label_smoothing) {
  const char* op = "cross_entropy_soft";
  check_defined(logits, op, "logits");
  check_defined(target, op, "target");
  check_ndim(logits, 2, op, "logits");
  check_ndim(target, 2, op, "target");
  check_same_device(logits, target, op);
  RT_CHECK(is_floating(target.dtype()), op, ": argument 'target' must hold probabilities (floating), got ",
           target.str());
  RT_CHECK(logits.shape() == target.shape(), op, ": logits ", logits.str(), " and target ", target.str(),
           " differ in shape");
  RT_CHECK(logits.size(0) > 0 && logits.size(1) > 0, op, ": empty logits ", logits.str());
  RT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  // Composed (each op has its own profiler scope and backward). The logits' gradient is
  // (softmax(x) sum_k t'[n, k] - t') / N: (softmax(x) - t') / N for rows of t summing to 1.
  const double K = double(logits.size(1));
  Tensor t = target.detach().to(logits.dtype());  // data: no gradient
  if (label_smoothing > 0) t = add(mul(t, 1.0 - label_smoothing), label_smoothing / K);
  return mul(mean(sum(mul(t, log_softmax(logits, 1)), {1})), -1.0);
}

}  // namespace rt
