// conv2d through cuDNN 9's backend API: tensor/convolution/operation descriptors, an
// operation graph, mode-A heuristics (then the fallback list), the first engine config
// that finalizes and passes the numerical filter, cached per ConvKey (Note [Conv plans]
// in conv2d.h).
//
// Note [Conv numerics]
// The engines the heuristics offer are filtered by engine_rejection() (cudnn_policy.h,
// tested on the CPU) in three tiers, and the first tier in which an engine finalizes for
// the key gives its plan:
//   strict            engines whose notes say they down-convert inputs or reduce in reduced
//                     precision are refused (bf16/f16 accumulate in f32, like the rest of the
//                     backend); for f32, tensor-core engines (TF32) only when
//                     cudnn_allow_tf32(); deterministic engines only (runs repeat bit for bit).
//   relaxed           bf16/f16 only: reduced-precision reduction allowed, for shapes no strict
//                     engine takes (e.g. odd channel counts in NHWC). stderr says so once per
//                     key. Never for f32/f64; down-converted inputs stay refused.
//   nondeterministic  non-deterministic engines too, when no deterministic one exists.
// When no tier has an engine, the error says how many configs were offered, how many did
// not finalize and why the others were refused.
// Runtime-compiled engines (behaviour note RUNTIME_COMPILATION: NVRTC compiles them when
// their plan is built, which can take seconds) are left out of benchmarking, which would
// compile every candidate, unless cudnn_benchmark_runtime_compiled()
// (--cudnn-benchmark-runtime-compiled). Without benchmarking they are used like any other
// engine when the heuristics rank them first, and when benchmarking finds nothing but
// runtime-compiled engines in a tier, the first of them is used, untimed: compiling one
// engine once is better than failing.
//
// Note [Leaked handles]
// The cuDNN handles and the plan cache live until the process ends and are never destroyed:
// destroying them from static destructors races the CUDA runtime's own teardown. The
// descriptors inside are RAII (detail::Desc) all the same.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/conv2d.h"
#include "kernels/cuda/cudnn_backend.cuh"
#include "kernels/cuda/cudnn_policy.h"

namespace rt::cuda {

using detail::Desc;

struct ConvPlan {
  ConvKey key;
  Desc plan;
  int64_t workspace = 0;
  EngineNotes notes;  // the engine's (Note [Conv numerics])
  // The descriptors the plan was built from (tensors, convolution, operation, graph, engine
  // config), kept alive as long as the plan, as cudnn-frontend does.
  std::vector<Desc> sources;
};

namespace {

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_benchmark_runtime_compiled{false};
constexpr int kMaxBenchmarkCandidates = 8;  // the heuristic's best few
constexpr int kBenchmarkRuns = 3;

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };
// The fused graph's (Note [Fused convolutions] in conv2d.h): tensors the variant pack binds,
// then the prologue's virtual ones (real cuDNN links the operations by these ids).
enum FusedUid : int64_t { kScale = 4, kBias = 5, kSum = 6, kSqsum = 7, kScaled = 8, kShifted = 9, kActivated = 10 };

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      RT_FAIL("conv2d: the CUDA backend convolves f32, f64, bf16 or f16, got ", dtype_name(t));
  }
}

// Strides of a (D0, D1, D2, D3) tensor: D1 innermost when channels_last, else D3.
std::vector<int64_t> strides(const std::vector<int64_t>& d, bool nhwc) {
  if (nhwc) return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

Desc tensor_desc(int64_t uid, cudnnDataType_t t, const std::vector<int64_t>& dims, bool nhwc, int64_t align,
                 bool is_virtual = false) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides(dims, nhwc))
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align);
  if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true);
  d.finalize();
  return d;
}

Desc tensor_desc(Uid uid, const ConvKey& k, const std::vector<int64_t>& dims) {
  return tensor_desc(uid, cudnn_dtype(k.dtype), dims, k.nhwc, k.align);
}

// ---- the fused graph's other operations (Note [Fused convolutions] in conv2d.h) ----------

Desc pointwise_op(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y, std::vector<Desc>& keep) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  pw.finalize();
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.finalize();
  keep.push_back(std::move(pw));
  return op;
}

