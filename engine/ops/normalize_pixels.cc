// normalize_pixels: the loader's uint8 NHWC batch becomes the model's input on its device.
// Kernels: kernels/cpu/normalize_pixels.cc and kernels/cuda/normalize_pixels.cu.
#include "kernels/cpu/normalize_pixels.h"
#include "kernels/cuda/normalize_pixels.h"

#include <cmath>

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {

Tensor normalize_pixels(const Tensor& pixels, const std::vector<double>& mean, const std::vector<double>& std,
                        MemoryFormat format, DType dtype) {
  const char* op = "normalize_pixels";
  RT_CHECK(pixels.ndim() == 4 && pixels.dtype() == DType::u8 && pixels.format() == MemoryFormat::contiguous, op,
           ": expected pixels as a contiguous u8 (N, H, W, C) tensor (a loader batch), got ", pixels.str());
  const int64_t N = pixels.size(0), H = pixels.size(1), W = pixels.size(2), C = pixels.size(3);
  for (const auto* v : {&mean, &std})
    RT_CHECK(v->size() == 1 || int64_t(v->size()) == C, op, ": ", v == &mean ? "mean" : "std", " has ", v->size(),
             " values; expected 1 or one per channel (", C, ")");
  std::vector<double> scale(static_cast<size_t>(C)), bias(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double m = mean.size() == 1 ? mean[0] : mean[size_t(c)];
    const double s = std.size() == 1 ? std[0] : std[size_t(c)];
    RT_CHECK(std::isfinite(m) && std::isfinite(s) && s > 0, op, ": channel ", c, " has mean ", m, " and std ", s,
             "; expected finite values and std > 0");
    scale[size_t(c)] = 1.0 / (255.0 * s);
    bias[size_t(c)] = -m / s;
  }
  // Cost: a multiply-add per pixel value; bytes: u8 in, dtype out.
  RT_PROFILE_OP(op, (prof::OpCost{{2.0 * double(pixels.numel()), double(pixels.numel()) * (1 + dtype_size(dtype))}, {}}),
                &pixels);
  Tensor y = Tensor::empty({N, C, H, W}, dtype, pixels.device(), format);
  const bool nhwc = format == MemoryFormat::channels_last;
  if (pixels.device().is_cuda()) {
    cuda::normalize_pixels(pixels.data<uint8_t>(), N, H, W, C, scale.data(), bias.data(), nhwc, dtype, y.raw_data(),
                           ops::stream_of(pixels));
    return y;
  }
  ops::dispatch_float(dtype, op, [&](auto z) {
    using T = decltype(z);
    // Constants rounded to T once, as the CUDA launcher does.
    std::vector<T> st(scale.begin(), scale.end()), bt(bias.begin(), bias.end());
    cpu::normalize_pixels<T>(pixels.data<uint8_t>(), N, H, W, C, st.data(), bt.data(), nhwc, y.data<T>());
  });
  return y;
}

}  // namespace rt
