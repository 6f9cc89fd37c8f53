// The cuDNN fake's fused graphs (Note [Fused graphs the fake runs] in cuda_emu/cudnn_finalize.cc):
// batch-norm's scale-bias(-relu) prologue into a convolution forward or backward filter, and
// genstats of the forward's output, in bf16 and f32 NHWC with odd spatial sizes and channels a
// multiple of 4 but not 8 (what the default list's runtime-compiled engine takes), against a
// naive reference written here; then each refusal with its status and message, and the
// engines a single convolution gets, unchanged.
// Outside --config=cuda-emu: SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_emu/cudnn_engines.h"
#include "kernels/cuda/cudnn_backend.cuh"
#include "tests/cuda_emu/cudnn_test_util.h"

namespace {

using rt::cuda::detail::Desc;
using namespace cudnn_test;
namespace fake = rt::emu::cudnn;

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
};

// x (2, 4, 5, 7), w (12, 4, 3, 3), y (2, 12, 5, 7): 3x3, padding 1, stride 1.
constexpr int64_t N = 2, C = 4, H = 5, W = 7, O = 12, K = 3, P = 1;
const std::vector<int64_t> kXd = {N, C, H, W}, kWd = {O, C, K, K}, kYd = {N, O, H, W}, kPerC = {1, C, 1, 1},
                           kPerO = {1, O, 1, 1};
// Unique ids, as kernels/cuda's fused graphs number them.
enum : int64_t { kX = 1, kW = 2, kY = 3, kScale = 4, kBias = 5, kSum = 6, kSqsum = 7, kT1 = 8, kT2 = 9, kT3 = 10 };

std::vector<int64_t> strides_of(const std::vector<int64_t>& d, bool nhwc) {
  if (nhwc) return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

Desc tensor(int64_t uid, const std::vector<int64_t>& dims, cudnnDataType_t t, bool nhwc = true,
            bool is_virtual = false) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, t)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides_of(dims, nhwc))
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, int64_t(16));
  if (is_virtual) d.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true);
  d.finalize();
  return d;
}

Desc conv_desc() {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_CROSS_CORRELATION)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, int64_t(2))
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, std::vector<int64_t>{1, 1})
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{P, P})
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, std::vector<int64_t>{P, P});
  c.finalize();
  return c;
}

Desc pointwise(cudnnPointwiseMode_t mode) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  pw.finalize();
  return pw;
}

// A pointwise operation y = mode(x[, b]), not finalized.
Desc pointwise_op(cudnnPointwiseMode_t mode, const Desc& x, const Desc* b, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pointwise(mode))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  return op;
}

Desc genstats_op(const Desc& y, const Desc& sum, const Desc& sqsum) {
  Desc op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, CUDNN_GENSTATS_SUM_SQSUM)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, y)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum);
  return op;
}

// Forward y = conv(x, w), or the weight gradient dw (the w slot) from x and dy (the y slot).
Desc conv_op(bool wgrad, const Desc& x, const Desc& w, const Desc& y) {
  if (!wgrad) {
    Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y)
        .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv_desc());
    op.finalize();
    return op;
  }
  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, y)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv_desc());
  op.finalize();
  return op;
}

Desc finalized(Desc d) {
  d.finalize();
  return d;
}

// An operation graph of `ops` (not finalized).
Desc graph_of(const std::vector<const Desc*>& ops, cudnnHandle_t h) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc* d : ops) raw.push_back(d->get());
  Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, h);
  return g;
}

struct Case {
  cudnnDataType_t t = CUDNN_DATA_BFLOAT16;
  bool wgrad = false, prologue = true, relu = true, genstats = true;
  bool nhwc = true;
};

std::string name(const Case& c) {
  return std::string(c.t == CUDNN_DATA_FLOAT ? "f32" : "bf16") + (c.wgrad ? " wgrad" : " forward") +
         (c.prologue ? (c.relu ? " +scale_bias_relu" : " +scale_bias") : "") + (c.genstats ? " +genstats" : "");
}

