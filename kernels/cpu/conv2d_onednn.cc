// Note [oneDNN convolutions]
// Each convolution geometry (shapes, stride, padding, dilation, groups, both layouts, bias)
// gets a Plan, built once and cached: oneDNN's primitive descriptors and primitives for the
// forward, the data gradient and the weight gradient (the last two built on first use), and
// the reorders between our layouts and the ones oneDNN chose.
//
// Layouts. Activations stay in the caller's layout when that is NHWC: oneDNN's direct
// AVX2 / AVX-512 kernels (brgconv, jit) read and write NHWC as is. For NCHW they are left
// to oneDNN ("any": a blocked nChw16c or nChw8c), because with plain NCHW it falls back to
// an im2col + GEMM of its own that is 3-30x slower than its direct kernels (measured on
// 2 AVX-512 cores, 8x64x56x56 3x3: weight gradient 129 ms NCHW-GEMM vs 4.7 ms NHWC-direct).
// Weights are always "any": oneDNN wants them blocked (OIhw16i16o and the like); they are
// small next to the activations, and reordered each call, as PyTorch does.
//
// Copies. When a layout differs, the operand goes through one of the thread's scratch
// slots (kernels/cpu/scratch.h: grown once, reused every step) with a cached reorder; no
// oneDNN memory is allocated on a step's path after the first (oneDNN's own scratchpad is
// its global one, also reused).
#include "kernels/cpu/conv2d_onednn.h"

#ifdef RT_WITHOUT_ONEDNN
// Built without oneDNN (--define=ringtape_onednn=off, third_party/BUILD): every f32
// convolution runs on the im2col + GEMM kernels.
#include <atomic>

namespace rt::cpu {
namespace {
std::atomic<ConvAlgo> g_algo{ConvAlgo::im2col};
}  // namespace

void set_conv_algo(ConvAlgo a) { g_algo.store(a); }
ConvAlgo conv_algo() { return g_algo.load(); }
const char* conv_algo_name(ConvAlgo a) { return a == ConvAlgo::onednn ? "onednn" : "im2col"; }
bool onednn_conv2d_forward(const Conv2dGeom&, const float*, const float*, const float*, float*) { return false; }
bool onednn_conv2d_backward(const Conv2dGeom&, const float*, const float*, const float*, float*, float*, float*) {
  return false;
}
std::string onednn_conv2d_impl(const Conv2dGeom&) { return std::string(); }

}  // namespace rt::cpu
#else

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"

namespace rt::cpu {
namespace {

// Runs a oneDNN call; a dnnl::error becomes an rt::Error naming the call, where it was
// made and oneDNN's status.
#define RT_DNNL(call)                                                                                     \
  do {                                                                                                    \
    try {                                                                                                 \
      call;                                                                                               \
    } catch (const dnnl::error& e) {                                                                      \
      RT_FAIL("oneDNN: ", #call, " failed (", __FILE__, ":", __LINE__, "): ", e.what(), " (status ", int(e.status), \
              ")");                                                                                       \
    }                                                                                                     \
  } while (0)

using Desc = dnnl::memory::desc;
using Tag = dnnl::memory::format_tag;
using Dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

std::atomic<ConvAlgo> g_algo{ConvAlgo::onednn};

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& cpu_stream() {
  static dnnl::stream s(cpu_engine());
  return s;
}

// The scratch slots a plan's operands go through (at most one operand per slot in any one
// primitive), and the two of Note [Strided 1x1 convolutions].
enum Slot : int { kSlotA = 0, kSlotB = 1, kSlotC = 2, kSlotD = 3, kSlotSub = 4, kSlotSubGrad = 5 };
static_assert(kScratchSlots >= 6);

// An operand in the caller's layout (`user`) and in the one a primitive takes (`want`),
// with the reorder between them when they differ.
struct Operand {
  Desc user, want;
  std::optional<dnnl::reorder> reorder;  // user -> want for inputs, want -> user for outputs
  bool output = false;

  Operand() = default;
  Operand(const Desc& u, const Desc& w, bool out) : user(u), want(w), output(out) {
    if (user == want) return;
    const dnnl::memory a(out ? want : user, cpu_engine(), DNNL_MEMORY_NONE),
        b(out ? user : want, cpu_engine(), DNNL_MEMORY_NONE);
    RT_DNNL(reorder.emplace(dnnl::reorder::primitive_desc(a, b)));
  }