// The prologue x' = relu?(x * scale + bias): its operations appended to `ops` (their
// descriptors and tensors to `keep`); returns x', the convolution's input. Per-channel
// tensors are f32 (1, C, 1, 1); the products and sums stay f32, x' has the data's dtype.
Desc prologue(const ConvKey& k, const Desc& x, std::vector<Desc>& ops, std::vector<Desc>& keep) {
  const std::vector<int64_t> per_c = {1, k.C, 1, 1}, dims = {k.N, k.C, k.H, k.W};
  const int64_t f32_align = std::max<int64_t>(k.align, 4);  // an f32 pointer is 4-aligned whatever the data's are
  Desc scale = tensor_desc(kScale, CUDNN_DATA_FLOAT, per_c, k.nhwc, f32_align);
  Desc bias = tensor_desc(kBias, CUDNN_DATA_FLOAT, per_c, k.nhwc, f32_align);
  Desc scaled = tensor_desc(kScaled, CUDNN_DATA_FLOAT, dims, k.nhwc, 16, true);
  Desc shifted = tensor_desc(kShifted, k.prologue_relu ? CUDNN_DATA_FLOAT : cudnn_dtype(k.dtype), dims, k.nhwc, 16, true);
  ops.push_back(pointwise_op(CUDNN_POINTWISE_MUL, x, &scale, scaled, keep));
  ops.push_back(pointwise_op(CUDNN_POINTWISE_ADD, scaled, &bias, shifted, keep));
  Desc out;
  if (k.prologue_relu) {
    out = tensor_desc(kActivated, cudnn_dtype(k.dtype), dims, k.nhwc, 16, true);
    ops.push_back(pointwise_op(CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, out, keep));
    keep.push_back(std::move(shifted));
  } else {
    out = std::move(shifted);
  }
  for (Desc* d : {&scale, &bias, &scaled}) keep.push_back(std::move(*d));
  return out;
}

// GEN_STATS over y: sum and sum of squares per output channel, f32 (1, O, 1, 1).
Desc genstats(const ConvKey& k, const Desc& y, std::vector<Desc>& keep) {
  const std::vector<int64_t> per_o = {1, k.O, 1, 1};
  const int64_t f32_align = std::max<int64_t>(k.align, 4);
  Desc sum = tensor_desc(kSum, CUDNN_DATA_FLOAT, per_o, k.nhwc, f32_align);
  Desc sqsum = tensor_desc(kSqsum, CUDNN_DATA_FLOAT, per_o, k.nhwc, f32_align);
  Desc op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
  op.finalize();
  keep.push_back(std::move(sum));
  keep.push_back(std::move(sqsum));
  return op;
}

// ---- handles -----------------------------------------------------------------------

struct DeviceHandle {
  std::mutex mu;  // cudnnSetStream + execute must not interleave between threads
  cudnnHandle_t handle = nullptr;
};

DeviceHandle& handle_for(int device) {
  static std::mutex mu;
  static auto* handles = new std::unordered_map<int, std::unique_ptr<DeviceHandle>>();  // Note [Leaked handles]
  std::lock_guard<std::mutex> g(mu);
  auto& h = (*handles)[device];
  if (!h) {
    int cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    RT_CHECK(cur == device, "conv2d: the tensors are on cuda:", device, " but the current device is cuda:", cur);
    auto fresh = std::make_unique<DeviceHandle>();
    CUDNN_CHECK(cudnnCreate(&fresh->handle));
    h = std::move(fresh);
  }
  return *h;
}

// ---- plan building -----------------------------------------------------------------

