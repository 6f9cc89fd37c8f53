#include "models/registry.h"

#include "models/resnet.h"

namespace rt::models {
namespace {

ModelEntry resnet(const std::string& name, bool bottleneck, std::vector<int> layers) {
  return {name,
          detail::cat(bottleneck ? "bottleneck" : "basic-block", " ResNet, stages ", layers[0], "-", layers[1], "-",
                      layers[2], "-", layers[3], " (torchvision topology and names)"),
          [bottleneck, layers](const ModelOptions& o) -> std::shared_ptr<nn::Module> {
            ResNetConfig c;
            c.bottleneck = bottleneck;
            c.layers = layers;
            c.num_classes = o.num_classes;
            c.in_channels = o.in_channels;
            c.width = o.width;
            c.small_stem = o.small_stem;
            c.stem_stride = o.stem_stride;
            c.zero_init_residual = o.zero_init_residual;
            c.seed = o.seed;
            return std::make_shared<ResNet>(c);
          }};
}

}  // namespace

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> r = {
      resnet("resnet18", false, {2, 2, 2, 2}),  resnet("resnet34", false, {3, 4, 6, 3}),
      resnet("resnet50", true, {3, 4, 6, 3}),   resnet("resnet101", true, {3, 4, 23, 3}),
      resnet("resnet152", true, {3, 8, 36, 3}),
  };
  return r;
}

std::vector<std::string> model_names() {
  std::vector<std::string> n;
  for (const auto& e : model_registry()) n.push_back(e.name);
  return n;
}

std::shared_ptr<nn::Module> make_model(const std::string& name, const ModelOptions& opt) {
  std::string known;
  for (const auto& e : model_registry()) {
    if (e.name == name) return e.make(opt);
    known += (known.empty() ? "" : ", ") + e.name;
  }
  RT_FAIL("unknown model '", name, "'; known models: ", known);
}

}  // namespace rt::models
