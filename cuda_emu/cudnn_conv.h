// The computation behind the cuDNN fake's engines: a direct 2-D convolution (forward,
// backward data, backward filter) over host-addressable memory, any stride, padding,
// dilation and groups, any layout the element strides describe, f32/f64/bf16/f16, with the
// numerics of the engine that runs it. Independent of the engine's kernels/cpu code on
// purpose: the GPU tests compare the CUDA path with the CPU backend.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>

namespace rt::emu::cudnn {

enum class ConvOp : uint8_t { forward, backward_data, backward_filter };
const char* conv_op_name(ConvOp op);  // "forward", "backward data", "backward filter"

// One convolution, in the x / w / y slots of all three operations:
//   forward          y  = conv(x, w)       x, w read, y written
//   backward data    dx = conv^T(dy, w)    x slot written (dx), y slot read (dy)
//   backward filter  dw = corr(x, dy)      w slot written (dw), y slot read (dy)
// Strides are in elements, in (N, C, H, W) order for x and y and (O, C/groups, KH, KW) for w.
struct ConvProblem {
  ConvOp op = ConvOp::forward;
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;  // every tensor's
  int64_t N = 1, C = 1, H = 1, W = 1, O = 1, KH = 1, KW = 1, HO = 1, WO = 1, groups = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;  // ph/pw: padding before (cuDNN's pre-padding)
  bool flip = false;  // CUDNN_CONVOLUTION: the filter is applied flipped (cross-correlation: not)
  std::array<int64_t, 4> xs{}, ws{}, ys{};
  std::string str() const;  // for messages
};

// How an engine computes (Note [Fake engine numerics] in cudnn_engines.cc).
struct Numerics {
  enum class Input : uint8_t { exact, tf32, down_convert } input = Input::exact;
  // Accumulate in the storage type: every addition rounded to bf16/f16 (f32: float instead of
  // double; f64 unaffected).
  bool storage_accumulation = false;
  // > 1: the reduction is split in this many partial sums (float for f32, as atomics would
  // add them), added in an order rotated by `rotation`, as a split-K engine with atomics does.
  int splits = 1;
  uint64_t rotation = 0;
};

// Bytes of one element of `t` (0 for types the fake does not compute in).
size_t dtype_size(cudnnDataType_t t);
// The number of elements from the first to the last one the dims and strides reach.
int64_t extent_elements(const int64_t* dims, const int64_t* strides, int n);

// Runs the convolution: reads the input slots, writes out = alpha * result + beta * out
// (out not read when beta == 0), each output rounded once to the storage type.
void run_conv(const ConvProblem& p, const Numerics& num, const void* x, const void* w, const void* y, double alpha,
              double beta);

}  // namespace rt::emu::cudnn
