#include "train/step_graph.h"

#include "engine/nn/layers.h"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::train {
namespace {

void set_counting(nn::Module& model, bool in_forward) {
  model.for_each_module([&](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) bn->count_in_forward = in_forward;
  });
}

}  // namespace

bool rehearse_step(CudaGraph& graph, const Stream& stream, const std::function<void()>& step) {
  const int64_t segments = graph.pool_segments(), uploads = cuda::MultiTensorTable::total_uploads();
  graph.rehearse(stream, step);
  return graph.pool_segments() == segments && cuda::MultiTensorTable::total_uploads() == uploads;
}

void capture_step(CudaGraph& graph, const Stream& stream, nn::Module& model, const std::function<void()>& step) {
  set_counting(model, false);
  try {
    graph.capture(stream, step);
  } catch (...) {
    set_counting(model, true);
    throw;
  }
  set_counting(model, true);
}

void count_replayed_step(nn::Module& model) {
  model.for_each_module([](nn::Module& m) {
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) bn->count_batch();
  });
}

}  // namespace rt::train
