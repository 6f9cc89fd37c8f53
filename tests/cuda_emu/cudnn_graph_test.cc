// The cuDNN fake's graph path, built with kernels/cuda/cudnn_backend.cuh's Desc as the engine
// builds it: finalize checks and their messages (Note [Finalize checks] in
// cuda_emu/cudnn_finalize.cc), heuristics and engine notes of the default engine list,
// engines that do not support a shape failing their plan with NOT_SUPPORTED, the checks of
// cudnnBackendExecute, and planted bugs the emulator must report: a tensor stride that
// reaches past its buffer, one that makes elements overlap, a workspace one byte short, an
// output read (beta != 0) before it was written, an operand on another device.
// Outside --config=cuda-emu: SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_emu/cudnn_engines.h"
#include "cuda_emu/emu.h"
#include "kernels/cuda/cudnn_backend.cuh"
#include "tests/cuda_emu/cudnn_test_util.h"

namespace {

using rt::cuda::detail::Desc;
using namespace cudnn_test;

std::vector<int64_t> dense(const std::vector<int64_t>& d, bool nhwc) {
  if (nhwc) return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

Desc tensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
            cudnnDataType_t t = CUDNN_DATA_FLOAT) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
  d.finalize();
  return d;
}

// A 2-D convolution (cross-correlation, f32 compute unless said) and one of its operations.
struct Geo {
  int64_t N = 2, C = 4, H = 6, W = 7, O = 8, K = 3, stride = 1, pad = 1, dil = 1;
  cudnnDataType_t t = CUDNN_DATA_FLOAT;
  bool nhwc = false;
  int64_t HO() const { return (H + 2 * pad - dil * (K - 1) - 1) / stride + 1; }
  int64_t WO() const { return (W + 2 * pad - dil * (K - 1) - 1) / stride + 1; }
  std::vector<int64_t> xd() const { return {N, C, H, W}; }
  std::vector<int64_t> wd() const { return {O, C, K, K}; }
  std::vector<int64_t> yd() const { return {N, O, HO(), WO()}; }
};

Desc conv_desc(const Geo& g) {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
        g.t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{g.dil, g.dil})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{g.stride, g.stride})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{g.pad, g.pad})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{g.pad, g.pad});
  c.finalize();
  return c;
}

// The x, w, y, conv attributes of each operation type.
struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, beta;
};
constexpr OpAttrs kFwd{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
constexpr OpAttrs kBwdData{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                           CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};

// The operation of `a` on the three tensors, not finalized.
Desc op_desc(const OpAttrs& a, const Desc& x, const Desc& w, const Desc& y, const Desc& conv) {
  Desc op(a.type);
  op.set(a.x, x).set(a.w, w).set(a.y, y).set(a.conv, conv);
  return op;
}

Desc graph_of(const Desc& op, cudnnHandle_t h) {
  Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op).set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, h);
  return g;
}

// A whole forward graph (uids x 1, w 2, y 3), `xs` replacing x's dense strides when given.
struct Graph {
  Desc x, w, y, conv, op, graph;
  Graph(const Geo& g, cudnnHandle_t h, std::vector<int64_t> xs = {}, double beta = 0) {
    x = tensor(1, g.xd(), xs.empty() ? dense(g.xd(), g.nhwc) : xs, g.t);
    w = tensor(2, g.wd(), dense(g.wd(), g.nhwc), g.t);
    y = tensor(3, g.yd(), dense(g.yd(), g.nhwc), g.t);
    conv = conv_desc(g);
    op = op_desc(kFwd, x, w, y, conv);
    op.set(kFwd.beta, CUDNN_TYPE_FLOAT, float(beta));
    op.finalize();
    graph = graph_of(op, h);
    graph.finalize();
  }
};

// Device memory of `bytes`, filled with small floats unless `fill` is false.
struct Buffer {
  void* p = nullptr;
  explicit Buffer(size_t bytes, bool fill = true) {
    REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
    if (fill) {
      std::vector<float> v(bytes / 4);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(int(i % 7) - 3) * 0.25f;
      REQUIRE(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess);
    }
  }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

size_t numel(const std::vector<int64_t>& d) { return size_t(d[0] * d[1] * d[2] * d[3]); }

// The device's queued work ends in a fault whose report has every one of `parts`.
void expect_fault(const std::vector<std::string>& parts) {
  CHECK_MESSAGE(cudaDeviceSynchronize() != cudaSuccess, "the planted bug was not caught");
  const std::string report = rt::emu::last_fault();
  for (const std::string& p : parts) CHECK_MESSAGE(report.find(p) != std::string::npos, "'", p, "' not in:\n", report);
  rt::emu::clear_faults();
}

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
};

}  // namespace

