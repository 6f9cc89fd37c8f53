// ResNet18-152, ResNeXt-50 32x4d and Wide ResNet-50-2 with torchvision's topology (v1.5: a
// bottleneck's stride sits on its 3x3 conv), parameter names and initialisation; plus a
// small-image stem and a width multiplier for 28x28 / 32x32 inputs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layers.h"

namespace rt::models {

// Builds a block's attention module (see ResNetConfig::attention) for a residual branch of
// `channels` channels, drawing its initial values from `g`.
using BlockAttention = std::function<std::shared_ptr<nn::Module>(int64_t channels, Generator& g)>;

struct ResNetConfig {
  bool bottleneck = false;               // Bottleneck (50/101/152) or BasicBlock (18/34)
  std::vector<int> layers = {2, 2, 2, 2};  // blocks per stage
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  int64_t width = 64;                    // channels of the first stage (torchvision: 64)
  // torchvision's ResNet(groups=, width_per_group=), bottleneck only: a bottleneck of
  // `planes` (width << stage) has the inner width planes * width_per_group / 64 * groups
  // and its 3x3 conv runs in `groups` groups (ResNeXt-50 32x4d: 32 and 4; Wide ResNet-50-2:
  // 1 and 128). Scaling `width` scales the group width with it; a width whose first-stage
  // group width planes * width_per_group / 64 is not a positive integer is refused
  // (torchvision would truncate it, to 0 below 1).
  int64_t groups = 1;
  int64_t width_per_group = 64;
  bool small_stem = false;               // 3x3 conv1 (stride stem_stride) and no max-pool
  int stem_stride = 1;                   // small stem only: 2 halves every stage's resolution
  bool zero_init_residual = false;       // zero the last BN weight of every block
  // Note [Fused block tails] (models/resnet.cc); false: each tail as batch_norm, then relu or
  // add_relu, the same values within rounding (for comparing the two).
  bool fused_tails = true;
  // Note [Statistics from the convolution] (engine/ops/batch_norm.cc): training batch norms
  // take their statistics from the convolution's fused channel sums where cuDNN computes them
  // (CUDA, channels-last, bf16/f16); false: from a pass over the input (for comparing the two).
  bool conv_sums = true;
  // Note [Batch norm as the next convolution's prologue] (engine/ops/batch_norm_relu_conv2d.cc):
  // a batch norm + relu that feeds only a convolution (bn1, bn2 of a bottleneck; bn1 of a basic
  // block) runs as that convolution's prologue where cuDNN fuses it (CUDA, channels-last,
  // bf16/f16, f32 with TF32); false: as its own pass (for comparing the two).
  bool bn_prologue = true;
  // Note [Two batch norms in one tail] (engine/ops/dual_batch_norm_add_relu.cc): a block with a
  // downsample ends in one op, relu(bn(y) + downsample's bn(y_ds)), on CUDA without SyncBN;
  // false: the downsample's batch norm as its own pass (for comparing the two).
  bool dual_tails = true;
  uint64_t seed = 0;                     // initialisation
  // timm's attn_layer: a module every block applies to its residual branch after the last
  // batch norm, before the residual add, registered as `attention_name` between that batch
  // norm and the downsample (SE-ResNet: squeeze-and-excitation as "se", models/se_resnet.cc).
  // Empty: none.
  BlockAttention attention;
  std::string attention_name = "se";
};

class BasicBlock : public nn::Module {
 public:
  static constexpr int kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int stride, bool downsample, Generator& g,
             const BlockAttention& attention = {}, const std::string& attention_name = "se");
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Module> attention;       // null: none (ResNetConfig::attention)
  std::shared_ptr<nn::Sequential> downsample;  // null when the identity fits
};

class Bottleneck : public nn::Module {
 public:
  static constexpr int kExpansion = 4;
  // The 3x3 conv has planes * width_per_group / 64 * groups channels in `groups` groups;
  // planes * width_per_group must be a multiple of 64.
  Bottleneck(int64_t in, int64_t planes, int stride, bool downsample, Generator& g, int64_t groups = 1,
             int64_t width_per_group = 64, const BlockAttention& attention = {},
             const std::string& attention_name = "se");
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::Module> attention;  // null: none (ResNetConfig::attention)
  std::shared_ptr<nn::Sequential> downsample;
};

class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetConfig& cfg);
  Tensor forward(const Tensor& x) override;  // (N, in_channels, H, W) -> logits (N, num_classes)
  const ResNetConfig& config() const { return cfg_; }

 private:
  ResNetConfig cfg_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> stages_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace rt::models