// The tensors and operations of one fused graph, in the order cuDNN's samples build them;
// the graph lists the operations reversed (cuDNN sorts them).
struct Net {
  Desc x, w, y, scale, bias, sum, sqsum, t1, t2, t3;
  std::vector<Desc> ops;
  Desc graph;
  Net(const Case& c, cudnnHandle_t h) {
    x = tensor(kX, kXd, c.t, c.nhwc), w = tensor(kW, kWd, c.t, c.nhwc), y = tensor(kY, kYd, c.t, c.nhwc);
    scale = tensor(kScale, kPerC, CUDNN_DATA_FLOAT, c.nhwc), bias = tensor(kBias, kPerC, CUDNN_DATA_FLOAT, c.nhwc);
    sum = tensor(kSum, kPerO, CUDNN_DATA_FLOAT, c.nhwc), sqsum = tensor(kSqsum, kPerO, CUDNN_DATA_FLOAT, c.nhwc);
    t1 = tensor(kT1, kXd, CUDNN_DATA_FLOAT, c.nhwc, true);
    t2 = tensor(kT2, kXd, c.relu ? CUDNN_DATA_FLOAT : c.t, c.nhwc, true);
    t3 = tensor(kT3, kXd, c.t, c.nhwc, true);
    const Desc* in = &x;
    if (c.prologue) {
      ops.push_back(finalized(pointwise_op(CUDNN_POINTWISE_MUL, x, &scale, t1)));
      ops.push_back(finalized(pointwise_op(CUDNN_POINTWISE_ADD, t1, &bias, t2)));
      in = &t2;
      if (c.relu) {
        ops.push_back(finalized(pointwise_op(CUDNN_POINTWISE_RELU_FWD, t2, nullptr, t3)));
        in = &t3;
      }
    }
    ops.push_back(conv_op(c.wgrad, *in, w, y));
    if (c.genstats) ops.push_back(finalized(genstats_op(y, sum, sqsum)));
    std::vector<const Desc*> list;
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) list.push_back(&*it);
    graph = graph_of(list, h);
  }
};

// The global indices of the engines behind `cfgs`.
std::vector<int64_t> engine_indices(const std::vector<Desc>& cfgs) {
  std::vector<int64_t> out;
  for (const Desc& cfg : cfgs) {
    Desc e(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t raw = e.get();
    int64_t n = 0, index = -1;
    CUDNN_CHECK(
        cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw));
    CUDNN_CHECK(cudnnBackendGetAttribute(e.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
    out.push_back(index);
  }
  return out;
}

// ---- the reference: written from the formats' and operations' definitions -------------------

// bfloat16 round to nearest even (no NaNs in these tests).
float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
float round_to(float f, cudnnDataType_t t) { return t == CUDNN_DATA_BFLOAT16 ? round_bf16(f) : f; }

// A host tensor of logical dims (n, c, h, w) stored NHWC, as values already of the data type.
struct Host {
  std::vector<int64_t> d;
  std::vector<float> v;
  explicit Host(std::vector<int64_t> dims) : d(std::move(dims)), v(size_t(d[0] * d[1] * d[2] * d[3])) {}
  float& at(int64_t n, int64_t c, int64_t h, int64_t w) { return v[size_t(((n * d[2] + h) * d[3] + w) * d[1] + c)]; }
  std::vector<uint8_t> bytes(cudnnDataType_t t) const {
    std::vector<uint8_t> b(v.size() * (t == CUDNN_DATA_FLOAT ? 4 : 2));
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      if (t == CUDNN_DATA_FLOAT) {
        std::memcpy(&b[i * 4], &u, 4);
      } else {
        const uint16_t top = uint16_t(u >> 16);  // v holds bf16 values: the low half is zero
        std::memcpy(&b[i * 2], &top, 2);
      }
    }
    return b;
  }
  void read(const std::vector<uint8_t>& b, cudnnDataType_t t) {
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u = 0;
      if (t == CUDNN_DATA_FLOAT) {
        std::memcpy(&u, &b[i * 4], 4);
      } else {
        uint16_t top;
        std::memcpy(&top, &b[i * 2], 2);
        u = uint32_t(top) << 16;
      }
      std::memcpy(&v[i], &u, 4);
    }
  }
};

