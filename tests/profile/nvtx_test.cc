// NVTX ranges, seen through NVTX's injection hook (Note [NVTX injection] in
// nvtx_injection.cc) without Nsight: a step, its phases, the model's layers by path, and
// every op, forward and backward, pushed and popped in balance. Ranges are emitted whether
// or not a profile is being recorded (that is what `nsys profile ringtape train` sees).
#include <doctest/doctest.h>

#include <algorithm>

#include "engine/nn/module.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "tests/profile/nvtx_injection.h"
#include "tests/test_util.h"
#include "tests/models/tiny_resnet.h"

namespace rt {
namespace {

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

TEST_CASE("steps, phases, layers and ops push balanced NVTX ranges") {
  auto m = test::tiny_resnet18({.classes = 10, .width = 8});
  nn::name_modules_for_profiling(*m);
  CHECK_FALSE(prof::recording());
  {
    prof::RangeScope s(prof::EventKind::step, "step 1");
    Tensor loss;
    {
      prof::RangeScope f(prof::EventKind::phase, "forward");
      loss = cross_entropy(m->forward(test::rnd({2, 1, 12, 12}, 1, DType::f32)),
                           Tensor::from_vector(std::vector<int64_t>{0, 1}, {2}));
    }
    prof::RangeScope b(prof::EventKind::phase, "backward");
    loss.backward();
  }
  const nvtx_test::Seen& s = nvtx_test::seen();
  REQUIRE(s.initialised);
  CHECK(s.depth == 0);  // every push popped
  CHECK(s.pops == int(s.pushed.size()));
  for (const char* name : {"step 1", "forward", "backward", "model", "layer1", "layer1.0", "layer1.0.conv1",
                           "layer4.1.bn2", "fc", "conv2d", "batch_norm_relu", "linear", "cross_entropy",
                           "conv2d backward", "batch_norm_add_relu backward", "linear backward"})
    CHECK_MESSAGE(has(s.pushed, name), "no NVTX range named '", name, "'");
  // Nesting: step > phase > model > layer > block > conv > op.
  CHECK(s.max_depth >= 7);
  // The first ranges, in order.
  REQUIRE(s.pushed.size() > 6);
  CHECK(s.pushed[0] == "step 1");
  CHECK(s.pushed[1] == "forward");
  CHECK(s.pushed[2] == "model");
}

}  // namespace
}  // namespace rt
