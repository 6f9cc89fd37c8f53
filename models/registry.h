// Every model selectable by name (--model). A new model is added in registry.cc, once.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace rt::models {

struct ModelOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  int64_t width = 64;          // channels of the first stage
  bool small_stem = false;     // 3x3 stem without max-pool, for 28x28 / 32x32 images
  int stem_stride = 1;         // the small stem's stride
  bool zero_init_residual = false;
  uint64_t seed = 0;
  // torchvision's ResNet(groups=, width_per_group=) for the bottleneck models; 0: the
  // model's own (1 and 64; resnext50_32x4d: 32 and 4; wide_resnet50_2: 1 and 128). A value
  // the model fixes cannot be changed, as in torchvision's builders. The group width
  // scales with `width` (Note [Group width] in resnet.cc).
  int64_t groups = 0;
  int64_t width_per_group = 0;
};

struct ModelEntry {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<nn::Module>(const ModelOptions&)> make;
};

const std::vector<ModelEntry>& model_registry();
std::vector<std::string> model_names();
// Throws rt::Error listing the known names when `name` is not one.
std::shared_ptr<nn::Module> make_model(const std::string& name, const ModelOptions& opt);

}  // namespace rt::models