// Deterministic values with both signs, rounded to the data type.
void fill(Host& h, int seed, float step, cudnnDataType_t t) {
  for (size_t i = 0; i < h.v.size(); ++i)
    h.v[i] = round_to(float(int((i * 37 + size_t(seed) * 11) % 23) - 11) * step, t);
}

struct Device {
  void* p = nullptr;
  size_t n = 0;
  explicit Device(const std::vector<uint8_t>& b) : n(b.size()) {
    REQUIRE(cudaMalloc(&p, n) == cudaSuccess);
    REQUIRE(cudaMemcpy(p, b.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  explicit Device(size_t bytes) : n(bytes) { REQUIRE(cudaMalloc(&p, std::max<size_t>(n, 1)) == cudaSuccess); }
  std::vector<uint8_t> get() const {
    std::vector<uint8_t> b(n);
    REQUIRE(cudaMemcpy(b.data(), p, n, cudaMemcpyDeviceToHost) == cudaSuccess);
    return b;
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

// Note [Fusion test tolerances]
// The reference makes the convolution's input as the fake must: float(x) * scale + bias, each
// operation rounded to float (volatile stops an FMA), relu, rounded to the data type. Then a
// direct convolution in double. The bounds, with S = the sum of |x'| |w| (or |x'| |dy|) over
// the terms of an output:
//   bf16  inputs exact (bf16 operands), float accumulation (36 or 70 terms: < 2^-17 S), one
//         rounding to bf16: |got - ref| <= 2^-8 |ref| + 2^-16 S
//   f32   the engine's tensor cores round both operands to TF32 (2^-11 each):
//         |got - ref| <= 2^-23 |ref| + 2^-10 S
// genstats is checked against the sums of y as stored (double, rounded once to f32: within
// 2^-22 of sum |y| and sum y^2) and, looser, against the reference's y (each element's bound
// summed, for sqsum times 2 |ref| + bound).
struct Bound {
  double rel, abs_of_s;
};
Bound bound_of(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT ? Bound{0x1p-23, 0x1p-10} : Bound{0x1p-8, 0x1p-16}; }

void run_case(const Case& c) {
  INFO(name(c));
  const Handle h;
  Net net(c, h.h);
  REQUIRE_MESSAGE(net.graph.try_finalize() == CUDNN_STATUS_SUCCESS, last_error());
  const Desc plan = first_plan(net.graph, h.h, CUDNN_HEUR_MODE_A);

  Host x(kXd), w(kWd), y(kYd);
  fill(x, 1, 0.25f, c.t);
  fill(w, 2, 1.0f / 16, c.t);
  if (c.wgrad) fill(y, 3, 0.125f, c.t);  // dy
  std::vector<float> scale(C), bias(C);
  for (int64_t i = 0; i < C; ++i)
    scale[size_t(i)] = 0.75f + 0.3f * float(i), bias[size_t(i)] = -0.4f + 0.35f * float(i);

  // The convolution's input, as Note [Fusion test tolerances] says.
  Host xin = x;
  if (c.prologue)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j) {
            volatile float scaled = x.at(n, ch, i, j) * scale[size_t(ch)];
            float v = scaled + bias[size_t(ch)];
            if (c.relu) v = std::max(v, 0.0f);
            xin.at(n, ch, i, j) = round_to(v, c.t);
          }

  auto f32_bytes = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  const size_t es = c.t == CUDNN_DATA_FLOAT ? 4 : 2;  // the output starts zeroed, so that nothing reads it unset
  Device dx(x.bytes(c.t)), dw(c.wgrad ? std::vector<uint8_t>(w.v.size() * es) : w.bytes(c.t)),
      dy(c.wgrad ? y.bytes(c.t) : std::vector<uint8_t>(y.v.size() * es)), dscale(f32_bytes(scale)),
      dbias(f32_bytes(bias)), dsum(size_t(O) * 4), dsqsum(size_t(O) * 4), ws(size_t(workspace_of(plan)));
  std::vector<int64_t> uids = {kX, kW, kY};
  std::vector<void*> ptrs = {dx.p, dw.p, dy.p};
  if (c.prologue) uids.insert(uids.end(), {kScale, kBias}), ptrs.insert(ptrs.end(), {dscale.p, dbias.p});
  if (c.genstats) uids.insert(uids.end(), {kSum, kSqsum}), ptrs.insert(ptrs.end(), {dsum.p, dsqsum.p});
  REQUIRE_MESSAGE(cudnnBackendExecute(h.h, plan.get(), pack(uids, ptrs, ws.p).get()) == CUDNN_STATUS_SUCCESS,
                  last_error());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(fake::last_engine_executed() == "tc_runtime_compiled");

  const Bound b = bound_of(c.t);
  int bad = 0;
  if (!c.wgrad) {
    Host got(kYd);
    got.read(dy.get(), c.t);
    std::vector<double> ref_sum(O), bound_sum(O), ref_sq(O), bound_sq(O), stored_sum(O), stored_sq(O), abs_sum(O);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j) {
            double ref = 0, s = 0;
            for (int64_t ch = 0; ch < C; ++ch)
              for (int64_t ki = 0; ki < K; ++ki)
                for (int64_t kj = 0; kj < K; ++kj) {
                  const int64_t hi = i - P + ki, wj = j - P + kj;
                  if (hi < 0 || hi >= H || wj < 0 || wj >= W) continue;
                  const double term = double(xin.at(n, ch, hi, wj)) * double(w.at(o, ch, ki, kj));
                  ref += term, s += std::fabs(term);
                }
            const double g = got.at(n, o, i, j), tol = b.rel * std::fabs(ref) + b.abs_of_s * s;
            if (std::fabs(g - ref) > tol && ++bad <= 5)
              FAIL_CHECK("y(", n, ", ", o, ", ", i, ", ", j, ") = ", g, ", reference ", ref, " (bound ", tol, ")");
            ref_sum[size_t(o)] += ref, bound_sum[size_t(o)] += tol;
            ref_sq[size_t(o)] += ref * ref, bound_sq[size_t(o)] += tol * (2 * std::fabs(ref) + tol);
            stored_sum[size_t(o)] += g, stored_sq[size_t(o)] += g * g, abs_sum[size_t(o)] += std::fabs(g);
          }
    if (c.genstats) {
      std::vector<float> sum(O), sq(O);
      std::memcpy(sum.data(), dsum.get().data(), size_t(O) * 4);
      std::memcpy(sq.data(), dsqsum.get().data(), size_t(O) * 4);
      for (int64_t o = 0; o < O; ++o) {
        const size_t k = size_t(o);
        CHECK_MESSAGE(std::fabs(sum[k] - stored_sum[k]) <= 0x1p-22 * abs_sum[k], "sum[", o, "] ", sum[k], " vs ",
                      stored_sum[k]);
        CHECK_MESSAGE(std::fabs(sq[k] - stored_sq[k]) <= 0x1p-22 * stored_sq[k], "sqsum[", o, "] ", sq[k], " vs ",
                      stored_sq[k]);
        CHECK_MESSAGE(std::fabs(sum[k] - ref_sum[k]) <= bound_sum[k] + 0x1p-22 * abs_sum[k], "sum[", o, "] ", sum[k],
                      " vs the reference's ", ref_sum[k]);
        CHECK_MESSAGE(std::fabs(sq[k] - ref_sq[k]) <= bound_sq[k] + 0x1p-22 * ref_sq[k], "sqsum[", o, "] ", sq[k],
                      " vs the reference's ", ref_sq[k]);
      }
    }
  } else {
    Host got(kWd);
    got.read(dw.get(), c.t);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t ki = 0; ki < K; ++ki)
          for (int64_t kj = 0; kj < K; ++kj) {
            double ref = 0, s = 0;
            for (int64_t n = 0; n < N; ++n)
              for (int64_t i = 0; i < H; ++i)
                for (int64_t j = 0; j < W; ++j) {
                  const int64_t hi = i - P + ki, wj = j - P + kj;
                  if (hi < 0 || hi >= H || wj < 0 || wj >= W) continue;
                  const double term = double(xin.at(n, ch, hi, wj)) * double(y.at(n, o, i, j));
                  ref += term, s += std::fabs(term);
                }
            const double g = got.at(o, ch, ki, kj), tol = b.rel * std::fabs(ref) + b.abs_of_s * s;
            if (std::fabs(g - ref) > tol && ++bad <= 5)
              FAIL_CHECK("dw(", o, ", ", ch, ", ", ki, ", ", kj, ") = ", g, ", reference ", ref, " (bound ", tol, ")");
          }
  }
  CHECK_MESSAGE(bad == 0, bad, " elements outside the bound");
}

}  // namespace

TEST_CASE("fused forward and weight-gradient graphs against a naive reference, bf16 and f32 NHWC") {
  for (cudnnDataType_t t : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT}) {
    run_case({t, false, true, true, true});    // F: prologue + relu + genstats
    run_case({t, false, true, false, true});   // F without relu
    run_case({t, false, false, false, true});  // F genstats only
    run_case({t, false, true, true, false});   // F prologue only
    run_case({t, true, true, true, false});    // W: prologue + relu into the weight gradient
    run_case({t, true, true, false, false});   // W without relu
  }
}

