// SE-ResNet-50: ResNet-50 whose every bottleneck rescales its channels by a learned gate,
// squeeze-and-excitation, composed from primitive ops (no kernel of its own). Parameter
// names are timm's seresnet50 (layer1.0.se.fc1.weight, ...), so its weights load with
// `--weights`. This file is the whole model: it registers itself by name, like a model
// written outside the engine would (docs/extending.md).
#include <cmath>
#include <memory>

#include "engine/nn/layers.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "models/registry.h"
#include "models/resnet.h"

namespace rt::models {
namespace {

// timm's SEModule (rd_ratio 1/16, rd_divisor 8): the reduced width is channels / 16
// rounded to the nearest multiple of 8, at least 8 (make_divisible with round_limit 0):
// 256 -> 16, 512 -> 32, 1024 -> 64, 2048 -> 128.
int64_t se_reduced_channels(int64_t channels) {
  const double v = double(channels) / 16.0;
  return std::max<int64_t>(8, int64_t(v + 4.0) / 8 * 8);
}

// A 1x1 convolution with a bias: weight Kaiming-normal fan_out (timm's ResNet initialises
// every Conv2d so), bias PyTorch's default U(-1/sqrt(in), 1/sqrt(in)).
std::shared_ptr<nn::Conv2d> conv1x1_with_bias(int64_t in, int64_t out, Generator& g) {
  auto c = std::make_shared<nn::Conv2d>(in, out, 1, 1, 0, g, /*bias=*/true);
  const double bound = 1.0 / std::sqrt(double(in));
  c->bias.copy_(rand_uniform({out}, g, -bound, bound));
  return c;
}

// x * sigmoid(fc2(relu(fc1(mean over H, W of x)))): the squeeze is a global average pool
// to (N, C, 1, 1), the excitation two 1x1 convolutions through a C / 16 bottleneck, the
// gate broadcast back over H and W. Every op is differentiable, on both backends.
class SqueezeExcite : public nn::Module {
 public:
  SqueezeExcite(int64_t channels, Generator& g) {
    const int64_t reduced = se_reduced_channels(channels);
    fc1 = register_module("fc1", conv1x1_with_bias(channels, reduced, g));
    fc2 = register_module("fc2", conv1x1_with_bias(reduced, channels, g));
  }

  Tensor forward(const Tensor& x) override {  // x: (N, C, H, W)
    const prof::ModuleScope scope(this);
    const Tensor squeezed = mean(x, {2, 3}, /*keepdim=*/true);     // (N, C, 1, 1)
    const Tensor hidden = relu(fc1->forward(squeezed));             // (N, C/16, 1, 1)
    return mul(x, sigmoid(fc2->forward(hidden)));                   // gate (N, C, 1, 1) over H, W
  }

  std::shared_ptr<nn::Conv2d> fc1, fc2;
};

std::shared_ptr<nn::Module> make_se_resnet(const std::string& name, std::vector<int> layers,
                                           const ModelOptions& o) {
  ResNetConfig c = resnet_config(name, /*bottleneck=*/true, std::move(layers), o, /*groups=*/1,
                                 /*width_per_group=*/64);
  c.attention = [](int64_t channels, Generator& g) { return std::make_shared<SqueezeExcite>(channels, g); };
  c.attention_name = "se";
  return std::make_shared<ResNet>(c);
}

}  // namespace
}  // namespace rt::models

RT_REGISTER_MODEL("se_resnet50",
                  "SE-ResNet-50: resnet50 with squeeze-and-excitation after every bottleneck's bn3 "
                  "(timm seresnet50 names)",
                  [](const rt::models::ModelOptions& o) {
                    return rt::models::make_se_resnet("se_resnet50", {3, 4, 6, 3}, o);
                  });
