// Which cuDNN engines a convolution may use (Note [Conv numerics] in cudnn_conv.cu), as a
// pure host-only function of the key's settings, a strictness tier and the engine's notes,
// so that the CPU tests check it without a GPU or cuDNN.
//
//   EnginePolicy p{key.dtype, key.allow_tf32, key.benchmark, cudnn_benchmark_runtime_compiled()};
//   for (EngineTier t : kEngineTiers)                       // strict first
//     ... engine_rejection(p, t, notes) == Rejection::none  // usable in tier t
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/dtype.h"

namespace rt::cuda {

// cuDNN 9's cudnnBackendNumericalNote_t and cudnnBackendBehaviorNote_t (cudnn_graph.h), value
// for value; cudnn_conv.cu static_asserts that they match. Values this list lacks (a newer
// cuDNN) pass through the casts and count as notes the policy does not look at.
enum class NumericalNote : int {
  tensor_core = 0,
  down_convert_inputs = 1,
  reduced_precision_reduction = 2,
  fft = 3,
  nondeterministic = 4,
  winograd = 5,
  winograd_tile_4x4 = 6,
  winograd_tile_6x6 = 7,
  winograd_tile_13x13 = 8,
  strict_nan_prop = 9,
};
enum class BehaviorNote : int {
  runtime_compilation = 0,
  requires_filter_int8x32_reorder = 1,
  requires_bias_int8x32_reorder = 2,
  supports_cuda_graph_native_api = 3,
  cublaslt_dependency = 4,
};

struct EngineNotes {
  std::vector<NumericalNote> numerical;
  std::vector<BehaviorNote> behavior;
};

// The tiers a plan is looked for in, in this order; each allows what the one before allows
// and more. The first tier with an engine that finalizes for the key wins.
//   strict            no down-converted inputs, no reduced-precision reduction, f32 without
//                     TF32 unless allowed, deterministic
//   relaxed           + reduced-precision reduction for bf16/f16 (never for f32/f64)
//   nondeterministic  + non-deterministic engines
enum class EngineTier : uint8_t { strict, relaxed, nondeterministic };
inline constexpr EngineTier kEngineTiers[] = {EngineTier::strict, EngineTier::relaxed, EngineTier::nondeterministic};
const char* engine_tier_name(EngineTier t);

// What of a key and of the process-wide settings the decision depends on.
struct EnginePolicy {
  DType dtype = DType::f32;
  bool allow_tf32 = false;                  // f32: TF32 tensor-core engines allowed
  bool benchmark = false;                   // candidates are timed (runtime-compiled ones skipped ...)
  bool benchmark_runtime_compiled = false;  // ... unless this is on
};

// Why an engine is not usable, or Rejection::none. One reason per engine, the first of
// this order that applies.
enum class Rejection : uint8_t {
  none,
  down_convert_inputs,
  reduced_precision_reduction,
  tf32_not_allowed,
  nondeterministic,
  runtime_compiled,
};
inline constexpr int kRejectionCount = 6;
const char* rejection_name(Rejection r);  // "down-converted inputs", ...

Rejection engine_rejection(const EnginePolicy& p, EngineTier tier, const EngineNotes& notes);
inline bool engine_acceptable(const EnginePolicy& p, EngineTier tier, const EngineNotes& notes) {
  return engine_rejection(p, tier, notes) == Rejection::none;
}

bool has_note(const EngineNotes& notes, NumericalNote n);
bool has_note(const EngineNotes& notes, BehaviorNote n);

// first(key) is true the first time it sees `key` and false ever after, from any thread:
// for messages printed once per shape.
class OncePerKey {
 public:
  bool first(const std::string& key);

 private:
  std::mutex mu_;
  std::unordered_set<std::string> seen_;
};

}  // namespace rt::cuda
