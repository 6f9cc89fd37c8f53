// Which cuDNN engines a convolution may use (kernels/cuda/cudnn_policy.h,
// Note [Conv numerics]): every combination of the notes the rules look at, for every dtype,
// setting and tier, against the rules as written in the Note; then named cases, the tiers'
// order and the once-per-key message guard. Runs without a GPU.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cudnn_policy.h"

namespace rt {
namespace {

using cuda::BehaviorNote;
using cuda::EngineNotes;
using cuda::EnginePolicy;
using cuda::EngineTier;
using cuda::NumericalNote;
using cuda::Rejection;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The notes the rules look at, one bit each, plus notes they ignore (which change nothing).
enum Bit { kTensorCore = 1, kDownConvert = 2, kReducedPrecision = 4, kNondeterministic = 8, kRuntimeCompiled = 16 };
constexpr int kAllBits = 32;

EngineNotes notes_of(int bits) {
  EngineNotes n;
  n.numerical = {NumericalNote::fft, NumericalNote::winograd, NumericalNote::strict_nan_prop};
  n.behavior = {BehaviorNote::supports_cuda_graph_native_api, BehaviorNote::cublaslt_dependency};
  if (bits & kTensorCore) n.numerical.push_back(NumericalNote::tensor_core);
  if (bits & kDownConvert) n.numerical.push_back(NumericalNote::down_convert_inputs);
  if (bits & kReducedPrecision) n.numerical.push_back(NumericalNote::reduced_precision_reduction);
  if (bits & kNondeterministic) n.numerical.push_back(NumericalNote::nondeterministic);
  if (bits & kRuntimeCompiled) n.behavior.push_back(BehaviorNote::runtime_compilation);
  return n;
}

// Note [Conv numerics], rule by rule, in the order that gives the reason.
Rejection expected(const EnginePolicy& p, EngineTier t, int bits) {
  const bool half = p.dtype == DType::bf16 || p.dtype == DType::f16;
  if (bits & kDownConvert) return Rejection::down_convert_inputs;  // every dtype, every tier
  if ((bits & kReducedPrecision) && (!half || t == EngineTier::strict)) return Rejection::reduced_precision_reduction;
  if ((bits & kTensorCore) && p.dtype == DType::f32 && !p.allow_tf32) return Rejection::tf32_not_allowed;
  if ((bits & kNondeterministic) && t != EngineTier::nondeterministic) return Rejection::nondeterministic;
  if ((bits & kRuntimeCompiled) && p.benchmark && !p.benchmark_runtime_compiled) return Rejection::runtime_compiled;
  return Rejection::none;
}

std::vector<EnginePolicy> all_policies() {
  std::vector<EnginePolicy> v;
  for (DType t : kDTypes)
    for (int s = 0; s < 8; ++s) v.push_back({t, bool(s & 1), bool(s & 2), bool(s & 4)});
  return v;
}

std::string describe(const EnginePolicy& p, EngineTier t, int bits) {
  return std::string(dtype_name(p.dtype)) + (p.allow_tf32 ? " tf32" : "") + (p.benchmark ? " benchmark" : "") +
         (p.benchmark_runtime_compiled ? " +runtime-compiled" : "") + " tier " + cuda::engine_tier_name(t) + " notes " +
         std::to_string(bits);
}

TEST_CASE("every combination of notes, dtype, setting and tier follows Note [Conv numerics]") {
  int checked = 0;
  for (const EnginePolicy& p : all_policies())
    for (EngineTier t : cuda::kEngineTiers)
      for (int bits = 0; bits < kAllBits; ++bits) {
        const Rejection want = expected(p, t, bits);
        const Rejection got = cuda::engine_rejection(p, t, notes_of(bits));
        CHECK_MESSAGE(got == want, describe(p, t, bits), ": got '", cuda::rejection_name(got), "', want '",
                      cuda::rejection_name(want), "'");
        CHECK(cuda::engine_acceptable(p, t, notes_of(bits)) == (want == Rejection::none));
        ++checked;
      }
  CHECK(checked == 4 * 8 * 3 * kAllBits);
}

TEST_CASE("named cases") {
  const EnginePolicy f32{DType::f32}, bf16{DType::bf16}, f16{DType::f16}, f64{DType::f64};
  const EngineNotes plain, rpr = notes_of(kReducedPrecision), down = notes_of(kDownConvert), tc = notes_of(kTensorCore),
                           nondet = notes_of(kNondeterministic), rtc = notes_of(kRuntimeCompiled);
  // An engine without notes is strict.
  for (const EnginePolicy& p : {f32, bf16, f16, f64}) CHECK(cuda::engine_acceptable(p, EngineTier::strict, plain));
  // Reduced-precision reduction: relaxed tier, bf16/f16 only.
  CHECK_FALSE(cuda::engine_acceptable(bf16, EngineTier::strict, rpr));
  CHECK(cuda::engine_acceptable(bf16, EngineTier::relaxed, rpr));
  CHECK(cuda::engine_acceptable(f16, EngineTier::relaxed, rpr));
  CHECK_FALSE(cuda::engine_acceptable(f32, EngineTier::relaxed, rpr));
  CHECK_FALSE(cuda::engine_acceptable(f64, EngineTier::nondeterministic, rpr));
  CHECK_FALSE(cuda::engine_acceptable({DType::f32, true}, EngineTier::nondeterministic, rpr));  // TF32 or not
  // Down-converted inputs: never.
  for (EngineTier t : cuda::kEngineTiers)
    CHECK(cuda::engine_rejection(bf16, t, down) == Rejection::down_convert_inputs);
  // Tensor cores: f32 only with TF32 allowed; bf16/f16 always.
  CHECK(cuda::engine_rejection(f32, EngineTier::nondeterministic, tc) == Rejection::tf32_not_allowed);
  CHECK(cuda::engine_acceptable({DType::f32, true}, EngineTier::strict, tc));
  CHECK(cuda::engine_acceptable(bf16, EngineTier::strict, tc));
  // Non-deterministic: last tier only.
  CHECK(cuda::engine_rejection(f32, EngineTier::relaxed, nondet) == Rejection::nondeterministic);
  CHECK(cuda::engine_acceptable(f32, EngineTier::nondeterministic, nondet));
  // Runtime-compiled: skipped when benchmarking unless asked; used otherwise.
  CHECK(cuda::engine_acceptable(f32, EngineTier::strict, rtc));
  CHECK(cuda::engine_rejection({DType::f32, false, true}, EngineTier::strict, rtc) == Rejection::runtime_compiled);
  CHECK(cuda::engine_rejection({DType::f32, false, true}, EngineTier::nondeterministic, rtc) ==
        Rejection::runtime_compiled);
  CHECK(cuda::engine_acceptable({DType::f32, false, true, true}, EngineTier::strict, rtc));
  CHECK(cuda::engine_acceptable({DType::f32, false, false, true}, EngineTier::strict, rtc));
  // The first reason in the order of the Rejection enum is the one given.
  CHECK(cuda::engine_rejection(f32, EngineTier::strict, notes_of(kAllBits - 1)) == Rejection::down_convert_inputs);
  CHECK(cuda::engine_rejection(f32, EngineTier::strict, notes_of(kTensorCore | kNondeterministic)) ==
        Rejection::tf32_not_allowed);
  // Notes the policy does not know (a newer cuDNN) are ignored.
  EngineNotes unknown;
  unknown.numerical = {NumericalNote(99)};
  unknown.behavior = {BehaviorNote(99)};
  CHECK(cuda::engine_acceptable(f32, EngineTier::strict, unknown));
}

TEST_CASE("the tiers go from strict to loose, each allowing what the one before allows") {
  CHECK(cuda::kEngineTiers[0] == EngineTier::strict);
  CHECK(cuda::kEngineTiers[1] == EngineTier::relaxed);
  CHECK(cuda::kEngineTiers[2] == EngineTier::nondeterministic);
  for (const EnginePolicy& p : all_policies())
    for (int bits = 0; bits < kAllBits; ++bits)
      for (int t = 1; t < 3; ++t)
        if (cuda::engine_acceptable(p, cuda::kEngineTiers[t - 1], notes_of(bits)))
          CHECK_MESSAGE(cuda::engine_acceptable(p, cuda::kEngineTiers[t], notes_of(bits)),
                        describe(p, cuda::kEngineTiers[t], bits));
}

TEST_CASE("names: one per tier and per reason, all different") {
  std::set<std::string> names;
  for (EngineTier t : cuda::kEngineTiers) names.insert(cuda::engine_tier_name(t));
  for (int r = 0; r < cuda::kRejectionCount; ++r) names.insert(cuda::rejection_name(Rejection(r)));
  CHECK(names.size() == 3 + cuda::kRejectionCount);
  CHECK(names.count("?") == 0);
}

TEST_CASE("OncePerKey: true once per key, from any number of threads") {
  cuda::OncePerKey once;
  CHECK(once.first("conv2d forward bf16 NHWC x(2, 3, 8, 8)"));
  CHECK_FALSE(once.first("conv2d forward bf16 NHWC x(2, 3, 8, 8)"));
  CHECK(once.first("conv2d backward_data bf16 NHWC x(2, 3, 8, 8)"));

  std::atomic<int> firsts{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      for (int j = 0; j < 100; ++j)
        if (once.first("key " + std::to_string(j % 10))) ++firsts;
    });
  for (auto& t : threads) t.join();
  CHECK(firsts.load() == 10);
}

}  // namespace
}  // namespace rt