TEST_CASE("tensor and convolution finalize: what is missing or inconsistent, by name") {
  auto try_tensor = [](auto&& setup) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    setup(t);
    return t.try_finalize();
  };
  auto all_but = [](int skip) {
    return [skip](Desc& t) {
      if (skip != 0) t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{2, 3, 4, 5});
      if (skip != 1) t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{60, 20, 5, 1});
      if (skip != 2) t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
      if (skip != 3) t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
      if (skip != 4) t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, int64_t(1));
    };
  };
  const char* names[] = {"CUDNN_ATTR_TENSOR_DIMENSIONS is not set", "CUDNN_ATTR_TENSOR_STRIDES is not set",
                         "CUDNN_ATTR_TENSOR_DATA_TYPE is not set", "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT is not set",
                         "CUDNN_ATTR_TENSOR_UNIQUE_ID is not set"};
  for (int i = 0; i < 5; ++i) EXPECT_STATUS(try_tensor(all_but(i)), CUDNN_STATUS_BAD_PARAM, names[i]);
  CHECK(try_tensor(all_but(-1)) == CUDNN_STATUS_SUCCESS);
  auto with = [&](std::vector<int64_t> dims, std::vector<int64_t> strides, int64_t align) {
    return try_tensor([&](Desc& t) {
      all_but(-1)(t);
      t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
          .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides)
          .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align);
    });
  };
  EXPECT_STATUS(with({2, 3, 4, 5}, {20, 5, 1}, 16), CUDNN_STATUS_BAD_PARAM, "4 dimensions (2, 3, 4, 5) but 3 strides");
  EXPECT_STATUS(with({2, 0, 4, 5}, {60, 20, 5, 1}, 16), CUDNN_STATUS_BAD_PARAM, "dimension 1 of (2, 0, 4, 5) is 0");
  EXPECT_STATUS(with({2, 3, 4, 5}, {60, -20, 5, 1}, 16), CUDNN_STATUS_BAD_PARAM, "is negative");
  EXPECT_STATUS(with({2, 3, 4, 5}, {60, 20, 5, 1}, 2), CUDNN_STATUS_BAD_PARAM, "multiple of the element size (4 bytes)");
  CHECK(with({2, 3, 4, 5, 6}, {360, 120, 30, 6, 1}, 16) == CUDNN_STATUS_SUCCESS);  // 5-D tensors finalize

  auto try_conv = [](auto&& tweak) {
    Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
        .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
        .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
        .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
        .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
        .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1});
    tweak(c);
    return c.try_finalize();
  };
  EXPECT_STATUS(try_conv([](Desc&) {}), CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_CONVOLUTION_POST_PADDINGS is not set");
  auto post = [](Desc& c) {
    c.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1});
  };
  CHECK(try_conv(post) == CUDNN_STATUS_SUCCESS);
  EXPECT_STATUS(try_conv([&](Desc& c) {
                  post(c);
                  c.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 1});
                }),
                CUDNN_STATUS_BAD_PARAM, "2 spatial dims but 3 dilations (1, 1, 1)");
  EXPECT_STATUS(try_conv([&](Desc& c) {
                  post(c);
                  c.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 0});
                }),
                CUDNN_STATUS_BAD_PARAM, "filter strides (1, 0) must be >= 1");
  EXPECT_STATUS(try_conv([&](Desc& c) {
                  post(c);
                  c.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{-1, 0});
                }),
                CUDNN_STATUS_BAD_PARAM, "pre-paddings (-1, 0) must be >= 0");
}