// cudnn_policy.h's note enums are cuDNN's, value for value.
static_assert(int(NumericalNote::tensor_core) == CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
static_assert(int(NumericalNote::down_convert_inputs) == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
static_assert(int(NumericalNote::reduced_precision_reduction) == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION);
static_assert(int(NumericalNote::fft) == CUDNN_NUMERICAL_NOTE_FFT);
static_assert(int(NumericalNote::nondeterministic) == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
static_assert(int(NumericalNote::winograd) == CUDNN_NUMERICAL_NOTE_WINOGRAD);
static_assert(int(NumericalNote::winograd_tile_4x4) == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4);
static_assert(int(NumericalNote::winograd_tile_6x6) == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6);
static_assert(int(NumericalNote::winograd_tile_13x13) == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13);
static_assert(int(NumericalNote::strict_nan_prop) == CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP);
static_assert(int(BehaviorNote::runtime_compilation) == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION);
static_assert(int(BehaviorNote::requires_filter_int8x32_reorder) ==
              CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER);
static_assert(int(BehaviorNote::requires_bias_int8x32_reorder) == CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER);
static_assert(int(BehaviorNote::supports_cuda_graph_native_api) == CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API);
static_assert(int(BehaviorNote::cublaslt_dependency) == CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY);

// The numerical and behaviour notes of the engine of `cfg`.
EngineNotes notes_of(cudnnBackendDescriptor_t cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  const auto numerical = detail::get_array<cudnnBackendNumericalNote_t>(
      e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  const auto behavior = detail::get_array<cudnnBackendBehaviorNote_t>(
      e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT);
  EngineNotes notes;
  for (auto v : numerical) notes.numerical.push_back(NumericalNote(v));
  for (auto v : behavior) notes.behavior.push_back(BehaviorNote(v));
  return notes;
}

// The engine configs the heuristics of `mode` propose for `graph`, best first.
std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                       &count, nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (count > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                         count, &got, raw.data()));
  cfgs.resize(size_t(got));
  return cfgs;
}

Desc variant_pack(const void* x, const void* w, const void* y, void* workspace, const ConvKey& k,
                  const ConvFusedArgs& f = {}) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  std::vector<int64_t> uids = {kX, kW, kY};
  std::vector<void*> ptrs = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  if (k.prologue) {
    uids.insert(uids.end(), {kScale, kBias});
    ptrs.insert(ptrs.end(), {const_cast<void*>(f.scale), const_cast<void*>(f.bias)});
  }
  if (k.genstats) {
    uids.insert(uids.end(), {kSum, kSqsum});
    ptrs.insert(ptrs.end(), {f.sum, f.sqsum});
  }
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
  pack.finalize();
  return pack;
}

// The index of the fastest candidate on the caller's data: one warm-up run, then the best
// of kBenchmarkRuns timed with events. A candidate whose workspace cannot be had or whose
// run fails is skipped. Outputs are overwritten (the caller runs the chosen plan after).
size_t fastest(const std::vector<std::unique_ptr<ConvPlan>>& cands, cudnnHandle_t handle, const ConvBenchArgs& b) {
  DeviceHandle& h = handle_for(cands[0]->key.device);
  std::lock_guard<std::mutex> g(h.mu);
  CUDNN_CHECK(cudnnSetStream(handle, b.stream));
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  size_t best = 0;
  float best_ms = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    float ms = -1;
    try {
      void* ws = cands[i]->workspace > 0 ? b.workspace(size_t(cands[i]->workspace)) : nullptr;
      const Desc pack = variant_pack(b.x, b.w, b.y, ws, cands[i]->key);
      if (cudnnBackendExecute(handle, cands[i]->plan.get(), pack.get()) != CUDNN_STATUS_SUCCESS) continue;
      for (int r = 0; r < kBenchmarkRuns; ++r) {
        CUDA_CHECK(cudaEventRecord(start, b.stream));
        CUDNN_CHECK(cudnnBackendExecute(handle, cands[i]->plan.get(), pack.get()));
        CUDA_CHECK(cudaEventRecord(stop, b.stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
        if (ms < 0 || t < ms) ms = t;
      }
    } catch (const Error& e) {
      fprintf(stderr, "conv2d benchmark: skipping a candidate for %s: %s\n", cands[i]->key.str().c_str(), e.what());
      continue;
    }
    if (ms >= 0 && (best_ms < 0 || ms < best_ms)) best = i, best_ms = ms;
  }
  CUDA_WARN(cudaEventDestroy(start));
  CUDA_WARN(cudaEventDestroy(stop));
  return best;
}

// One engine config the heuristics offered, and its engine's notes.
struct Offer {
  Desc cfg;
  EngineNotes notes;
  bool tried = false;  // its plan was built, or did not finalize, in an earlier pass
};

// Appends the plans of the untried offers that `tier` accepts, in order, until `cands`
// holds `limit`. An offer whose plan does not finalize (the config does not fit the key)
// is passed over.
void collect(const ConvKey& k, cudnnHandle_t handle, std::vector<Offer>& offers, const EnginePolicy& policy,
             EngineTier tier, size_t limit, std::vector<std::unique_ptr<ConvPlan>>& cands) {
  for (Offer& o : offers) {
    if (cands.size() >= limit) return;
    if (o.tried || !engine_acceptable(policy, tier, o.notes)) continue;
    o.tried = true;
    auto p = std::make_unique<ConvPlan>();
    p->key = k;
    p->plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    p->plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, o.cfg);
    if (p->plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                         &n, &p->workspace));
    p->notes = o.notes;
    p->sources.push_back(std::move(o.cfg));
    cands.push_back(std::move(p));
  }
}

