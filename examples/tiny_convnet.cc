// A user's model in a file of its own, registered by name: `ringtape_example train --model
// tiny_convnet` trains it with every flag of `ringtape train` (examples/BUILD links this file
// with the ringtape command line; nothing in engine/, kernels/ or models/ changes).
#include <memory>

#include "engine/nn/layers.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "examples/conv_bn_silu.h"
#include "models/registry.h"

namespace example {
namespace {

// Three ConvBnSilu stages (stride 1, 2, 2; widths W, 2W, 4W with W = --width), global average
// pooling as a mean over H and W, and a linear classifier.
class TinyConvNet : public rt::nn::Module {
 public:
  explicit TinyConvNet(const rt::models::ModelOptions& o) {
    rt::Generator g(o.seed);
    const int64_t w = o.width;
    s1_ = register_module("stage1", std::make_shared<ConvBnSilu>(o.in_channels, w, 3, 1, g));
    s2_ = register_module("stage2", std::make_shared<ConvBnSilu>(w, 2 * w, 3, 2, g));
    s3_ = register_module("stage3", std::make_shared<ConvBnSilu>(2 * w, 4 * w, 3, 2, g));
    fc_ = register_module("fc", std::make_shared<rt::nn::Linear>(4 * w, o.num_classes, g));
  }

  rt::Tensor forward(const rt::Tensor& x) override {
    const rt::prof::ModuleScope scope(this);
    const rt::Tensor h = s3_->forward(s2_->forward(s1_->forward(x)));
    return fc_->forward(rt::mean(h, {2, 3}));  // (N, 4W)
  }

 private:
  std::shared_ptr<ConvBnSilu> s1_, s2_, s3_;
  std::shared_ptr<rt::nn::Linear> fc_;
};

}  // namespace
}  // namespace example

RT_REGISTER_MODEL("tiny_convnet", "example: three conv-BN-SiLU stages, average pool, linear (examples/)",
                  [](const rt::models::ModelOptions& o) -> std::shared_ptr<rt::nn::Module> {
                    return std::make_shared<example::TinyConvNet>(o);
                  });
