// conv2d on CUDA: forward, backward-data and backward-filter through cuDNN 9's backend
// (graph) API, plus the per-channel bias kernels. Readable by the host compiler.
//
// Note [Conv plans]
// A ConvKey names everything a cuDNN execution plan depends on (op kind, geometry, dtype,
// layout, pointer alignment, TF32, device). conv_plan() builds the plan once (operation
// graph -> mode-A heuristics -> the first engine config that finalizes and passes our
// numerical filter, strict tier first: Note [Conv numerics] in cudnn_conv.cu) and caches it
// per key; later calls are cache hits. The workspace is the caller's (the engine keeps one
// device-allocator buffer per device and grows it when a plan needs more:
// Note [Conv workspace] in engine/ops/conv2d.cc), so this library never allocates device
// memory.
//
// One tensor convention for all three ops (unique ids X=1, W=2, Y=3):
//   forward:         y  = conv(x, w)        x, w read; y written
//   backward_data:   dx = conv^T(dy, w)     x slot = dx (written), y slot = dy (read)
//   backward_filter: dw = corr(x, dy)       w slot = dw (written), y slot = dy (read)
// x/y (and dx/dy) are NCHW or NHWC (ConvKey::nhwc); the weight is (O, C/g, KH, KW) in the
// same layout: OIHW with NCHW, OHWI with NHWC.
//
// Note [Fused convolutions]
// cuDNN's runtime fusion (the graph API's runtime-compiled engines) can run a batch norm's
// apply and ReLU on a convolution's input as the convolution loads it, and sum each output
// channel and its squares as it stores the output, so that neither takes a pass of its own
// over the activation (the kernel lab's batch-norm apply and statistics passes):
//   prologue (ConvKey::prologue, forward and backward_filter)
//       x' = relu?(x * scale[c] + bias[c]), in f32 (scale, bias: f32, C values), rounded to
//       the convolution's dtype, as the unfused apply writes it; relu with prologue_relu.
//       The convolution then reads x' where it read x (backward_filter: dw = corr(x', dy)).
//   genstats (ConvKey::genstats, forward only)
//       sum[o] = sum of y, sqsum[o] = sum of y^2 over N, H, W, f32, O values each, of y as
//       stored (rounded to its dtype); the order of the additions is the engine's.
// The graph: POINTWISE MUL (x, scale) -> ADD (bias) [-> RELU_FWD] -> virtual x' -> the
// convolution -> y [-> GEN_STATS SUM_SQSUM -> sum, sqsum] (unique ids kScale.. in
// cudnn_conv.cu). Only runtime-fusion engines take such graphs (on a GPU: sm_80 and later,
// NHWC, 16-bit data); conv_fused_plan() answers null when no engine of the tiers of
// Note [Conv numerics] runs the key, and the caller runs the parts unfused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "base/dtype.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

enum class ConvKind : uint8_t { forward, backward_data, backward_filter };
const char* conv_kind_name(ConvKind k);

struct ConvKey {
  ConvKind kind = ConvKind::forward;
  int64_t N = 0, C = 0, H = 0, W = 0, O = 0, KH = 0, KW = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  DType dtype = DType::f32;
  bool nhwc = false;
  int align = 16;           // byte alignment every data pointer has (a power of two <= 16)
  bool allow_tf32 = false;  // f32 only: whether TF32 tensor-core engines may be chosen
  bool benchmark = false;   // plan chosen by timing the candidates (cudnn_benchmark())
  // beta = 1: the result is added to what the output already holds (a gradient accumulated in
  // place: Note [Gradients accumulated in place] in engine/autograd.h). Never benchmarked:
  // timing the candidates would add to the output once per candidate.
  bool accumulate = false;
  // The batch-norm prologue on x (forward, backward_filter), with or without its ReLU, and
  // the output statistics (forward): Note [Fused convolutions]. Never benchmarked.
  bool prologue = false, prologue_relu = false, genstats = false;
  int device = 0;

  bool fused() const { return prologue || genstats; }