struct Found {
  std::vector<std::unique_ptr<ConvPlan>> cands;  // empty: no tier has a usable engine
  EngineTier tier = EngineTier::strict;          // the tier they come from
};

// The candidates of the first tier that has any (Note [Conv numerics]): one plan, or up to
// kMaxBenchmarkCandidates when benchmarking.
Found search(const ConvKey& k, cudnnHandle_t handle, std::vector<Offer>& offers, const EnginePolicy& policy) {
  EnginePolicy untimed = policy;
  untimed.benchmark = false;
  Found f;
  for (EngineTier tier : kEngineTiers) {
    f.tier = tier;
    collect(k, handle, offers, policy, tier, policy.benchmark ? kMaxBenchmarkCandidates : 1, f.cands);
    // Only runtime-compiled engines fit: the first of them, untimed, rather than a looser tier.
    if (f.cands.empty() && policy.benchmark && !policy.benchmark_runtime_compiled)
      collect(k, handle, offers, untimed, tier, 1, f.cands);
    if (!f.cands.empty()) break;
  }
  return f;
}

// For the error when no tier has a usable engine: what the heuristics offered and what
// became of it.
std::string what_was_tried(const std::vector<Offer>& offers, const EnginePolicy& policy) {
  if (offers.empty()) return " (the heuristics, mode A and the fallback list, offered no engine config)";
  int unfit = 0, refused[kRejectionCount] = {};
  for (const Offer& o : offers) {
    if (o.tried)
      ++unfit;
    else
      ++refused[int(engine_rejection(policy, EngineTier::nondeterministic, o.notes))];
  }
  std::ostringstream os;
  os << " (tried the " << offers.size() << " engine configs of heuristics mode A and the fallback list under the";
  for (EngineTier t : kEngineTiers) os << (t == EngineTier::strict ? " " : ", ") << engine_tier_name(t);
  os << " rules: " << unfit << " did not finalize for this key";
  for (int r = 1; r < kRejectionCount; ++r)
    if (refused[r] > 0) os << ", " << refused[r] << " refused for " << rejection_name(Rejection(r));
  os << ")";
  return os.str();
}

// What a key may not ask for, whatever cuDNN offers.
void check_key(const ConvKey& k, const ConvBenchArgs* bench) {
  RT_CHECK(!k.benchmark || bench, "conv2d: benchmarking ", k.str(), " needs its data (ConvBenchArgs)");
  RT_CHECK(!(k.benchmark && k.accumulate), "conv2d: ", k.str(), " accumulates into its output: it cannot be benchmarked");
  RT_CHECK(!(k.benchmark && k.fused()), "conv2d: ", k.str(), " is fused: fused keys are not benchmarked");
  RT_CHECK(!k.prologue || k.kind != ConvKind::backward_data, "conv2d: ", k.str(),
           ": the prologue applies to the input x, which backward_data writes (Note [Fused convolutions])");
  RT_CHECK(!k.genstats || k.kind == ConvKind::forward, "conv2d: ", k.str(), ": genstats needs the forward's y");
  RT_CHECK(!k.prologue_relu || k.prologue, "conv2d: ", k.str(), ": prologue_relu without the prologue");
  RT_CHECK(!k.fused() || k.groups == 1, "conv2d: ", k.str(), ": fused convolutions are not grouped");
}

