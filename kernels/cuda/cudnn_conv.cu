// conv2d through cuDNN 9's backend API: tensor/convolution/operation descriptors, an
// operation graph, mode-A heuristics (then the fallback list), the first engine config
// that finalizes and passes the numerical filter, cached per ConvKey (Note [Conv plans]
// in conv2d.cuh).
//
// Note [Conv numerics]: engines whose notes say they down-convert inputs or reduce in reduced
// precision are never used (bf16/f16 accumulate in f32, like the rest of the backend);
// for f32, tensor-core engines (TF32) only when cudnn_allow_tf32(); non-deterministic engines
// only when no deterministic one exists for the key (runs then repeat bit for bit).
//
// Note [Leaked handles]: the cuDNN handles and the plan cache live until the process ends
// and are never destroyed: destroying them from static destructors races the CUDA
// runtime's own teardown. The descriptors inside are RAII (detail::Desc) all the same.
#include <atomic>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/conv2d.cuh"
#include "kernels/cuda/cudnn_backend.h"

namespace rt::cuda {

using detail::Desc;

struct ConvPlan {
  ConvKey key;
  Desc plan;
  int64_t workspace = 0;
  // The descriptors the plan was built from (tensors, convolution, operation, graph, engine
  // config), kept alive as long as the plan, as cudnn-frontend does.
  std::vector<Desc> sources;
};

namespace {

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_benchmark{false};
constexpr int kMaxBenchmarkCandidates = 8;  // the heuristic's best few
constexpr int kBenchmarkRuns = 3;

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };

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

Desc tensor_desc(Uid uid, const ConvKey& k, const std::vector<int64_t>& dims) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, cudnn_dtype(k.dtype))
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides(dims, k.nhwc))
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, int64_t(uid))
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(k.align));
  d.finalize();
  return d;
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

bool has_note(const std::vector<cudnnBackendNumericalNote_t>& notes, cudnnBackendNumericalNote_t n) {
  for (auto v : notes)
    if (v == n) return true;
  return false;
}

std::vector<cudnnBackendNumericalNote_t> notes_of(cudnnBackendDescriptor_t cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t n = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e));
  std::vector<cudnnBackendNumericalNote_t> notes(CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  CUDNN_CHECK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       int64_t(notes.size()), &n, notes.data()));
  notes.resize(size_t(n));
  return notes;
}

// Note [Conv numerics].
bool acceptable(const ConvKey& k, const std::vector<cudnnBackendNumericalNote_t>& notes, bool allow_nondet) {
  if (has_note(notes, CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) ||
      has_note(notes, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION))
    return false;
  if (k.dtype == DType::f32 && !k.allow_tf32 && has_note(notes, CUDNN_NUMERICAL_NOTE_TENSOR_CORE)) return false;
  if (!allow_nondet && has_note(notes, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)) return false;
  return true;
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

Desc variant_pack(const void* x, const void* w, const void* y, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const std::vector<int64_t> uids = {kX, kW, kY};
  const std::vector<void*> ptrs = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
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
      const Desc pack = variant_pack(b.x, b.w, b.y, ws);
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

std::unique_ptr<ConvPlan> build_plan(const ConvKey& k, cudnnHandle_t handle, const ConvBenchArgs* bench) {
  const int64_t HO = conv_out_size(k.H, k.KH, k.sh, k.ph, k.dh), WO = conv_out_size(k.W, k.KW, k.sw, k.pw, k.dw);
  RT_CHECK(!k.benchmark || bench, "conv2d: benchmarking ", k.str(), " needs its data (ConvBenchArgs)");
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

  Desc op;
  auto scalars = [&](cudnnBackendAttributeName_t alpha, cudnnBackendAttributeName_t beta) {
    if (f64)
      op.set(alpha, CUDNN_TYPE_DOUBLE, 1.0).set(beta, CUDNN_TYPE_DOUBLE, 0.0);
    else
      op.set(alpha, CUDNN_TYPE_FLOAT, 1.0f).set(beta, CUDNN_TYPE_FLOAT, 0.0f);
  };
  switch (k.kind) {
    case ConvKind::forward:
      op = Desc(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
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
      op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y)
          .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv);
      scalars(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA);
      break;
  }
  op.finalize();

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op).set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle);
  graph.finalize();

  // Mode A first, then the fallback list; deterministic engines first (Note [Conv numerics]).
  // Without benchmarking the first plan that finalizes wins; with it, every candidate of the
  // first pass that has any is built, and the fastest on the caller's data wins.
  std::vector<std::unique_ptr<ConvPlan>> cands;
  for (bool allow_nondet : {false, true}) {
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      for (Desc& cfg : engine_configs(graph, mode)) {
        if (!acceptable(k, notes_of(cfg.get()), allow_nondet)) continue;
        auto p = std::make_unique<ConvPlan>();
        p->key = k;
        p->plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        p->plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
            .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
        if (p->plan.try_finalize() != CUDNN_STATUS_SUCCESS) continue;  // this config does not fit the key
        int64_t n = 0;
        CUDNN_CHECK(cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                             1, &n, &p->workspace));
        p->sources.push_back(std::move(cfg));
        cands.push_back(std::move(p));
        if (!k.benchmark || int(cands.size()) >= kMaxBenchmarkCandidates) break;
      }
      if (!cands.empty() && (!k.benchmark || int(cands.size()) >= kMaxBenchmarkCandidates)) break;
    }
    if (!cands.empty()) break;
  }
  RT_CHECK(
      !cands.empty(), "conv2d: cuDNN offers no usable engine for ", k.str(),
      k.dtype == DType::f64 ? " (cuDNN has few double-precision engines: convert to f32)" : "",
      k.dtype == DType::f32 && !k.allow_tf32 ? " (TF32 engines are excluded: cuda::set_cudnn_allow_tf32(true))" : "");
  const size_t best = k.benchmark && cands.size() > 1 ? fastest(cands, handle, *bench) : 0;
  std::unique_ptr<ConvPlan> p = std::move(cands[best]);
  for (Desc* d : {&x, &w, &y, &conv, &op, &graph}) p->sources.push_back(std::move(*d));
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
     << " on cuda:" << device;
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

const ConvPlan& conv_plan(const ConvKey& k, const ConvBenchArgs* bench) {
  PlanCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.plans.find(k);
  if (it != c.plans.end()) {
    ++c.hits;
    return *it->second;
  }
  ++c.misses;
  auto p = build_plan(k, handle_for(k.device).handle, bench);
  return *(c.plans[k] = std::move(p));
}

size_t conv_workspace_bytes(const ConvPlan& p) { return size_t(p.workspace); }

void conv_execute(const ConvPlan& p, const void* x, const void* w, const void* y, void* workspace, cudaStream_t s) {
  RT_CHECK(x && w && y, "conv2d: null pointer for ", p.key.str());
  RT_CHECK(workspace || p.workspace == 0, "conv2d: ", p.workspace, " bytes of workspace needed, none given");
  const Desc pack = variant_pack(x, w, y, workspace);
  DeviceHandle& h = handle_for(p.key.device);
  std::lock_guard<std::mutex> g(h.mu);
  CUDNN_CHECK(cudnnSetStream(h.handle, s));
  CUDNN_CHECK(cudnnBackendExecute(h.handle, p.plan.get(), pack.get()));
}

ConvCacheStats conv_cache_stats() {
  PlanCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return {c.hits, c.misses, int64_t(c.plans.size())};
}

}  // namespace rt::cuda