TEST_CASE("operation finalize: shapes consistent with the convolution, or the mismatch named") {
  const Geo g;  // x (2, 4, 6, 7), w (8, 4, 3, 3), y (2, 8, 6, 7)
  const Desc conv = conv_desc(g);
  auto finalize_fwd = [&](std::vector<int64_t> xd, std::vector<int64_t> wd, std::vector<int64_t> yd,
                          std::vector<int64_t> xs = {}) {
    const Desc x = tensor(1, xd, xs.empty() ? dense(xd, false) : xs), w = tensor(2, wd, dense(wd, false)),
               y = tensor(3, yd, dense(yd, false));
    Desc op = op_desc(kFwd, x, w, y, conv);
    return op.try_finalize();
  };
  CHECK(finalize_fwd(g.xd(), g.wd(), g.yd()) == CUDNN_STATUS_SUCCESS);
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), {2, 8, 7, 7}), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "y's H is 7 but the convolution gives 6");
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), {2, 8, 6, 8}), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "y's W is 8 but the convolution gives 7");
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), {2, 5, 6, 7}), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "w has 8 output channels but y has 5");
  EXPECT_STATUS(finalize_fwd(g.xd(), {8, 3, 3, 3}, g.yd()), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "x's 4 channels are not a multiple of w's 3");
  EXPECT_STATUS(finalize_fwd({2, 6, 6, 7}, {8, 2, 3, 3}, g.yd()), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "w's 8 output channels are not a multiple of 3 groups");
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), {3, 8, 6, 7}), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "x's batch is 2 but y's is 3");
  EXPECT_STATUS(finalize_fwd({2, 4, 1, 7}, {8, 4, 5, 3}, {2, 8, 1, 7}), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "along H the dilated filter spans 5 but the padded x only 3");
  CHECK(finalize_fwd({2, 8, 6, 7}, {8, 4, 3, 3}, g.yd()) == CUDNN_STATUS_SUCCESS);  // groups = 8 / 4
  // Overlapping strides (C's stride 4 < H * W): refused by the operation, as in cuDNN 9.19.
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), g.yd(), {168, 4, 7, 1}), CUDNN_STATUS_BAD_PARAM, "make elements overlap");
  EXPECT_STATUS(finalize_fwd(g.xd(), g.wd(), g.yd(), {42, 0, 7, 1}), CUDNN_STATUS_BAD_PARAM, "has stride 0");
  // The backward data operation names its own slots.
  {
    const Desc dx = tensor(1, g.xd(), dense(g.xd(), false)), w = tensor(2, g.wd(), dense(g.wd(), false)),
               dy = tensor(3, {2, 8, 6, 9}, dense({2, 8, 6, 9}, false));
    Desc op = op_desc(kBwdData, dx, w, dy, conv);
    EXPECT_STATUS(op.try_finalize(), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "dy's W is 9 but the convolution gives 7");
    Desc missing(kFwd.type);
    missing.set(kFwd.x, dx).set(kFwd.w, w).set(kFwd.y, dy);
    EXPECT_STATUS(missing.try_finalize(), CUDNN_STATUS_BAD_PARAM,
                  "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC is not set");
  }
  // A 4-D tensor with a 3-D convolution.
  Geo g3 = g;
  Desc c3(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c3.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(3))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1, 1});
  c3.finalize();
  const Desc x = tensor(1, g3.xd(), dense(g3.xd(), false)), w = tensor(2, g3.wd(), dense(g3.wd(), false)),
             y = tensor(3, g3.yd(), dense(g3.yd(), false));
  Desc op3 = op_desc(kFwd, x, w, y, c3);
  EXPECT_STATUS(op3.try_finalize(), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "x has 4 dims; a convolution with 3 spatial");
}

