// The cuDNN fake's engines as the engine's convolution code meets them (kernels/cuda's
// conv_plan / conv_execute): the engine list's syntax and its errors (Note [Engine list] in
// cuda_emu/cudnn_engines.cc); which engine the default list gives for each kind of key; the
// tiers of Note [Conv numerics] (kernels/cuda/cudnn_conv.cu) emptied one by one through test
// lists, so that the engine falls through to the next tier or fails with its explained
// error; benchmarking around runtime-compiled engines; and every operation, dtype and layout
// executed through the full path bit for bit equal to the direct convolution on host copies.
// Outside --config=cuda-emu: SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_emu/cudnn_conv.h"
#include "cuda_emu/cudnn_engines.h"
#include "cuda_emu/cudnn_numbers.h"
#include "base/error.h"
#include "kernels/cuda/conv2d.h"

namespace {

namespace fake = rt::emu::cudnn;
using rt::DType;
using rt::cuda::ConvKey;
using rt::cuda::ConvKind;

// Each key once: plans are cached per key for the whole process (Note [Conv plans]).
int64_t fresh_height() {
  static int64_t h = 4;
  return ++h;
}

ConvKey key(ConvKind kind, DType t, bool nhwc, int64_t C, int64_t O) {
  ConvKey k;
  k.kind = kind, k.dtype = t, k.nhwc = nhwc;
  k.N = 2, k.C = C, k.H = fresh_height(), k.W = 5, k.O = O, k.KH = k.KW = 3, k.ph = k.pw = 1;
  return k;
}

size_t elem(DType t) { return rt::kDTypeSizes[int(t)]; }

struct Buffer {
  void* p = nullptr;
  size_t n = 0;
  explicit Buffer(size_t bytes) : n(bytes) { REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<unsigned char> get() const {
    std::vector<unsigned char> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

// Random values of type t (stored as that type) in `bytes`.
std::vector<unsigned char> random_bytes(DType t, size_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes / elem(t); ++i) {
    const double x = nd(rng);
    unsigned char* p = v.data() + i * elem(t);
    if (t == DType::f64) std::memcpy(p, &x, 8);
    if (t == DType::f32) {
      const float f = float(x);
      std::memcpy(p, &f, 4);
    }
    if (t == DType::bf16 || t == DType::f16) {
      const uint16_t h = t == DType::f16 ? fake::float_to_f16(float(x)) : fake::float_to_bf16(float(x));
      std::memcpy(p, &h, 2);
    }
  }
  return v;
}

struct Executed {
  std::string engine;                       // the fake engine that ran
  std::vector<unsigned char> x, w, y, out;  // the inputs' host copies, the output slot after
};

// Plans `k` through the engine (tiers, fallback list, benchmarking when k.benchmark) and
// runs it on fresh device buffers.
Executed execute(const ConvKey& k, uint64_t seed = 1) {
  const int64_t HO = rt::cuda::conv_out_size(k.H, k.KH, k.sh, k.ph, k.dh);
  const int64_t WO = rt::cuda::conv_out_size(k.W, k.KW, k.sw, k.pw, k.dw);
  const size_t es = elem(k.dtype);
  Buffer x(size_t(k.N * k.C * k.H * k.W) * es), w(size_t(k.O * (k.C / k.groups) * k.KH * k.KW) * es),
      y(size_t(k.N * k.O * HO * WO) * es);
  Executed r;
  r.x = random_bytes(k.dtype, x.n, seed), r.w = random_bytes(k.dtype, w.n, seed + 1);
  r.y = random_bytes(k.dtype, y.n, seed + 2);
  // The inputs of the operation; its output stays unwritten (beta == 0 never reads it).
  if (k.kind != ConvKind::backward_data) REQUIRE(cudaMemcpy(x.p, r.x.data(), x.n, cudaMemcpyHostToDevice) == cudaSuccess);
  if (k.kind != ConvKind::backward_filter) REQUIRE(cudaMemcpy(w.p, r.w.data(), w.n, cudaMemcpyHostToDevice) == cudaSuccess);
  if (k.kind != ConvKind::forward) REQUIRE(cudaMemcpy(y.p, r.y.data(), y.n, cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<std::unique_ptr<Buffer>> workspaces;
  const rt::cuda::ConvBenchArgs bench{x.p, w.p, y.p, nullptr, [&](size_t bytes) {
                                        workspaces.push_back(std::make_unique<Buffer>(bytes));
                                        return workspaces.back()->p;
                                      }};
  const rt::cuda::ConvPlan& plan = rt::cuda::conv_plan(k, k.benchmark ? &bench : nullptr);
  const size_t ws = rt::cuda::conv_workspace_bytes(plan);
  Buffer wsb(std::max<size_t>(ws, 1));
  rt::cuda::conv_execute(plan, x.p, w.p, y.p, wsb.p, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  r.engine = fake::last_engine_executed();
  r.out = (k.kind == ConvKind::forward ? y : k.kind == ConvKind::backward_data ? x : w).get();
  return r;
}

std::string engine_of(const ConvKey& k) { return execute(k).engine; }

// The error conv_plan throws for `k` ("" if it plans).
std::string plan_error(const ConvKey& k) {
  try {
    (void)rt::cuda::conv_plan(k);
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "";
}

// The list for one scope; the environment's (here: the default) after.
struct Engines {
  explicit Engines(const std::string& list) { REQUIRE_MESSAGE(fake::set_engines(list).empty(), list); }
  ~Engines() { fake::reset_engines(); }
  Engines(const Engines&) = delete;
  Engines& operator=(const Engines&) = delete;
};

}  // namespace

TEST_CASE("engine lists: the default one parses; bad lists say what is wrong and how to write it") {
  fake::EngineList l;
  std::string error;
  REQUIRE(fake::parse_engines(fake::default_engine_list(), &l, &error));
  CHECK(l.engines.size() >= 5);
  REQUIRE(fake::parse_engines("a ops=fwd+bwd_filter dtypes=bf16 notes=tensor_core+fft behavior=runtime_compilation "
                              "layout=nhwc channels=8 groups=1 align=16 modes=a+fallback ws_fixed=10 ws_per_weight=2; b;",
                              &l, &error));
  REQUIRE(l.engines.size() == 2);
  const fake::EngineSpec& a = l.engines[0];
  CHECK((a.name == "a" && a.ops == 5 && a.dtypes == 4 && a.layout == fake::Layout::nhwc && a.channels == 8));
  CHECK((!a.grouped && a.align == 16 && a.modes == 3 && a.ws_fixed == 10 && a.ws_per_weight == 2));
  CHECK((a.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && a.has(CUDNN_NUMERICAL_NOTE_FFT)));
  CHECK(a.has(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION));
  CHECK((l.engines[1].ops == 7 && l.engines[1].dtypes == 15 && l.engines[1].numerical.empty()));
  REQUIRE(fake::parse_engines("none", &l, &error));
  CHECK(l.engines.empty());
  const std::pair<const char*, const char*> bad[] = {
      {"", "no engine (write 'none' for an empty list)"},
      {"a; a", "engine 'a' is listed twice"},
      {"a foo=1", "engine 'a': unknown key 'foo' (keys: ops, dtypes"},
      {"a notes=fast", "notes=fast: 'fast' is not one of tensor_core+down_convert_inputs"},
      {"a channels=0", "channels=0: want an integer >= 1"},
      {"a layout=nchw8", "layout=nchw8: want any, nchw or nhwc"},
      {"a ops", "'ops' is not key=value"},
      {"ops=fwd", "starts with a setting"},
      {"a;;b", "an empty engine between two ';'"},
  };
  for (const auto& [text, want] : bad) {
    CHECK_MESSAGE(!fake::parse_engines(text, &l, &error), text);
    CHECK_MESSAGE(error.find(want) != std::string::npos, text, ": '", error, "'");
  }
  CHECK(fake::set_engines("a foo=1").find("unknown key") != std::string::npos);  // the list in use stays
  // A bad RINGTAPE_EMU_CUDNN_ENGINES: cudnnCreate says so, with the fix.
  REQUIRE(setenv("RINGTAPE_EMU_CUDNN_ENGINES", "x dtypes=f8", 1) == 0);
  fake::reset_engines();
  cudnnHandle_t h = nullptr;
  CHECK(cudnnCreate(&h) == CUDNN_STATUS_BAD_PARAM);
  char buf[1024];
  cudnnGetLastErrorString(buf, sizeof buf);
  CHECK_MESSAGE(std::string(buf).find("RINGTAPE_EMU_CUDNN_ENGINES='x dtypes=f8' is not an engine list: engine 'x': "
                                      "dtypes=f8: 'f8' is not one of f32+f64+bf16+f16") != std::string::npos,
                buf);
  CHECK(std::string(buf).find("unset it for the default list") != std::string::npos);
  REQUIRE(unsetenv("RINGTAPE_EMU_CUDNN_ENGINES") == 0);
  fake::reset_engines();
  REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnDestroy(h) == CUDNN_STATUS_SUCCESS);
}

// What the default list (Note [Default engines] in cuda_emu/cudnn_engines.cc) gives each kind of key.
TEST_CASE("the default list: the engine each kind of key gets") {
  CHECK(engine_of(key(ConvKind::forward, DType::f32, false, 8, 8)) == "implicit_gemm_fma");  // TF32 not allowed
  ConvKey tf32 = key(ConvKind::forward, DType::f32, true, 8, 8);
  tf32.allow_tf32 = true;
  CHECK(engine_of(tf32) == "tc_implicit_gemm");
  CHECK(engine_of(key(ConvKind::forward, DType::bf16, true, 8, 16)) == "tc_implicit_gemm");
  CHECK(engine_of(key(ConvKind::backward_data, DType::f16, true, 4, 12)) == "tc_runtime_compiled");  // multiples of 4
  CHECK(engine_of(key(ConvKind::forward, DType::bf16, true, 3, 8)) == "implicit_gemm_fma");  // odd channels
  CHECK(engine_of(key(ConvKind::backward_filter, DType::f32, false, 4, 4)) == "implicit_gemm_fma");  // not split-K
  ConvKey misaligned = key(ConvKind::forward, DType::bf16, true, 8, 8);
  misaligned.align = 8;
  CHECK(engine_of(misaligned) == "tc_runtime_compiled");  // tc_implicit_gemm wants 16 bytes
  CHECK(engine_of(key(ConvKind::forward, DType::f64, true, 3, 5)) == "implicit_gemm_fma");
}

TEST_CASE("tiers: strict, then relaxed (bf16/f16 reduced-precision reduction), then non-deterministic") {
  const Engines e("rpr notes=tensor_core+reduced_precision_reduction dtypes=bf16+f16; nd notes=nondeterministic");
  CHECK(engine_of(key(ConvKind::forward, DType::bf16, true, 3, 4)) == "rpr");
  CHECK(engine_of(key(ConvKind::backward_data, DType::f16, false, 3, 4)) == "rpr");
  CHECK(engine_of(key(ConvKind::backward_filter, DType::f32, false, 3, 4)) == "nd");  // never rpr for f32
  CHECK(engine_of(key(ConvKind::forward, DType::f64, true, 3, 4)) == "nd");
}

TEST_CASE("tiers emptied: the engine's error says what was offered and why each was refused") {
  {
    const Engines e("none");
    const std::string m = plan_error(key(ConvKind::forward, DType::f32, false, 3, 4));
    CHECK_MESSAGE(m.find("offers no usable engine") != std::string::npos, m);
    CHECK_MESSAGE(m.find("offered no engine config") != std::string::npos, m);
  }
  {
    const Engines e("tc notes=tensor_core dtypes=f32");
    const ConvKey k = key(ConvKind::forward, DType::f32, false, 3, 4);
    const std::string m = plan_error(k);
    CHECK_MESSAGE(m.find("TF32 engines are excluded") != std::string::npos, m);
    CHECK_MESSAGE(m.find("1 refused for TF32 tensor cores") != std::string::npos, m);
    ConvKey allowed = k;
    allowed.allow_tf32 = true;
    CHECK(engine_of(allowed) == "tc");
  }
  {
    const Engines e("dc notes=down_convert_inputs; rpr notes=reduced_precision_reduction dtypes=f64+f32");
    const std::string m = plan_error(key(ConvKind::backward_filter, DType::f64, false, 3, 4));
    CHECK_MESSAGE(m.find("convert to f32") != std::string::npos, m);
    CHECK_MESSAGE(m.find("1 refused for down-converted inputs, 1 refused for reduced-precision reduction") !=
                      std::string::npos,
                  m);
  }
  {
    // Offered but unfit (NHWC channel multiples): "did not finalize for this key", and with a
    // fitting engine after it, that one.
    const Engines e("wide layout=nhwc channels=8; anything");
    CHECK(engine_of(key(ConvKind::forward, DType::bf16, true, 3, 4)) == "anything");
  }
  {
    const Engines e("wide layout=nhwc channels=8");
    const std::string m = plan_error(key(ConvKind::forward, DType::bf16, true, 3, 4));
    CHECK_MESSAGE(m.find("1 did not finalize for this key") != std::string::npos, m);
  }
}

TEST_CASE("benchmarking skips runtime-compiled engines, and uses the first of them untimed when nothing else fits") {
  {
    const Engines e("rc behavior=runtime_compilation; plain modes=a+fallback");
    ConvKey k = key(ConvKind::forward, DType::f32, false, 3, 4);
    CHECK(engine_of(k) == "rc");  // without benchmarking: the heuristics' first
    k.benchmark = true;
    CHECK(engine_of(k) == "plain");
  }
  {
    const Engines e("rc behavior=runtime_compilation");
    ConvKey k = key(ConvKind::forward, DType::f32, false, 3, 4);
    k.benchmark = true;
    CHECK(engine_of(k) == "rc");
  }
}

TEST_CASE("through the engine's plans, every operation, dtype and layout equals the direct convolution bit for bit") {
  const Engines e("fma ws_fixed=64 ws_per_weight=4");
  struct G {
    int64_t N, C, H, W, O, K, s, p, d, g;
  };
  const G gs[] = {{2, 3, 7, 9, 4, 3, 1, 1, 1, 1}, {1, 4, 8, 8, 6, 3, 2, 1, 1, 1}, {2, 6, 5, 7, 4, 3, 1, 1, 1, 2},
                  {3, 5, 6, 5, 7, 1, 1, 0, 1, 1}, {2, 4, 9, 8, 4, 3, 1, 2, 2, 4}};
  uint64_t seed = 1000;
  int runs = 0;
  for (const G& g : gs)
    for (ConvKind kind : {ConvKind::forward, ConvKind::backward_data, ConvKind::backward_filter})
      for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16})
        for (bool nhwc : {false, true}) {
          ConvKey k;
          k.kind = kind, k.dtype = t, k.nhwc = nhwc, k.N = g.N, k.C = g.C, k.H = g.H, k.W = g.W, k.O = g.O;
          k.KH = k.KW = g.K, k.sh = k.sw = g.s, k.ph = k.pw = g.p, k.dh = k.dw = g.d, k.groups = g.g;
          const Executed r = execute(k, seed += 3);
          REQUIRE(r.engine == "fma");
          // The same convolution on the host copies.
          fake::ConvProblem p;
          p.op = kind == ConvKind::forward         ? fake::ConvOp::forward
                 : kind == ConvKind::backward_data ? fake::ConvOp::backward_data
                                                   : fake::ConvOp::backward_filter;
          p.dtype = t == DType::f32 ? CUDNN_DATA_FLOAT : t == DType::f64 ? CUDNN_DATA_DOUBLE
                    : t == DType::bf16                 ? CUDNN_DATA_BFLOAT16
                                                       : CUDNN_DATA_HALF;
          p.N = k.N, p.C = k.C, p.H = k.H, p.W = k.W, p.O = k.O, p.KH = k.KH, p.KW = k.KW, p.groups = k.groups;
          p.HO = rt::cuda::conv_out_size(k.H, k.KH, k.sh, k.ph, k.dh);
          p.WO = rt::cuda::conv_out_size(k.W, k.KW, k.sw, k.pw, k.dw);
          p.sh = k.sh, p.sw = k.sw, p.ph = k.ph, p.pw = k.pw, p.dh = k.dh, p.dw = k.dw;
          auto strides = [nhwc](int64_t a, int64_t b, int64_t c, int64_t d) {
            (void)a;
            return nhwc ? std::array<int64_t, 4>{b * c * d, 1, d * b, b} : std::array<int64_t, 4>{b * c * d, c * d, d, 1};
          };
          p.xs = strides(p.N, p.C, p.H, p.W), p.ws = strides(p.O, p.C / p.groups, p.KH, p.KW);
          p.ys = strides(p.N, p.O, p.HO, p.WO);
          std::vector<unsigned char> x = r.x, w = r.w, y = r.y;
          fake::run_conv(p, fake::Numerics{}, x.data(), w.data(), y.data(), 1.0, 0.0);
          const std::vector<unsigned char>& want = kind == ConvKind::forward ? y : kind == ConvKind::backward_data ? x : w;
          CHECK_MESSAGE(r.out == want, p.str(), nhwc ? " NHWC" : " NCHW");
          ++runs;
        }
  CHECK(runs == 5 * 3 * 4 * 2);
}

#else
TEST_CASE("cuDNN fake engines") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