TEST_CASE("fused graph refusals: status and message") {
  const Handle h;
  const cudnnDataType_t t = CUDNN_DATA_BFLOAT16;
  // Pointwise modes the fake does not compute, and relu variants it does not either.
  Desc tanh(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  tanh.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_TANH_FWD)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
  EXPECT_STATUS(tanh.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED, "TANH_FWD (101) is not emulated");
  Desc clipped(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  clipped.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_RELU_FWD)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 6.0);
  EXPECT_STATUS(clipped.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED, "CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP is 6");
  Desc elu(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  const double alpha = 1.0;
  EXPECT_STATUS(cudnnBackendSetAttribute(elu.get(), CUDNN_ATTR_POINTWISE_ELU_ALPHA, CUDNN_TYPE_DOUBLE, 1, &alpha),
                CUDNN_STATUS_NOT_SUPPORTED, "does not emulate");

  const Desc x = tensor(kX, kXd, t), w = tensor(kW, kWd, t), y = tensor(kY, kYd, t);
  const Desc scale = tensor(kScale, kPerC, CUDNN_DATA_FLOAT), bias = tensor(kBias, kPerC, CUDNN_DATA_FLOAT);
  const Desc sum = tensor(kSum, kPerO, CUDNN_DATA_FLOAT), sqsum = tensor(kSqsum, kPerO, CUDNN_DATA_FLOAT);
  const Desc t1 = tensor(kT1, kXd, CUDNN_DATA_FLOAT, true, true), t2 = tensor(kT2, kXd, t, true, true);
  const Desc mul = finalized(pointwise_op(CUDNN_POINTWISE_MUL, x, &scale, t1));
  const Desc add = finalized(pointwise_op(CUDNN_POINTWISE_ADD, t1, &bias, t2));
  const Desc conv = conv_op(false, t2, w, y), stats = finalized(genstats_op(y, sum, sqsum));

  // Shapes: a scale that does not broadcast, one that does but is not per channel.
  const Desc wide = tensor(kScale, {1, C + 4, 1, 1}, CUDNN_DATA_FLOAT),
             one = tensor(kScale, {1, 1, 1, 1}, CUDNN_DATA_FLOAT);
  EXPECT_STATUS(pointwise_op(CUDNN_POINTWISE_MUL, x, &wide, t1).try_finalize(), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "b does not broadcast to x");
  const Desc mul_one = finalized(pointwise_op(CUDNN_POINTWISE_MUL, x, &one, t1));
  EXPECT_STATUS(graph_of({&mul_one, &add, &conv}, h.h).try_finalize(), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                "the prologue's scale is tensor uid 4 (1, 1, 1, 1); it holds one value per channel of x (2, 4, 5, 7): "
                "give it dims (1, 4, 1, 1)");
  // A virtual tensor read twice: t1 by the ADD and by a genstats.
  const Desc s4 = tensor(kSum, kPerC, CUDNN_DATA_FLOAT), q4 = tensor(kSqsum, kPerC, CUDNN_DATA_FLOAT);
  const Desc stats_t1 = finalized(genstats_op(t1, s4, q4));
  EXPECT_STATUS(graph_of({&mul, &add, &conv, &stats_t1}, h.h).try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "virtual tensor uid 8 (2, 4, 5, 7) is produced by 1 and consumed by 2 operations");
  // Genstats of a virtual y.
  const Desc vy = tensor(kY, kYd, t, true, true);
  const Desc conv_vy = conv_op(false, t2, w, vy), stats_vy = finalized(genstats_op(vy, sum, sqsum));
  EXPECT_STATUS(graph_of({&mul, &add, &conv_vy, &stats_vy}, h.h).try_finalize(),
                CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "the convolution's y (virtual tensor uid 3");
  // Sums in bf16.
  const Desc sum16 = tensor(kSum, kPerO, t);
  EXPECT_STATUS(genstats_op(y, sum16, sqsum).try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                "genstats writes f32 sums");
  // MUL without ADD, a convolution alone with a pointwise of its output, a lone pointwise.
  const Desc conv_t1 = conv_op(false, t1, w, y);
  EXPECT_STATUS(graph_of({&mul, &conv_t1}, h.h).try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "MUL and ADD always together");
  const Desc plain = conv_op(false, x, w, vy), y_out = tensor(11, kYd, t);
  const Desc epilogue = finalized(pointwise_op(CUDNN_POINTWISE_RELU_FWD, vy, nullptr, y_out));
  EXPECT_STATUS(graph_of({&plain, &epilogue}, h.h).try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "operation 1 (pointwise RELU_FWD) is not part of a pattern");
  EXPECT_STATUS(graph_of({&mul}, h.h).try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                "the graph's one operation is a pointwise MUL");
  // Real tensors of one unique id.
  const Desc bias_dup = tensor(kScale, kPerC, CUDNN_DATA_FLOAT);
  const Desc add_dup = finalized(pointwise_op(CUDNN_POINTWISE_ADD, t1, &bias_dup, t2));
  EXPECT_STATUS(graph_of({&mul, &add_dup, &conv}, h.h).try_finalize(), CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES,
                "have one unique id");

  // The full pattern finalizes; its plan needs every real tensor in the variant pack.
  Desc good = graph_of({&stats, &conv, &add, &mul}, h.h);
  REQUIRE(good.try_finalize() == CUDNN_STATUS_SUCCESS);
  const Desc plan = first_plan(good, h.h, CUDNN_HEUR_MODE_A);
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, 1 << 16) == cudaSuccess);
  std::vector<int64_t> uids = {kX, kW, kY, kBias, kSum, kSqsum};
  const std::vector<void*> ptrs(uids.size(), p);
  EXPECT_STATUS(cudnnBackendExecute(h.h, plan.get(), pack(uids, ptrs, p).get()), CUDNN_STATUS_BAD_PARAM,
                "no pointer for the prologue's scale (unique id 4)");
  cudaFree(p);
}