TEST_CASE("graph, heuristics, engine, plan and variant pack finalize checks") {
  const Handle h;
  const Geo g;
  const Desc conv = conv_desc(g);
  const Desc x = tensor(1, g.xd(), dense(g.xd(), false)), w = tensor(2, g.wd(), dense(g.wd(), false)),
             y = tensor(3, g.yd(), dense(g.yd(), false)), y_dup = tensor(1, g.yd(), dense(g.yd(), false));
  Desc op = op_desc(kFwd, x, w, y, conv), op2 = op_desc(kFwd, x, w, y, conv), op_dup = op_desc(kFwd, x, w, y_dup, conv);
  op.finalize();
  op2.finalize();
  op_dup.finalize();
  Desc none(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  EXPECT_STATUS(none.try_finalize(), CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_OPERATIONGRAPH_OPS is not set");
  Desc two(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR), twice(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  two.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<cudnnBackendDescriptor_t>{op.get(), op2.get()});
  EXPECT_STATUS(two.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "the graph has 2 convolutions");
  twice.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, std::vector<cudnnBackendDescriptor_t>{op.get(), op.get()});
  EXPECT_STATUS(twice.try_finalize(), CUDNN_STATUS_BAD_PARAM, "is operation 0 again");
  Desc dup = graph_of(op_dup, h.h);
  EXPECT_STATUS(dup.try_finalize(), CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "x and y both have unique id 1");
  Desc graph = graph_of(op, h.h);
  graph.finalize();
  EXPECT_STATUS(graph.try_finalize(), CUDNN_STATUS_BAD_PARAM, "finalized already");

  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  EXPECT_STATUS(heur.try_finalize(), CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_ENGINEHEUR_MODE is not set");

  int64_t count = 0, n = 0;
  REQUIRE(cudnnBackendGetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n,
                                   &count) == CUDNN_STATUS_SUCCESS);
  rt::emu::cudnn::EngineList defaults;
  std::string error;
  REQUIRE(rt::emu::cudnn::parse_engines(rt::emu::cudnn::default_engine_list(), &defaults, &error));
  CHECK(count == int64_t(defaults.engines.size()));
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, count);
  EXPECT_STATUS(engine.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED, "engine global index " + std::to_string(count));

  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, heuristics(graph, CUDNN_HEUR_MODE_FALLBACK).at(0));
  EXPECT_STATUS(plan.try_finalize(), CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE is not set");

  Desc p(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  p.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 2, 3})
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, std::vector<void*>{nullptr, nullptr});
  EXPECT_STATUS(p.try_finalize(), CUDNN_STATUS_BAD_PARAM, "3 unique ids but 2 data pointers");
  Desc p2(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  p2.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, std::vector<void*>{nullptr, nullptr});
  EXPECT_STATUS(p2.try_finalize(), CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "unique id 1 appears twice");
}

TEST_CASE("default engines: heuristics offer several per operation with their notes; unfit ones fail their plan") {
  const Handle h;
  Geo g;  // f32 NCHW forward
  const Graph f32(g, h.h);
  const std::vector<Desc> a = heuristics(f32.graph, CUDNN_HEUR_MODE_A), fb = heuristics(f32.graph, CUDNN_HEUR_MODE_FALLBACK);
  REQUIRE(a.size() >= 3);
  REQUIRE(fb.size() == 1);
  int tensor_core = 0, plain = 0, unfit = 0;
  for (const Desc& cfg : a) {
    Desc e(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t ep = e.get();
    int64_t n = 0, ws = -1;
    REQUIRE(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &ep) ==
            CUDNN_STATUS_SUCCESS);
    const auto notes = rt::cuda::detail::get_array<cudnnBackendNumericalNote_t>(
        e.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
    const bool tc = std::find(notes.begin(), notes.end(), CUDNN_NUMERICAL_NOTE_TENSOR_CORE) != notes.end();
    tensor_core += tc;
    plain += notes.empty();
    REQUIRE(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) ==
            CUDNN_STATUS_SUCCESS);
    CHECK(ws > 0);  // every fake engine asks for workspace
    Desc plan;
    const cudnnStatus_t st = try_plan(cfg, h.h, &plan);
    if (st != CUDNN_STATUS_SUCCESS) {
      ++unfit;
      CHECK(CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED);
      CHECK(last_error().find("does not support this convolution") != std::string::npos);
    } else {
      CHECK(workspace_of(plan) == ws);
    }
  }
  CHECK(tensor_core >= 2);
  CHECK(plain >= 1);
  CHECK(unfit >= 1);  // the NHWC-only tensor-core engines, on NCHW tensors

  // bf16 NHWC with 3 channels: the strict tensor-core engine wants multiples of 8.
  g.t = CUDNN_DATA_BFLOAT16, g.nhwc = true, g.C = 3;
  const Graph bf(g, h.h);
  const std::vector<Desc> cfgs = heuristics(bf.graph, CUDNN_HEUR_MODE_A);
  Desc plan;
  EXPECT_STATUS(try_plan(cfgs.at(0), h.h, &plan), CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "multiples of 8, got 3 and 8");
  // The same engine built by hand: its engine config refuses it already.
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR), cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, bf.graph).set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, int64_t(0));
  engine.finalize();
  cfg.set(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
  EXPECT_STATUS(cfg.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "engine tc_implicit_gemm does not support");
}

