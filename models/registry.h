// Every model selectable by name (--model): the built-in ones (registry.cc) and any model a
// program registers from its own source file with RT_REGISTER_MODEL, without editing this
// directory (examples/ shows one, trained by the ringtape command line).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "models/resnet.h"

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

// The ResNetConfig of a ResNet-family model `name` (bottleneck or basic blocks, `layers` per
// stage) built with `o`. `groups` / `width_per_group`: the values the model fixes (0:
// torchvision's 1 / 64, which `o` may override); a different value in `o` is refused, as
// torchvision's builders do. For a model file of its own that builds on ResNet
// (models/se_resnet.cc).
ResNetConfig resnet_config(const std::string& name, bool bottleneck, std::vector<int> layers, const ModelOptions& o,
                           int64_t groups = 0, int64_t width_per_group = 0);

struct ModelEntry {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<nn::Module>(const ModelOptions&)> make;
};

// The built-in models, then the registered ones in registration order.
const std::vector<ModelEntry>& model_registry();
// Adds a model (usually through RT_REGISTER_MODEL, at static initialisation). A name already
// taken, or empty, is remembered and reported by every later lookup (model_names,
// make_model) as an rt::Error naming it (Note [Deferred registration errors] in
// base/name_registry.h).
bool register_model(ModelEntry entry);
std::vector<std::string> model_names();
// Throws rt::Error listing the known names when `name` is not one.
std::shared_ptr<nn::Module> make_model(const std::string& name, const ModelOptions& opt);

}  // namespace rt::models

// Registers a model from a source file of its own, at static initialisation:
//   RT_REGISTER_MODEL("tiny_convnet", "a 3-layer ConvNet", [](const rt::models::ModelOptions& o) {
//     return std::make_shared<TinyConvNet>(o);
//   });
// The file must be linked into the binary (list it in the cc_binary's srcs, or mark its
// cc_library alwayslink = True): nothing else refers to it.
#define RT_REGISTER_MODEL_CAT2(a, b) a##b
#define RT_REGISTER_MODEL_CAT(a, b) RT_REGISTER_MODEL_CAT2(a, b)
#define RT_REGISTER_MODEL(name, description, factory)                                 \
  [[maybe_unused]] static const bool RT_REGISTER_MODEL_CAT(rt_registered_model_, __COUNTER__) = \
      ::rt::models::register_model(::rt::models::ModelEntry{name, description, factory})
