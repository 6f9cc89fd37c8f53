// Capturing a training step as a CUDA graph: the sequence TrainStep (--cuda-graphs) and
// bench/train_step_bench share (Note [The training step as a CUDA graph] in train/step.cc).
//
//   while (!rehearse_step(graph, stream, step)) {}  // the pool takes what the step needs
//   capture_step(graph, stream, model, step);        // batch norm does not count during it
//   graph.replay(stream);
//   count_replayed_step(model);                      // as the eager forward counts
#pragma once

#include <functional>

#include "engine/cuda_graph.h"
#include "engine/nn/module.h"

namespace rt::train {

// Runs `step` eagerly on `stream` with its memory from `graph`'s pool (CudaGraph::rehearse).
// True when it took no new segment and uploaded no multi-tensor table: a capture of the same
// work now meets the addresses the rehearsal had and the tables as it left them (an upload,
// which a capture refuses, follows a change of the list: new addresses, or SGD's first
// momentum step keyed apart from the later ones).
bool rehearse_step(CudaGraph& graph, const Stream& stream, const std::function<void()>& step);
// Captures `step` with every batch norm of `model` not counting its batch on the host (a host
// read of the count, which a capture refuses); the counts stand as before whether or not the
// capture succeeds.
void capture_step(CudaGraph& graph, const Stream& stream, nn::Module& model, const std::function<void()>& step);
// After each replay: every batch norm counts the batch the replay trained on, as the eager
// forward would have (BatchNorm2d::count_batch).
void count_replayed_step(nn::Module& model);

}  // namespace rt::train
