// Tape-based reverse-mode autograd.
//
// Every differentiable op that runs while gradients are enabled and has an input that
// requires grad appends a Node to the tape: its position (seq), edges to the nodes or
// leaves that produced its inputs, and a backward closure that captures only what the
// backward formula needs. backward() collects the nodes reachable from the root and runs
// them in reverse tape order (a valid reverse topological order, since an op is always
// recorded after the ops that produced its inputs), then frees their closures and with
// them the saved tensors.
//
// Note [Gradient-ready hooks]
// A leaf's gradient is final once every node that consumed it has run. backward() counts
// those consumers up front and fires the leaf's hooks the moment its count reaches zero,
// while later nodes are still to run. Data-parallel training launches bucketed all-reduces
// from these hooks so communication overlaps the rest of backward.
//
// Note [Gradient buffers]
// A leaf may be given a preallocated buffer for its gradient (Tensor::set_grad_buffer), a
// view into a flat bucket that the data-parallel reducer all-reduces in one call. backward
// then writes the leaf's first gradient of a step into the buffer (a copy) and adds later
// ones to it, exactly as it would into a fresh tensor; no gradient is copied into or out of
// the bucket. zero_grad() only forgets that the buffer holds a gradient (grad() is undefined
// until the next backward writes it), so nothing is cleared per step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/profiler.h"
#include "engine/tensor.h"

namespace rt {

// Maps the gradient of an op's output to one gradient per recorded input; returns an
// undefined tensor where needs[i] is false (or where the gradient is zero by construction).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out, const std::vector<bool>& needs)>;

struct Edge {
  std::shared_ptr<Node> node;         // input produced by a recorded op, or
  std::shared_ptr<TensorImpl> leaf;   // input is a leaf that requires grad, or neither
};

struct Node {
  uint64_t seq = 0;         // position on the tape
  const char* name = "";    // op name, for error messages
  std::vector<Edge> inputs;
  BackwardFn backward;      // reset after it ran (unless the graph is retained)
  bool released = false;
  Tensor grad;              // gradient of the output, accumulated during backward
  Shape out_shape;          // for checking what flows back
  std::shared_ptr<const prof::BackwardInfo> profile;  // while profiling: who ran it, its cost
};

bool grad_enabled();

// Disables recording for its scope (evaluation, optimizer updates, backward itself).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when an op over `inputs` must be recorded.
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Records `out` as the result of op `name` over `inputs` (undefined inputs are skipped as
// non-differentiable). No-op when recording is off or no input requires grad.
void record(const char* name, Tensor& out, const std::vector<Tensor>& inputs, BackwardFn backward);

// Note [Gradients accumulated in place]
// A value used twice (a residual block's input feeds its first convolution and the
// identity path) receives two gradients, which backward() adds out of place: one more pass
// reading both and writing the sum (ResNet50 bf16: 16 adds, 8.6 GB a step, the kernel lab).
// A backward that can add its result into an existing tensor as it computes it (cuDNN's
// dgrad with beta = 1) asks accumulated_grad(i) while it runs: the gradient input i has
// already received, when nobody else holds it (its tensor and storage referenced only by the
// tape, no view, no offset), else undefined. It then adds its own into that tensor and
// returns that same tensor for input i, which backward() keeps as the sum without adding.
// The result differs from the out-of-place sum by rounding only (one rounding of the
// convolution plus the old value instead of two). set_accumulate_in_place(false) turns it
// off for the whole process (the fused-versus-unfused comparisons).
Tensor accumulated_grad(size_t input);
void set_accumulate_in_place(bool on);
bool accumulate_in_place();

}  // namespace rt