  bool operator==(const ConvKey&) const = default;
  std::string str() const;
};

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const noexcept {
    size_t h = 1469598103934665603ull;
    auto mix = [&h](int64_t v) { h = (h ^ size_t(v)) * 1099511628211ull; };
    for (int64_t v : {int64_t(k.kind),
                      k.N,
                      k.C,
                      k.H,
                      k.W,
                      k.O,
                      k.KH,
                      k.KW,
                      k.sh,
                      k.sw,
                      k.ph,
                      k.pw,
                      k.dh,
                      k.dw,
                      k.groups,
                      int64_t(k.dtype),
                      int64_t(k.nhwc),
                      int64_t(k.align),
                      int64_t(k.allow_tf32),
                      int64_t(k.benchmark),
                      int64_t(k.accumulate),
                      int64_t(k.prologue),
                      int64_t(k.prologue_relu),
                      int64_t(k.genstats),
                      int64_t(k.device)})
      mix(v);
    return h;
  }
};

// The output size of a convolution along one axis.
inline int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// The largest power of two <= 16 dividing every pointer (nullptr counts as aligned).
int pointer_alignment(std::initializer_list<const void*> ptrs);

// TF32 for f32 convolutions (like torch.backends.cudnn.allow_tf32; the matmul flag is
// linear.h's set_allow_tf32): off by default, so f32 results match the CPU backend.
void set_cudnn_allow_tf32(bool on);
bool cudnn_allow_tf32();

// Benchmark mode (the CLI's --cudnn-benchmark; off by default): a key's plan is the
// fastest of the heuristic's first few candidates, timed on the first call's data, instead
// of the heuristic's first choice.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();
// Whether benchmarking also times engines cuDNN compiles at run time (the CLI's
// --cudnn-benchmark-runtime-compiled; off by default: each costs a compilation,
// Note [Conv numerics] in cudnn_conv.cu). Read when a key's plan is built, so set it before
// the first convolution: plans already cached keep their engine.
void set_cudnn_benchmark_runtime_compiled(bool on);
bool cudnn_benchmark_runtime_compiled();

struct ConvPlan;  // opaque: the cuDNN execution plan and what it needs

// What benchmarking a key needs: the first call's pointers (outputs are overwritten), its
// stream, and workspace of at least the given size (the engine's grown-on-demand buffer).
struct ConvBenchArgs {
  const void *x, *w, *y;
  cudaStream_t stream;
  std::function<void*(size_t)> workspace;
};

// The cached plan for `k` (built on first use; throws rt::Error naming the key when cuDNN
// offers no engine, e.g. an f64 shape without a double-precision engine). `bench` is needed
// when k.benchmark, unused otherwise.
const ConvPlan& conv_plan(const ConvKey& k, const ConvBenchArgs* bench = nullptr);
// A fused key's plan (Note [Fused convolutions]), or null when no engine runs the fused graph
// under the tiers of Note [Conv numerics] (cached too: asked once per key). conv_plan() of a
// fused key throws instead.
const ConvPlan* conv_fused_plan(const ConvKey& k);
size_t conv_workspace_bytes(const ConvPlan& p);
// The fused graph's other tensors (Note [Fused convolutions]); null where the key has none.
struct ConvFusedArgs {
  const void* scale = nullptr;  // (C) f32, the prologue's
  const void* bias = nullptr;   // (C) f32
  void* sum = nullptr;          // (O) f32, genstats' outputs
  void* sqsum = nullptr;        // (O) f32
};
// Runs the plan on `s` (the device's cuDNN handle is set to `s`). `workspace` holds at
// least conv_workspace_bytes(p) bytes (may be null when that is 0).
void conv_execute(const ConvPlan& p, const void* x, const void* w, const void* y, void* workspace, cudaStream_t s,
                  const ConvFusedArgs& fused = {});

struct ConvCacheStats {
  int64_t hits = 0, misses = 0, size = 0;
  int64_t fused = 0;  // of size: fused keys with a plan (conv_fused_plan found an engine)
};
ConvCacheStats conv_cache_stats();

// ---- bias --------------------------------------------------------------------------
// y[n, c, s] += bias[c]  (S = HO*WO; layout by nhwc).
void conv_bias_add(DType t, int64_t N, int64_t C, int64_t S, bool nhwc, void* y, const void* bias, cudaStream_t s);
// db[c] = sum over n, s of dy[n, c, s]: one block per channel, a fixed summation order
// (deterministic), accumulated in float (double for f64).
void conv_bias_grad(DType t, int64_t N, int64_t C, int64_t S, bool nhwc, const void* dy, void* db, cudaStream_t s);

}  // namespace rt::cuda