  // Memory for the primitive: the caller's buffer itself, or scratch slot `slot` (filled
  // from the caller's buffer first for an input).
  dnnl::memory bind(const void* ptr, int slot) const {
    void* p = const_cast<void*>(ptr);  // inputs are only read
    if (!reorder) return dnnl::memory(want, cpu_engine(), p);
    dnnl::memory m(want, cpu_engine(), scratch_bytes(slot, want.get_size()));
    if (!output) {
      dnnl::memory u(user, cpu_engine(), p);
      RT_DNNL(reorder->execute(cpu_stream(), u, m));
    }
    return m;
  }
  // After the primitive ran: copies an output back into the caller's buffer.
  void finish(dnnl::memory m, void* ptr) const {
    if (!reorder || !output) return;
    dnnl::memory u(user, cpu_engine(), ptr);
    RT_DNNL(reorder->execute(cpu_stream(), m, u));
  }
};

struct Plan {
  bool supported = true;  // false: oneDNN has no implementation; use the reference
  Desc x, y, w, b;        // the caller's layouts
  Dims strides, dilates, pad_l, pad_r;
  bool nhwc = false;

  std::optional<dnnl::convolution_forward::primitive_desc> fwd_pd;
  std::optional<dnnl::convolution_forward> fwd;
  Operand fx, fw, fy;

  std::optional<dnnl::convolution_backward_data> bwd_data;
  Operand dy_d, w_d, dx_d;

  // Weight gradient with and without the bias gradient ([1]: with).
  std::array<std::optional<dnnl::convolution_backward_weights>, 2> bwd_w;
  std::array<Operand, 2> x_w, dy_w, dw_w;
};

using Key = std::array<int64_t, 19>;

Key key_of(const Conv2dGeom& g, bool bias) {
  return {g.N,  g.C,  g.H,  g.W,  g.O,  g.KH, g.KW,      g.HO,          g.WO, g.sh,
          g.sw, g.ph, g.pw, g.dh, g.dw, g.groups, g.nhwc, g.weight_ohwi, bias};
}

Desc any_like(const Desc& d) { return Desc(d.dims(), Dt::f32, Tag::any); }

// Builds the forward part of a plan; supported = false when oneDNN has no implementation.
void build_forward(const Conv2dGeom& g, bool bias, Plan& p) {
  const Tag act = g.nhwc ? Tag::nhwc : Tag::nchw;
  p.nhwc = g.nhwc;
  p.x = Desc({g.N, g.C, g.H, g.W}, Dt::f32, act);
  p.y = Desc({g.N, g.O, g.HO, g.WO}, Dt::f32, act);
  if (g.groups == 1)
    p.w = Desc({g.O, g.C, g.KH, g.KW}, Dt::f32, g.weight_ohwi ? Tag::ohwi : Tag::oihw);
  else
    p.w = Desc({g.groups, g.O / g.groups, g.C / g.groups, g.KH, g.KW}, Dt::f32, g.weight_ohwi ? Tag::gohwi : Tag::goihw);
  p.b = Desc({g.O}, Dt::f32, Tag::x);
  p.strides = {g.sh, g.sw};
  p.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps: 0 is a dense kernel
  p.pad_l = {g.ph, g.pw};
  // The high-side padding the output size implies (negative when the last rows of the
  // input are never read, e.g. a stride-2 1x1 convolution of an even size).
  p.pad_r = {(g.HO - 1) * g.sh + (g.KH - 1) * g.dh + 1 - g.H - g.ph,
             (g.WO - 1) * g.sw + (g.KW - 1) * g.dw + 1 - g.W - g.pw};
  const Desc xa = g.nhwc ? p.x : any_like(p.x), ya = g.nhwc ? p.y : any_like(p.y);
  try {
    const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                         dnnl::algorithm::convolution_direct, xa, any_like(p.w), p.b,
                                                         ya, p.strides, p.dilates, p.pad_l, p.pad_r)
                        : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                         dnnl::algorithm::convolution_direct, xa, any_like(p.w), ya,
                                                         p.strides, p.dilates, p.pad_l, p.pad_r);
    p.fwd_pd.emplace(d, cpu_engine());
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    p.supported = false;
    return;
  }
  RT_DNNL(p.fwd.emplace(*p.fwd_pd));
  p.fx = Operand(p.x, p.fwd_pd->src_desc(), false);
  p.fw = Operand(p.w, p.fwd_pd->weights_desc(), false);
  p.fy = Operand(p.y, p.fwd_pd->dst_desc(), true);
}

bool build_backward_data(Plan& p) {
  const Desc xa = p.nhwc ? p.x : any_like(p.x), ya = p.nhwc ? p.y : any_like(p.y);
  std::optional<dnnl::convolution_backward_data::primitive_desc> pd;
  try {
    pd.emplace(dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, xa, any_like(p.w), ya,
                                                     p.strides, p.dilates, p.pad_l, p.pad_r),
               cpu_engine(), *p.fwd_pd);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    return false;
  }
  RT_DNNL(p.bwd_data.emplace(*pd));
  p.dy_d = Operand(p.y, pd->diff_dst_desc(), false);
  p.w_d = Operand(p.w, pd->weights_desc(), false);
  p.dx_d = Operand(p.x, pd->diff_src_desc(), true);
  return true;
}

