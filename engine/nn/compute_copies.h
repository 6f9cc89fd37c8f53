// Mixed precision at the module level: working copies of a model's parameters in a
// compute dtype, and a differentiable dtype cast.
//
// Note [Compute copies]
// Mixed precision leaves the model's parameters as they are. They are the masters (fp32;
// f64 in the CPU tests): what the optimizer updates, state_dict() returns and checkpoints
// hold. Forward and backward run on working copies instead:
//   refresh()            copy = master cast to the compute dtype (bf16/f16 on a GPU), once
//                        per optimizer step. A copy is a leaf of its own (own storage,
//                        requires grad) that the layers compute with (Module::compute).
//   backward             fills the copies' gradients, in the compute dtype.
//   accumulate_grads()   master.grad += copy.grad converted to the master dtype, and the
//                        copies' gradients are dropped. Called after every backward, so the
//                        micro-batches of one step (--accum-steps) sum in the master dtype.
// Batch-norm parameters get no copy (Module::compute_parameters): they, the running
// statistics and every other buffer stay in the master dtype, and their gradients reach
// the masters directly (Note [Batch norm in mixed precision], engine/nn/layers.cc).
// Gradient-ready hooks on the masters do not fire for parameters that have copies: their
// gradients arrive in accumulate_grads(), after backward.
// On a GPU, refresh() and accumulate_grads() are one launch each for all parameters
// (kernels/cuda/cast.h's cast_many, Note [Multi-tensor apply]), with the same arithmetic
// as the per-tensor cast and add_: ResNet50 has 161 copies, so 322 launches fewer a step.
#pragma once

#include <map>

#include "engine/nn/module.h"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::nn {

// x converted to `dtype` (same shape, device and format); differentiable: the gradient
// flows back converted to x's dtype. Returns x itself when it already has `dtype`.
Tensor cast(const Tensor& x, DType dtype);

class ComputeCopies {
 public:
  // Allocates a copy in `dtype` for each of model.compute_parameters() (floating, on their
  // device, in another dtype than `dtype`) and binds them to the model's layers. Build it
  // after the model is on its device (Module::to replaces the masters' storage). The copies
  // hold no values until refresh().
  ComputeCopies(Module& model, DType dtype);
  ~ComputeCopies();  // unbinds: the layers compute with the masters again
  ComputeCopies(const ComputeCopies&) = delete;
  ComputeCopies& operator=(const ComputeCopies&) = delete;

  // copies <- masters (cast), and the copies' gradients dropped. Run without recording.
  void refresh();
  // masters' grads += copies' grads (converted), copies' grads dropped.
  void accumulate_grads();
  // The same for copy i alone (a no-op when it holds no gradient): what a data-parallel
  // reducer runs the moment copy i's gradient is final (Note [Gradients produced elsewhere]
  // in distributed/reducer.h).
  void accumulate_grad(size_t i);

  DType dtype() const { return dtype_; }
  const NamedTensors& masters() const { return masters_; }
  const NamedTensors& copies() const { return copies_; }  // same names and order

 private:
  // The masters' and copies' pairs on the GPU, for one cast_many launch (false: none, or
  // some pair the multi-tensor cast does not take, which goes tensor by tensor).
  bool cast_many_ok(size_t i) const;

  Module& model_;
  DType dtype_;
  NamedTensors masters_, copies_;
  cuda::MultiTensorTable refresh_table_, accumulate_table_;  // the two lists on the device
};

}  // namespace rt::nn
