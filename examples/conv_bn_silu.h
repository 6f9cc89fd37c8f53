// A user's layer, written outside the engine: convolution, batch norm, SiLU. It is a Module
// composed of the engine's layers and ops only (docs/extending.md walks through it).
#pragma once

#include <memory>

#include "engine/nn/layers.h"
#include "engine/random.h"

namespace example {

class ConvBnSilu : public rt::nn::Module {
 public:
  ConvBnSilu(int64_t in, int64_t out, int kernel, int stride, rt::Generator& g);
  rt::Tensor forward(const rt::Tensor& x) override;

 private:
  std::shared_ptr<rt::nn::Conv2d> conv_;
  std::shared_ptr<rt::nn::BatchNorm2d> bn_;
};

}  // namespace example