bool build_backward_weights(Plan& p, bool bias) {
  const Desc xa = p.nhwc ? p.x : any_like(p.x), ya = p.nhwc ? p.y : any_like(p.y);
  std::optional<dnnl::convolution_backward_weights::primitive_desc> pd;
  try {
    const auto d = bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, xa,
                                                                   any_like(p.w), p.b, ya, p.strides, p.dilates,
                                                                   p.pad_l, p.pad_r)
                        : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, xa,
                                                                   any_like(p.w), ya, p.strides, p.dilates, p.pad_l,
                                                                   p.pad_r);
    pd.emplace(d, cpu_engine(), *p.fwd_pd);
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
    return false;
  }
  RT_DNNL(p.bwd_w[bias].emplace(*pd));
  p.x_w[bias] = Operand(p.x, pd->src_desc(), false);
  p.dy_w[bias] = Operand(p.y, pd->diff_dst_desc(), false);
  p.dw_w[bias] = Operand(p.w, pd->diff_weights_desc(), true);
  return true;
}

std::mutex g_mu;  // guards g_plans and the lazy parts of every plan
std::map<Key, std::unique_ptr<Plan>> g_plans;

// The plan of a geometry (built on first use; forward part only).
Plan& plan_of(const Conv2dGeom& g, bool bias) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::unique_ptr<Plan>& p = g_plans[key_of(g, bias)];
  if (!p) {
    auto fresh = std::make_unique<Plan>();
    try {
      build_forward(g, bias, *fresh);
    } catch (const dnnl::error& e) {
      RT_FAIL("oneDNN: building the convolution ", g.N, "x", g.C, "x", g.H, "x", g.W, " -> ", g.O, " (kernel ", g.KH,
              "x", g.KW, ", stride ", g.sh, ", padding ", g.ph, ", dilation ", g.dh, ", groups ", g.groups, ", ",
              g.nhwc ? "NHWC" : "NCHW", ") failed (", __FILE__, ":", __LINE__, "): ", e.what(), " (status ",
              int(e.status), ")");
    }
    p = std::move(fresh);
  }
  return *p;
}

// oneDNN takes no zero-sized convolution; the reference handles them (nothing to compute).
bool empty(const Conv2dGeom& g) { return g.N == 0 || g.C == 0 || g.O == 0 || g.HO == 0 || g.WO == 0; }

bool forward(const Conv2dGeom& g, const float* x, const float* w, const float* bias, float* y) {
  const Plan& p = plan_of(g, bias != nullptr);
  if (!p.supported) return false;
  const dnnl::memory mx = p.fx.bind(x, kSlotA), mw = p.fw.bind(w, kSlotB), my = p.fy.bind(y, kSlotC);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.b, cpu_engine(), const_cast<float*>(bias)));
  RT_DNNL(p.fwd->execute(cpu_stream(), args));
  p.fy.finish(my, y);
  return true;
}

bool backward(const Conv2dGeom& g, const float* x, const float* w, const float* dy, float* dx, float* dw, float* db) {
  // The forward plan without bias carries both gradients; the bias only changes which
  // weight-gradient primitive runs.
  Plan& p = plan_of(g, false);
  if (!p.supported) return false;
  if (dw) {
    const bool with_bias = db != nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (!p.bwd_w[with_bias] && !build_backward_weights(p, with_bias)) return false;
    }
    const dnnl::memory mx = p.x_w[with_bias].bind(x, kSlotA), mdy = p.dy_w[with_bias].bind(dy, kSlotB),
                       mdw = p.dw_w[with_bias].bind(dw, kSlotC);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, mx}, {DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_DIFF_WEIGHTS, mdw}};
    if (db) args.emplace(DNNL_ARG_DIFF_BIAS, dnnl::memory(p.b, cpu_engine(), db));
    RT_DNNL(p.bwd_w[with_bias]->execute(cpu_stream(), args));
    p.dw_w[with_bias].finish(mdw, dw);
  } else if (db) {
    conv2d_bias_grad(g, dy, db);  // (x may not have been kept: the weight needs no gradient)
  }
  if (dx) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (!p.bwd_data && !build_backward_data(p)) return false;
    }
    const dnnl::memory mdy = p.dy_d.bind(dy, kSlotA), mw = p.w_d.bind(w, kSlotB), mdx = p.dx_d.bind(dx, kSlotC);
    RT_DNNL(p.bwd_data->execute(cpu_stream(), {{DNNL_ARG_DIFF_DST, mdy}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DIFF_SRC, mdx}}));
    p.dx_d.finish(mdx, dx);
  }
  return true;
}

