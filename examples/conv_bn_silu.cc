#include "examples/conv_bn_silu.h"

#include "engine/ops.h"
#include "engine/profiler.h"

namespace example {

ConvBnSilu::ConvBnSilu(int64_t in, int64_t out, int kernel, int stride, rt::Generator& g)
    // Registered children get their parameter names from these: "conv.weight", "bn.running_mean".
    : conv_(register_module("conv", std::make_shared<rt::nn::Conv2d>(in, out, kernel, stride, kernel / 2, g,
                                                                     /*with_bias=*/false))),
      bn_(register_module("bn", std::make_shared<rt::nn::BatchNorm2d>(out))) {}

rt::Tensor ConvBnSilu::forward(const rt::Tensor& x) {
  const rt::prof::ModuleScope scope(this);  // this layer's path in profiles and NVTX ranges
  return rt::silu(bn_->forward(conv_->forward(x)));
}

}  // namespace example