TEST_CASE("cudnnBackendExecute checks its arguments before queueing anything") {
  const Handle h;
  const Geo g;
  const Graph gr(g, h.h);
  const Desc plan = first_plan(gr.graph, h.h, CUDNN_HEUR_MODE_FALLBACK);
  const int64_t ws = workspace_of(plan);
  Buffer x(numel(g.xd()) * 4), w(numel(g.wd()) * 4), y(numel(g.yd()) * 4, false), wsb(static_cast<size_t>(ws));
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack({1, 2}, {x.p, w.p}, wsb.p).get()), CUDNN_STATUS_BAD_PARAM,
                "no pointer for y (unique id 3)");
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, nullptr, y.p}, wsb.p).get()),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "pointer for w (unique id 2) is null");
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {static_cast<char*>(x.p) + 4, w.p, y.p}, wsb.p).get()),
                CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, "not aligned to the 16 bytes");
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, nullptr).get()),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "bytes of workspace");
  Desc unfinished(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), unfinished.get()), CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED,
                "variantPack is not finalized");
  EXPECT_STATUS(cudnnBackendExecute(h.h, gr.graph.get(), unfinished.get()), CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                "executionPlan must be a CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR");
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  {
    const Handle h1;
    EXPECT_STATUS(cudnnBackendExecute(h1.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, wsb.p).get()),
                  CUDNN_STATUS_BAD_PARAM, "built with a handle of cuda:0 and is executed with one of cuda:1");
  }
  // The handle's default stream follows the current device: cuda:1 now, the handle is cuda:0's.
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, wsb.p).get()),
                CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "cudaSetDevice(0) first");
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, wsb.p).get()) == CUDNN_STATUS_SUCCESS);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("planted bugs: strides past the buffer, overlapping strides, a workspace one byte short, and more") {
  const Handle h;
  const Geo g;  // x (2, 4, 6, 7): 336 floats
  const std::vector<int64_t> gap = {4 * 6 * 8, 6 * 8, 8, 1};  // rows of 8: reaches 383 floats, no overlap
  {
    const Graph gr(g, h.h, gap);
    const Desc plan = first_plan(gr.graph, h.h, CUDNN_HEUR_MODE_FALLBACK);
    Buffer x(numel(g.xd()) * 4), w(numel(g.wd()) * 4), y(numel(g.yd()) * 4, false), ws(static_cast<size_t>(workspace_of(plan)));
    REQUIRE(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, ws.p).get()) == CUDNN_STATUS_SUCCESS);
    expect_fault({"cudnn implicit_gemm_fma convolution forward", "reads 1532 bytes", "out of bounds",
                  "past the end of the 1344-byte block"});
  }
  {
    // C's stride 4 < H * W: two channels share memory. The operation refuses it.
    Desc x = tensor(1, g.xd(), {168, 4, 7, 1}), w = tensor(2, g.wd(), dense(g.wd(), false)),
         y = tensor(3, g.yd(), dense(g.yd(), false)), conv = conv_desc(g);
    Desc op = op_desc(kFwd, x, w, y, conv);
    EXPECT_STATUS(op.try_finalize(), CUDNN_STATUS_BAD_PARAM,
                  "x's strides (168, 4, 7, 1) for dims (2, 4, 6, 7) make elements overlap");
  }
  const Graph gr(g, h.h);
  const Desc plan = first_plan(gr.graph, h.h, CUDNN_HEUR_MODE_FALLBACK);
  const int64_t ws = workspace_of(plan);
  Buffer x(numel(g.xd()) * 4), w(numel(g.wd()) * 4), y(numel(g.yd()) * 4, false);
  {
    Buffer short_ws(static_cast<size_t>(ws - 1), false);
    REQUIRE(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, short_ws.p).get()) ==
            CUDNN_STATUS_SUCCESS);
    expect_fault({"convolution forward", "writes " + std::to_string(ws) + " bytes", "byte " + std::to_string(ws - 1),
                  "out of bounds"});
  }
  Buffer wsb(static_cast<size_t>(ws), false);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Not under a sanitizer config: there the kernels' writes go to the sanitizer's runtime, not
  // the emulator's shadow, so reads of never-written memory are not checked (memcheck.cc).
  {
    // beta != 0 reads y, which nobody wrote.
    const Graph beta(g, h.h, {}, 1.0);
    const Desc p = first_plan(beta.graph, h.h, CUDNN_HEUR_MODE_FALLBACK);
    REQUIRE(cudnnBackendExecute(h.h, p.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, wsb.p).get()) == CUDNN_STATUS_SUCCESS);
    expect_fault({"reads never-written device memory", "convolution forward"});
  }
