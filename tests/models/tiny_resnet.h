// The tests' tiny ResNet18: narrow, with the small stem for 1-channel images and a handful
// of classes. A real model with every layer kind the trainer meets, at a cost the tests can
// afford; built here once, each test naming only what differs from the defaults.
#pragma once

#include <cstdint>
#include <memory>

#include "models/registry.h"

namespace rt::test {

struct TinyResNet {
  int64_t classes = 4;
  int64_t width = 4;    // channels of the first stage (torchvision's: 64)
  int stem_stride = 1;  // the small stem's
  uint64_t seed = 0;    // the initialisation's
};

inline std::shared_ptr<nn::Module> tiny_resnet18(const TinyResNet& t = {}) {
  models::ModelOptions o;
  o.num_classes = t.classes;
  o.in_channels = 1;
  o.width = t.width;
  o.small_stem = true;
  o.stem_stride = t.stem_stride;
  o.seed = t.seed;
  return models::make_model("resnet18", o);
}

}  // namespace rt::test
