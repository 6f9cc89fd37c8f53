#include "models/registry.h"

#include "base/name_registry.h"

namespace rt::models {
namespace {

// groups / width_per_group: the values the model fixes (resnet_config); `title` starts the
// description.
ModelEntry resnet(const std::string& name, bool bottleneck, std::vector<int> layers, int64_t groups = 0,
                  int64_t width_per_group = 0, const std::string& title = "") {
  return {name,
          detail::cat(title, bottleneck ? "bottleneck" : "basic-block", " ResNet, stages ", layers[0], "-", layers[1],
                      "-", layers[2], "-", layers[3], " (torchvision topology and names)"),
          [name, bottleneck, layers, groups, width_per_group](const ModelOptions& o) -> std::shared_ptr<nn::Module> {
            return std::make_shared<ResNet>(resnet_config(name, bottleneck, layers, o, groups, width_per_group));
          }};
}

// The built-in models, first in the registry.
std::vector<ModelEntry> built_in_models() {
  return {
      resnet("resnet18", false, {2, 2, 2, 2}),  resnet("resnet34", false, {3, 4, 6, 3}),
      resnet("resnet50", true, {3, 4, 6, 3}),   resnet("resnet101", true, {3, 4, 23, 3}),
      resnet("resnet152", true, {3, 8, 36, 3}),
      resnet("resnext50_32x4d", true, {3, 4, 6, 3}, 32, 4,
             "ResNeXt-50 32x4d (3x3 convs in 32 groups, 4 channels each in the first stage): "),
      resnet("wide_resnet50_2", true, {3, 4, 6, 3}, 0, 128, "Wide ResNet-50-2 (inner widths x2): "),
  };
}

// The registry: built-ins first; register_model appends. Function-local static, so a
// registration from another file's static initialiser finds it constructed.
NameRegistry<ModelEntry>& registry() {
  static NameRegistry<ModelEntry> r("model", "RT_REGISTER_MODEL", built_in_models());
  return r;
}

}  // namespace

ResNetConfig resnet_config(const std::string& name, bool bottleneck, std::vector<int> layers, const ModelOptions& o,
                           int64_t groups, int64_t width_per_group) {
  // torchvision's _ovewrite_named_param: a fixed value may be passed again, not changed.
  auto pick = [&name](int64_t fixed, int64_t asked, int64_t dflt, const char* what) {
    RT_CHECK(fixed == 0 || asked == 0 || asked == fixed, name, " has ", what, " ", fixed, ", not ", asked);
    return fixed != 0 ? fixed : asked != 0 ? asked : dflt;
  };
  ResNetConfig c;
  c.bottleneck = bottleneck;
  c.layers = std::move(layers);
  c.num_classes = o.num_classes;
  c.in_channels = o.in_channels;
  c.width = o.width;
  c.groups = pick(groups, o.groups, 1, "groups");
  c.width_per_group = pick(width_per_group, o.width_per_group, 64, "width_per_group");
  c.small_stem = o.small_stem;
  c.stem_stride = o.stem_stride;
  c.zero_init_residual = o.zero_init_residual;
  c.seed = o.seed;
  return c;
}

bool register_model(ModelEntry entry) {
  if (entry.name.empty() || !entry.make)
    return registry().refuse("a model was registered with an empty name or no factory");
  return registry().add(std::move(entry));
}

const std::vector<ModelEntry>& model_registry() { return registry().entries(); }

std::vector<std::string> model_names() { return registry().names(); }

std::shared_ptr<nn::Module> make_model(const std::string& name, const ModelOptions& opt) {
  if (const ModelEntry* e = registry().find(name)) return e->make(opt);
  RT_FAIL("unknown model '", name, "'; known models: ", registry().joined_names());
}

}  // namespace rt::models