// The plan for `k` (check_key first), or an error naming what was tried.
std::unique_ptr<ConvPlan> build_plan(const ConvKey& k, cudnnHandle_t handle, const ConvBenchArgs* bench) {
  const int64_t HO = conv_out_size(k.H, k.KH, k.sh, k.ph, k.dh), WO = conv_out_size(k.W, k.KW, k.sw, k.pw, k.dw);
  Desc x = tensor_desc(kX, k, {k.N, k.C, k.H, k.W});
  Desc w = tensor_desc(kW, k, {k.O, k.C / k.groups, k.KH, k.KW});  // groups: from C / w's C
  Desc y = tensor_desc(kY, k, {k.N, k.O, HO, WO});

  const bool f64 = k.dtype == DType::f64;
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{k.dh, k.dw})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{k.sh, k.sw})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{k.ph, k.pw})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{k.ph, k.pw});
  conv.finalize();

  std::vector<Desc> ops, keep;  // the fused graph's other operations, and what they were built from
  Desc x_in;
  if (k.prologue) x_in = prologue(k, x, ops, keep);
  Desc op;
  const double beta_v = k.accumulate ? 1.0 : 0.0;
  auto scalars = [&](cudnnBackendAttributeName_t alpha, cudnnBackendAttributeName_t beta) {
    if (f64)
      op.set(alpha, CUDNN_TYPE_DOUBLE, 1.0).set(beta, CUDNN_TYPE_DOUBLE, beta_v);
    else
      op.set(alpha, CUDNN_TYPE_FLOAT, 1.0f).set(beta, CUDNN_TYPE_FLOAT, float(beta_v));
  };
  switch (k.kind) {
    case ConvKind::forward:
      op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, k.prologue ? x_in : x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
      scalars(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA);
      break;
    case ConvKind::backward_data:
      op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv);
      scalars(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA);
      break;
    case ConvKind::backward_filter:
      op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, k.prologue ? x_in : x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv);
      scalars(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA);
      break;
  }
  op.finalize();

  if (k.genstats) ops.push_back(genstats(k, y, keep));
  std::vector<cudnnBackendDescriptor_t> all = {op.get()};
  for (const Desc& o : ops) all.push_back(o.get());
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, all)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  if (const cudnnStatus_t st = graph.try_finalize(); st != CUDNN_STATUS_SUCCESS)
    RT_FAIL("conv2d: cuDNN does not take the operation graph of ", k.str(), ": ", cudnnGetErrorString(st), " (",
            detail::cudnn_last_error(), ")");

  // Mode A first, then the fallback list, in tiers (Note [Conv numerics]). Without
  // benchmarking the first plan that finalizes wins; with it, up to kMaxBenchmarkCandidates
  // plans of the first tier that has any are built, and the fastest on the caller's data wins.
  std::vector<Offer> offers;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
    for (Desc& cfg : engine_configs(graph, mode)) {
      EngineNotes notes = notes_of(cfg.get());
      offers.push_back({std::move(cfg), std::move(notes)});
    }
  const EnginePolicy policy{k.dtype, k.allow_tf32, k.benchmark, cudnn_benchmark_runtime_compiled()};
  auto [cands, tier] = search(k, handle, offers, policy);
  RT_CHECK(
      !cands.empty(), "conv2d: cuDNN offers no usable engine for ", k.str(),
      k.dtype == DType::f64 ? " (cuDNN has few double-precision engines: convert to f32)" : "",
      k.dtype == DType::f32 && !k.allow_tf32 ? " (TF32 engines are excluded: cuda::set_cudnn_allow_tf32(true))" : "",
      what_was_tried(offers, policy));
  const size_t best = k.benchmark && cands.size() > 1 ? fastest(cands, handle, *bench) : 0;
  std::unique_ptr<ConvPlan> p = std::move(cands[best]);
  static OncePerKey relaxed_reported;
  if (tier != EngineTier::strict && has_note(p->notes, NumericalNote::reduced_precision_reduction) &&
      relaxed_reported.first(k.str()))
    fprintf(stderr,
            "conv2d: cuDNN has no strict engine for %s; using one whose reductions may be in reduced precision "
            "(printed once per shape)\n",
            k.str().c_str());
  for (Desc* d : {&x, &w, &y, &conv, &x_in, &op, &graph}) p->sources.push_back(std::move(*d));
  for (std::vector<Desc>* v : {&ops, &keep})
    for (Desc& d : *v) p->sources.push_back(std::move(d));
  return p;
}

// ---- the cache ---------------------------------------------------------------------

struct PlanCache {
  std::mutex mu;
  std::unordered_map<ConvKey, std::unique_ptr<ConvPlan>, ConvKeyHash> plans;
  int64_t hits = 0, misses = 0;
};

PlanCache& cache() {
  static auto* c = new PlanCache();  // Note [Leaked handles]
  return *c;
}

}  // namespace

const char* conv_kind_name(ConvKind k) {
  switch (k) {
    case ConvKind::forward:
      return "forward";
    case ConvKind::backward_data:
      return "backward_data";
    case ConvKind::backward_filter:
      return "backward_filter";
  }
  return "?";
}