TEST_CASE("fused graphs need an engine listing their fusions, and NHWC") {
  const Handle h;
  {
    REQUIRE(fake::set_engines("rc behavior=runtime_compilation dtypes=f32+bf16+f16 layout=nhwc channels=4 groups=1;"
                              "fma modes=a+fallback")
                .empty());
    Net net({}, h.h);
    REQUIRE(net.graph.try_finalize() == CUDNN_STATUS_SUCCESS);
    CHECK(heuristics(net.graph, CUDNN_HEUR_MODE_A).empty());
    CHECK(heuristics(net.graph, CUDNN_HEUR_MODE_FALLBACK).empty());
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, net.graph)
        .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, int64_t(0));
    engine.finalize();
    Desc cfg(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    cfg.set(CUDNN_ATTR_ENGINECFG_ENGINE, engine);
    EXPECT_STATUS(
        cfg.try_finalize(), CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
        "engine rc does not support this convolution: the graph fuses scale_bias_relu+genstats and the engine "
        "does not run scale_bias_relu+genstats");
    // One fusion listed, the other missing.
    REQUIRE(fake::set_engines("rc fusions=genstats layout=nhwc").empty());
    Net net2({}, h.h);
    REQUIRE(net2.graph.try_finalize() == CUDNN_STATUS_SUCCESS);
    CHECK(heuristics(net2.graph, CUDNN_HEUR_MODE_A).empty());
    fake::reset_engines();
  }
  // NCHW: the default list's runtime-compiled engine is offered, and refuses the layout.
  Case nchw;
  nchw.nhwc = false;
  Net net(nchw, h.h);
  REQUIRE(net.graph.try_finalize() == CUDNN_STATUS_SUCCESS);
  const std::vector<Desc> cfgs = heuristics(net.graph, CUDNN_HEUR_MODE_A);
  CHECK(engine_indices(cfgs) == std::vector<int64_t>{2});
  Desc plan;
  EXPECT_STATUS(try_plan(cfgs[0], h.h, &plan), CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                "fused graphs run on NHWC tensors only");
  // A layout=any engine with the fusions refuses NCHW all the same.
  REQUIRE(fake::set_engines("fused_any fusions=scale_bias_relu+genstats").empty());
  Net any(nchw, h.h);
  REQUIRE(any.graph.try_finalize() == CUDNN_STATUS_SUCCESS);
  const std::vector<Desc> any_cfgs = heuristics(any.graph, CUDNN_HEUR_MODE_A);
  REQUIRE(any_cfgs.size() == 1);
  EXPECT_STATUS(try_plan(any_cfgs[0], h.h, &plan), CUDNN_STATUS_NOT_SUPPORTED_LAYOUT,
                "x is NCHW and y NCHW; give x and y channels-last strides");
  fake::reset_engines();
}

TEST_CASE("single-convolution graphs get the engines they got before fusion") {
  const Handle h;
  for (const auto& [t, want] : {std::pair<cudnnDataType_t, std::vector<int64_t>>{CUDNN_DATA_FLOAT, {0, 2, 3, 5}},
                                {CUDNN_DATA_BFLOAT16, {0, 1, 2, 5}}}) {
    const Desc x = tensor(kX, kXd, t), w = tensor(kW, kWd, t), y = tensor(kY, kYd, t);
    const Desc op = conv_op(false, x, w, y);
    Desc g = graph_of({&op}, h.h);
    REQUIRE(g.try_finalize() == CUDNN_STATUS_SUCCESS);
    CHECK(engine_indices(heuristics(g, CUDNN_HEUR_MODE_A)) == want);
    CHECK(engine_indices(heuristics(g, CUDNN_HEUR_MODE_FALLBACK)) == std::vector<int64_t>{5});
  }
}

#else
TEST_CASE("cuDNN fake fused graphs") { std::printf("SKIPPED: not built with --config=cuda-emu\n"); }
#endif
