#include "kernels/cuda/cudnn_policy.h"

#include <algorithm>

namespace rt::cuda {

static_assert(kRejectionCount == int(Rejection::runtime_compiled) + 1, "kRejectionCount: one per Rejection");

const char* engine_tier_name(EngineTier t) {
  switch (t) {
    case EngineTier::strict:
      return "strict";
    case EngineTier::relaxed:
      return "relaxed";
    case EngineTier::nondeterministic:
      return "nondeterministic";
  }
  return "?";
}

const char* rejection_name(Rejection r) {
  switch (r) {
    case Rejection::none:
      return "usable";
    case Rejection::down_convert_inputs:
      return "down-converted inputs";
    case Rejection::reduced_precision_reduction:
      return "reduced-precision reduction";
    case Rejection::tf32_not_allowed:
      return "TF32 tensor cores";
    case Rejection::nondeterministic:
      return "non-determinism";
    case Rejection::runtime_compiled:
      return "runtime compilation";
  }
  return "?";
}

bool has_note(const EngineNotes& notes, NumericalNote n) {
  return std::find(notes.numerical.begin(), notes.numerical.end(), n) != notes.numerical.end();
}

bool has_note(const EngineNotes& notes, BehaviorNote n) {
  return std::find(notes.behavior.begin(), notes.behavior.end(), n) != notes.behavior.end();
}

// Why an engine is not usable in a tier, or Rejection::none (Note [Conv numerics]).
Rejection engine_rejection(const EnginePolicy& p, EngineTier tier, const EngineNotes& notes) {
  const bool half = p.dtype == DType::bf16 || p.dtype == DType::f16;
  if (has_note(notes, NumericalNote::down_convert_inputs)) return Rejection::down_convert_inputs;
  if (has_note(notes, NumericalNote::reduced_precision_reduction) && !(half && tier >= EngineTier::relaxed))
    return Rejection::reduced_precision_reduction;
  if (p.dtype == DType::f32 && !p.allow_tf32 && has_note(notes, NumericalNote::tensor_core))
    return Rejection::tf32_not_allowed;
  if (has_note(notes, NumericalNote::nondeterministic) && tier < EngineTier::nondeterministic)
    return Rejection::nondeterministic;
  if (p.benchmark && !p.benchmark_runtime_compiled && has_note(notes, BehaviorNote::runtime_compilation))
    return Rejection::runtime_compiled;
  return Rejection::none;
}

bool OncePerKey::first(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  return seen_.insert(key).second;
}

}  // namespace rt::cuda