std::string ConvKey::str() const {
  std::ostringstream os;
  os << "conv2d " << conv_kind_name(kind) << " " << dtype_name(dtype) << (nhwc ? " NHWC" : " NCHW") << " x(" << N
     << ", " << C << ", " << H << ", " << W << ") w(" << O << ", " << C / groups << ", " << KH << ", " << KW
     << ") stride (" << sh << ", " << sw << ") padding (" << ph << ", " << pw << ") dilation (" << dh << ", " << dw
     << ") groups " << groups << " align " << align << (allow_tf32 ? " tf32" : "") << (benchmark ? " benchmark" : "")
     << (accumulate ? " accumulate" : "") << (prologue ? (prologue_relu ? " +scale_bias_relu" : " +scale_bias") : "")
     << (genstats ? " +genstats" : "") << " on cuda:" << device;
  return os.str();
}

int pointer_alignment(std::initializer_list<const void*> ptrs) {
  int a = 16;
  for (const void* p : ptrs) {
    const auto v = reinterpret_cast<uintptr_t>(p);
    while (p && v % uintptr_t(a) != 0) a /= 2;
  }
  return a;
}

void set_cudnn_allow_tf32(bool on) { g_allow_tf32.store(on); }
bool cudnn_allow_tf32() { return g_allow_tf32.load(); }
void set_cudnn_benchmark(bool on) { g_benchmark.store(on); }
bool cudnn_benchmark() { return g_benchmark.load(); }
void set_cudnn_benchmark_runtime_compiled(bool on) { g_benchmark_runtime_compiled.store(on); }
bool cudnn_benchmark_runtime_compiled() { return g_benchmark_runtime_compiled.load(); }

namespace {

// The cached plan of `k`, built on a miss. With `may_fail` (a fused key, conv_fused_plan) a key
// cuDNN cannot plan, whether its graph or every engine is refused, is cached as null: the
// caller runs the parts unfused, and the search is not repeated.
const ConvPlan* cached_plan(const ConvKey& k, const ConvBenchArgs* bench, bool may_fail) {
  check_key(k, bench);
  PlanCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.plans.find(k);
  if (it != c.plans.end() && (it->second || may_fail)) {
    ++c.hits;
    return it->second.get();
  }
  ++c.misses;
  cudnnHandle_t handle = handle_for(k.device).handle;
  std::unique_ptr<ConvPlan> p;
  if (!may_fail) {
    p = build_plan(k, handle, bench);
  } else {
    try {
      p = build_plan(k, handle, bench);
    } catch (const Error&) {
      p = nullptr;  // the graph or every engine refused: unfused
    }
  }
  return (c.plans[k] = std::move(p)).get();
}

}  // namespace

const ConvPlan& conv_plan(const ConvKey& k, const ConvBenchArgs* bench) { return *cached_plan(k, bench, false); }

const ConvPlan* conv_fused_plan(const ConvKey& k) {
  RT_CHECK(k.fused(), "conv_fused_plan: ", k.str(), " has no fusion; use conv_plan");
  return cached_plan(k, nullptr, true);
}

size_t conv_workspace_bytes(const ConvPlan& p) { return size_t(p.workspace); }

void conv_execute(const ConvPlan& p, const void* x, const void* w, const void* y, void* workspace, cudaStream_t s,
                  const ConvFusedArgs& f) {
  RT_CHECK(x && w && y, "conv2d: null pointer for ", p.key.str());
  RT_CHECK(workspace || p.workspace == 0, "conv2d: ", p.workspace, " bytes of workspace needed, none given");
  RT_CHECK(!p.key.prologue || (f.scale && f.bias), "conv2d: ", p.key.str(), " needs the prologue's scale and bias");
  RT_CHECK(!p.key.genstats || (f.sum && f.sqsum), "conv2d: ", p.key.str(), " needs genstats' sum and sqsum");
  const Desc pack = variant_pack(x, w, y, workspace, p.key, f);
  DeviceHandle& h = handle_for(p.key.device);
  std::lock_guard<std::mutex> g(h.mu);
  CUDNN_CHECK(cudnnSetStream(h.handle, s));
  CUDNN_CHECK(cudnnBackendExecute(h.handle, p.plan.get(), pack.get()));
}

ConvCacheStats conv_cache_stats() {
  PlanCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  int64_t fused = 0;
  for (const auto& [k, p] : c.plans) fused += k.fused() && p ? 1 : 0;
  return {c.hits, c.misses, int64_t(c.plans.size()), fused};
}

}  // namespace rt::cuda