#endif
  {
    // w on cuda:1, the handle and its stream on cuda:0.
    REQUIRE(cudaSetDevice(1) == cudaSuccess);
    Buffer w1(numel(g.wd()) * 4);
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w1.p, y.p}, wsb.p).get()) ==
            CUDNN_STATUS_SUCCESS);
    expect_fault({"on cuda:0 reads", "of cuda:1 memory", "missing cudaSetDevice"});
  }
  // Without a bug the same plan runs clean (and beta == 0 never reads y).
  REQUIRE(cudnnBackendExecute(h.h, plan.get(), pack({1, 2, 3}, {x.p, w.p, y.p}, wsb.p).get()) == CUDNN_STATUS_SUCCESS);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(rt::emu::last_fault().empty());
}

// A convolution with `pads` (one per spatial dim) over tensors of dims x, w, y (dense,
// NCHW-like); `keep` holds the descriptors it is built from.
Desc graph_nd(cudnnHandle_t h, const std::vector<int64_t>& pads, const std::vector<int64_t>& xd,
              const std::vector<int64_t>& wd, const std::vector<int64_t>& yd, std::vector<Desc>* keep) {
  const int spatial = int(pads.size());
  auto packed = [](const std::vector<int64_t>& d) {
    std::vector<int64_t> s(d.size(), 1);
    for (size_t i = d.size() - 1; i > 0; --i) s[i - 1] = s[i] * d[i];
    return s;
  };
  const std::vector<int64_t> ones(size_t(spatial), 1);
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(spatial))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, ones)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, ones)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads);
  c.finalize();
  keep->push_back(tensor(1, xd, packed(xd)));
  keep->push_back(tensor(2, wd, packed(wd)));
  keep->push_back(tensor(3, yd, packed(yd)));
  Desc op = op_desc(kFwd, (*keep)[keep->size() - 3], (*keep)[keep->size() - 2], (*keep)[keep->size() - 1], c);
  op.finalize();
  Desc g = graph_of(op, h);
  g.finalize();
  keep->push_back(std::move(c));
  keep->push_back(std::move(op));
  return g;
}

TEST_CASE("1-D convolutions run as 2-D ones with H = 1; 3-D ones finalize, and every engine refuses them") {
  const Handle h;
  std::vector<Desc> keep;
  const Desc g1 = graph_nd(h.h, {1}, {2, 3, 9}, {4, 3, 3}, {2, 4, 9}, &keep);
  const Desc g2 = graph_nd(h.h, {0, 1}, {2, 3, 1, 9}, {4, 3, 1, 3}, {2, 4, 1, 9}, &keep);
  const Desc p1 = first_plan(g1, h.h, CUDNN_HEUR_MODE_FALLBACK);
  const Desc p2 = first_plan(g2, h.h, CUDNN_HEUR_MODE_FALLBACK);
  Buffer x(2 * 3 * 9 * 4), w(4 * 3 * 3 * 4), y1(2 * 4 * 9 * 4, false), y2(2 * 4 * 9 * 4, false),
      ws(static_cast<size_t>(std::max(workspace_of(p1), workspace_of(p2))), false);
  REQUIRE(cudnnBackendExecute(h.h, p1.get(), pack({1, 2, 3}, {x.p, w.p, y1.p}, ws.p).get()) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendExecute(h.h, p2.get(), pack({1, 2, 3}, {x.p, w.p, y2.p}, ws.p).get()) == CUDNN_STATUS_SUCCESS);
  std::vector<float> a(2 * 4 * 9), b(a.size());
  REQUIRE(cudaMemcpy(a.data(), y1.p, a.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(b.data(), y2.p, b.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(a == b);
  CHECK(std::any_of(a.begin(), a.end(), [](float v) { return v != 0.0f; }));

  const Desc g3 = graph_nd(h.h, {1, 1, 1}, {1, 2, 3, 4, 5}, {2, 2, 3, 3, 3}, {1, 2, 3, 4, 5}, &keep);
  const std::vector<Desc> cfgs = heuristics(g3, CUDNN_HEUR_MODE_A);
  REQUIRE(!cfgs.empty());
  for (const Desc& cfg : cfgs) {
    Desc plan;
    EXPECT_STATUS(try_plan(cfg, h.h, &plan), CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "3-D convolutions are not emulated");
  }
}

#else
TEST_CASE("cuDNN fake graphs") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