// Note [Strided 1x1 convolutions]
// oneDNN 2.6's 1x1 kernels take a stride by gathering the input into a scratchpad of their
// own, and for NHWC they size it wrong: the weight gradient of a ResNet's stride-2
// downsample wrote past it (valgrind: an 8-byte write just past a 448-byte block oneDNN
// allocated; glibc then aborted in resnet_parity_test). So oneDNN never sees a strided
// 1x1 convolution without padding: its input is subsampled here (x[:, :, ::sh, ::sw], a
// quarter of x at stride 2), convolved with stride 1, and the data gradient is scattered
// back into a zeroed dx. The same arithmetic, the same results.
bool strided_pointwise(const Conv2dGeom& g) {
  return g.KH == 1 && g.KW == 1 && g.ph == 0 && g.pw == 0 && (g.sh > 1 || g.sw > 1);
}

Conv2dGeom unit_stride(const Conv2dGeom& g) {
  Conv2dGeom u = g;
  u.H = g.HO;
  u.W = g.WO;
  u.sh = u.sw = u.dh = u.dw = 1;
  return u;
}

// Copies between x (N, C, H, W) and its subsample xs (N, C, HO, WO), xs[.., i, j] =
// x[.., i*sh, j*sw], in g's layout: to_sub gathers, else scatters xs into a zeroed x.
void resample(const Conv2dGeom& g, const float* from, float* to, bool to_sub) {
  const int64_t rows = g.nhwc ? g.N * g.HO : g.N * g.C * g.HO;
  if (!to_sub) std::fill(to, to + g.N * g.C * g.H * g.W, 0.0f);
  parallel_for(rows, [&](int64_t r) {
    const int64_t i = r % g.HO, plane = r / g.HO;  // plane: n (NHWC) or n*C + c (NCHW)
    if (g.nhwc) {
      for (int64_t j = 0; j < g.WO; ++j) {
        const int64_t full = ((plane * g.H + i * g.sh) * g.W + j * g.sw) * g.C, sub = (r * g.WO + j) * g.C;
        if (to_sub) std::copy(from + full, from + full + g.C, to + sub);
        else std::copy(from + sub, from + sub + g.C, to + full);
      }
    } else {
      const int64_t full = (plane * g.H + i * g.sh) * g.W, sub = r * g.WO;
      for (int64_t j = 0; j < g.WO; ++j) {
        if (to_sub) to[sub + j] = from[full + j * g.sw];
        else to[full + j * g.sw] = from[sub + j];
      }
    }
  }, g.nhwc ? g.WO * g.C : g.WO);
}

}  // namespace

void set_conv_algo(ConvAlgo a) { g_algo.store(a); }
ConvAlgo conv_algo() { return g_algo.load(); }
const char* conv_algo_name(ConvAlgo a) { return a == ConvAlgo::onednn ? "onednn" : "im2col"; }

bool onednn_conv2d_forward(const Conv2dGeom& g, const float* x, const float* w, const float* bias, float* y) {
  if (empty(g)) return false;
  if (!strided_pointwise(g)) return forward(g, x, w, bias, y);
  float* xs = scratch<float>(kSlotSub, size_t(g.N * g.C * g.HO * g.WO));
  resample(g, x, xs, true);
  return forward(unit_stride(g), xs, w, bias, y);
}

bool onednn_conv2d_backward(const Conv2dGeom& g, const float* x, const float* w, const float* dy, float* dx, float* dw,
                            float* db) {
  if (empty(g)) return false;
  if (!strided_pointwise(g)) return backward(g, x, w, dy, dx, dw, db);
  const size_t sub = size_t(g.N * g.C * g.HO * g.WO);
  float* xs = nullptr;
  if (dw) {
    xs = scratch<float>(kSlotSub, sub);
    resample(g, x, xs, true);
  }
  float* dxs = dx ? scratch<float>(kSlotSubGrad, sub) : nullptr;
  if (!backward(unit_stride(g), xs, w, dy, dxs, dw, db)) return false;
  if (dx) resample(g, dxs, dx, false);
  return true;
}

std::string onednn_conv2d_impl(const Conv2dGeom& g) {
  const Plan& p = plan_of(g, false);
  return p.supported ? std::string(p.fwd_pd->impl_info_str()) : std::string();
}

}  // namespace rt::cpu

#endif  // RT_WITHOUT_ONEDNN
