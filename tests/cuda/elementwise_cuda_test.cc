// GPU-vs-CPU tests of the elementwise, reduction and cast kernels: first each launcher on
// NaN-poisoned outputs (aligned and misaligned pointers, odd sizes) for every op of the
// table (kernels/elementwise_ops.h: an op added there is tested here without a new line),
// then every op through autograd on CUDA against the same op on the CPU, broadcasting
// included (cuda_test::check_matches_cpu). Without a GPU every GPU test prints a SKIPPED line
// and passes; the host-side checks (argument validation) still run.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "engine/cuda_graph.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/cast.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

cudaStream_t stream() { return static_cast<cudaStream_t>(Stream::current(gpu()).handle()); }

// Calls f(R{}) with R the CPU reference type for CUDA dtype t.
template <typename F>
void with_ref_type(DType t, F&& f) {
  if (t == DType::f64) f(double{});
  else f(float{});
}

// Sizes around the vector widths (2, 4, 8 elements a pack), odd ones, many blocks.
const std::vector<int64_t> kSizes = {1, 3, 7, 8, 13, 64, 1000, 4099, 65536 + 3, (1 << 20) + 8};
// Odd, so the scalar path; one grid (65535 blocks x 256 threads) short of covering it, so the
// grid-stride loop wraps.
constexpr int64_t kHuge = 65535LL * 256 + 5;
// The sizes of a dtype's sweep. Emulated (cuda_test::kEmulatedGpu) without the million and
// the 16.7 million: every op at those sizes took 200 s there; the grid-stride wrap is then
// checked by large_cuda_test (add, relu, add_relu at kHuge elements under the emulator).
std::vector<int64_t> sizes_for(DType t) {
  std::vector<int64_t> s = kSizes;
  if (kEmulatedGpu) s.pop_back();
  else if (t == DType::f32) s.push_back(kHuge);
  return s;
}

// Positive values (for sqrt): |v| + 0.25.
Tensor positive(const Tensor& v64) { return add(sqrt(square(v64)), 0.25); }

// A GPU copy of v64 in dtype t, starting `off` elements into its allocation (off = 1
// misaligns it for 16-byte packs). The element before it stays NaN.
struct Placed {
  Tensor full, view;
};
Placed place(const Tensor& v64, DType t, int64_t off) {
  const int64_t n = v64.numel();
  Placed p{poisoned({n + 1}, t), Tensor()};
  p.view = p.full.slice_batch(off, off + n);
  p.view.copy_(v64.to(t).to(gpu()));
  return p;
}

Placed poisoned_out(int64_t n, DType t, int64_t off) {
  Placed p{poisoned({n + 1}, t), Tensor()};
  p.view = p.full.slice_batch(off, off + n);
  return p;
}

// The out-of-range slot of a Placed output must still be NaN: no write outside [0, n).
void check_untouched(const Placed& p, int64_t off, const std::string& what) {
  const std::vector<double> v = p.full.to_vector<double>();
  const double guard = off == 0 ? v.back() : v.front();
  CHECK_MESSAGE(std::isnan(guard), what, ": wrote outside the output");
}

// Every op of the table (Note [Elementwise op table]).
const std::vector<ew::Unary> kAllUnary = {
#define RT_EW_LIST(name, Op) ew::Unary::name,
    RT_EW_UNARY_OPS(RT_EW_LIST)
#undef RT_EW_LIST
};
const std::vector<ew::Binary> kAllBinary = {
#define RT_EW_LIST(name, Op) ew::Binary::name,
    RT_EW_BINARY_OPS(RT_EW_LIST)
#undef RT_EW_LIST
};
// Ops defined for positive inputs only (pow: at the fractional power kPow).
bool positive_domain(ew::Unary op) { return op == ew::Unary::sqrt || op == ew::Unary::log || op == ew::Unary::pow; }
constexpr double kPow = 1.7;

TEST_CASE("launchers reject bad arguments on the host (runs without a GPU)") {
  CHECK_THROWS_WITH_AS(cuda::binary(cuda::Binary::add, DType::i32, 4, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::unary(cuda::Unary::relu, DType::f32, -1, nullptr, nullptr, 0.0, nullptr),
                       doctest::Contains("negative element count"), Error);
  CHECK_THROWS_WITH_AS(cuda::axpy(DType::f32, 8, 1.0, nullptr, nullptr, nullptr), doctest::Contains("null pointer"),
                       Error);
  // A backward formula's inputs must be there; those it does not read may be null.
  CHECK_THROWS_WITH_AS(cuda::unary_backward(cuda::Unary::sigmoid, DType::f32, 8, nullptr, nullptr, nullptr, nullptr,
                                            0.0, nullptr),
                       doctest::Contains("null pointer"), Error);
  ew::BroadcastPlan plan;
  plan.nd = 2;
  plan.size[0] = 3, plan.size[1] = 4;
  plan.stride[0][0] = 4, plan.stride[0][1] = 1, plan.stride[1][1] = 1;
  CHECK_THROWS_WITH_AS(cuda::binary_backward(cuda::Binary::mul, DType::f32, plan, nullptr, nullptr, nullptr, nullptr,
                                             nullptr, reinterpret_cast<void*>(16), nullptr),
                       doctest::Contains("null pointer"), Error);
  CHECK_THROWS_WITH_AS(cuda::sum_to(DType::f32, plan, 2, nullptr, nullptr, nullptr), doctest::Contains("operand 2"),
                       Error);
  CHECK_THROWS_WITH_AS(cuda::cast(DType::i32, DType::f32, 4, nullptr, nullptr, nullptr),
                       doctest::Contains("i32 -> f32 has no CUDA kernel"), Error);
  CHECK(cuda::cast_supported(DType::u8, DType::f32));
  CHECK(cuda::cast_supported(DType::bf16, DType::f16));
  CHECK_FALSE(cuda::cast_supported(DType::f32, DType::u8));
  // n == 0 is a no-op: no launch, no device needed.
  cuda::binary(cuda::Binary::add, DType::f32, 0, nullptr, nullptr, nullptr, nullptr);
}

TEST_CASE("the CPU backend still rejects 16-bit storage types (runs without a GPU)") {
  const Tensor a = Tensor::full({4}, 1.0, DType::bf16);
  CHECK_THROWS_WITH_AS(add(a, a), doctest::Contains("the CPU backend computes in f32 or f64"), Error);
  CHECK_THROWS_WITH_AS(sum(a), doctest::Contains("the CPU backend computes in f32 or f64"), Error);
}

// By hand: the launchers (not the ops) at offsets 0 and 1, and the bytes around their outputs.
TEST_CASE("elementwise launchers write every element, aligned and misaligned") {
  if (!have_gpu("elementwise launchers write every element, aligned and misaligned")) return;
  for (DType t : kFloatTypes) {
    for (int64_t n : sizes_for(t)) {
      for (int64_t off : {0, 1}) {
        if (n == kHuge && off == 1) continue;  // odd n: already the scalar path
        const Tensor a64 = rnd({n}, 11 + n), b64 = rnd({n}, 12 + n), p64 = positive(rnd({n}, 13 + n));
        const Placed a = place(a64, t, off), b = place(b64, t, off), p = place(p64, t, off);
        const Tensor ar = to_ref(a64, t), br = to_ref(b64, t), pr = to_ref(p64, t);
        const std::string sfx = std::string(" n=") + std::to_string(n) + " off=" + std::to_string(off);
        auto run = [&](const std::string& name, auto&& launch, auto&& reference) {
          const std::string what = label(name, t, {n}) + sfx;
          Placed y = poisoned_out(n, t, off);
          launch(y.view.raw_data());
          Tensor want = Tensor::empty({n}, ref_dtype(t));
          with_ref_type(t, [&](auto z) { reference(z, want); });
          check_on_gpu(y.view, want, gpu_tol_for(t), what);
          check_untouched(y, off, what);
        };
        const cudaStream_t s = stream();
        for (ew::Binary op : kAllBinary) {
          // A divisor away from 0.
          const Placed& bb = op == ew::Binary::div ? p : b;
          const Tensor& bbr = op == ew::Binary::div ? pr : br;
          run(ew::name(op), [&](void* y) { cuda::binary(op, t, n, a.view.raw_data(), bb.view.raw_data(), y, s); },
              [&](auto z, Tensor& w) {
                using R = decltype(z);
                cpu::binary<R>(op, n, ar.data<R>(), bbr.data<R>(), w.data<R>());
              });
          // The backward formulas on the same values (a, b, y = p, dy = b): da, db and both.
          const ew::BroadcastPlan dense = ew::BroadcastPlan::dense(n);
          for (int which = 0; which < 3; ++which) {
            const std::string gname = std::string(ew::name(op)) + (which == 0 ? " da" : which == 1 ? " db" : " da+db");
            Placed other = poisoned_out(n, t, off);
            run(gname,
                [&](void* y) {
                  cuda::binary_backward(op, t, dense, a.view.raw_data(), bb.view.raw_data(), p.view.raw_data(),
                                        b.view.raw_data(), which != 1 ? y : nullptr,
                                        which == 1 ? y : which == 2 ? other.view.raw_data() : nullptr, s);
                },
                [&](auto z, Tensor& w) {
                  using R = decltype(z);
                  Tensor spare = Tensor::empty({n}, ref_dtype(t));
                  cpu::binary_backward<R>(op, dense, ar.data<R>(), bbr.data<R>(), pr.data<R>(), br.data<R>(),
                                          which != 1 ? w.data<R>() : nullptr,
                                          which == 1 ? w.data<R>() : which == 2 ? spare.data<R>() : nullptr);
                  if (which == 2) {  // the second output too
                    check_on_gpu(other.view, spare, gpu_tol_for(t), label(gname + " (db)", t, {n}) + sfx);
                    check_untouched(other, off, gname + " (db)");
                  }
                });
          }
        }
        for (ew::Unary op : kAllUnary) {
          const bool pos = positive_domain(op);
          const Placed& x = pos ? p : a;
          const Tensor& xr = pos ? pr : ar;
          const double pw = op == ew::Unary::pow ? kPow : 0.0;
          run(ew::name(op), [&](void* y) { cuda::unary(op, t, n, x.view.raw_data(), y, pw, s); },
              [&](auto z, Tensor& w) {
                using R = decltype(z);
                cpu::unary<R>(op, n, xr.data<R>(), w.data<R>(), pw);
              });
          // The backward formula on the same values (x, y = p, dy = b).
          run(std::string(ew::name(op)) + " backward",
              [&](void* y) {
                cuda::unary_backward(op, t, n, x.view.raw_data(), p.view.raw_data(), b.view.raw_data(), y, pw, s);
              },
              [&](auto z, Tensor& w) {
                using R = decltype(z);
                cpu::unary_backward<R>(op, n, xr.data<R>(), pr.data<R>(), br.data<R>(), w.data<R>(), pw);
              });
        }
        run("affine", [&](void* y) { cuda::affine(t, n, a.view.raw_data(), -1.75, 0.5, y, s); },
            [&](auto z, Tensor& w) {
              using R = decltype(z);
              cpu::affine<R>(n, ar.data<R>(), -1.75, 0.5, w.data<R>());
            });
        run("relu_backward", [&](void* y) { cuda::relu_backward(t, n, a.view.raw_data(), b.view.raw_data(), y, s); },
            [&](auto z, Tensor& w) {
              using R = decltype(z);
              cpu::relu_backward<R>(n, ar.data<R>(), br.data<R>(), w.data<R>());
            });
        run("sqrt_backward", [&](void* y) { cuda::sqrt_backward(t, n, p.view.raw_data(), b.view.raw_data(), y, s); },
            [&](auto z, Tensor& w) {
              using R = decltype(z);
              for (int64_t i = 0; i < n; ++i) w.data<R>()[i] = br.data<R>()[i] / (R(2) * pr.data<R>()[i]);
            });
        run("axpy",
            [&](void* y) {
              // y <- a, then y += 0.375 b in place.
              cuda::affine(t, n, a.view.raw_data(), 1.0, 0.0, y, s);
              cuda::axpy(t, n, 0.375, b.view.raw_data(), y, s);
            },
            [&](auto z, Tensor& w) {
              using R = decltype(z);
              std::copy_n(ar.data<R>(), n, w.data<R>());
              cpu::axpy<R>(n, 0.375, br.data<R>(), w.data<R>());
            });
        run("fill_from_scalar", [&](void* y) { cuda::fill_from_scalar(t, n, a.view.raw_data(), -0.5, y, s); },
            [&](auto z, Tensor& w) {
              using R = decltype(z);
              std::fill_n(w.data<R>(), n, R(double(ar.data<R>()[0]) * -0.5));
            });
      }
    }
  }
}

// By hand: a launcher, and the same bits on a second run.
TEST_CASE("sum launcher: every dtype and size, deterministic") {
  if (!have_gpu("sum launcher: every dtype and size, deterministic")) return;
  for (DType t : kFloatTypes) {
    {  // n == 0: the sum of nothing is 0 (both kernels still run, x is never read).
      Tensor partials = poisoned({cuda::kSumBlocks}, DType::f64), y = poisoned({}, t);
      cuda::sum(t, 0, nullptr, 1.0, y.raw_data(), partials.raw_data(), stream());
      CHECK_MESSAGE(y.item() == 0.0, label("sum", t, {0}));
    }
    for (int64_t n : sizes_for(t)) {
      for (int64_t off : {0, 1}) {
        const Tensor x64 = rnd({n}, 21 + n);
        const Placed x = place(x64, t, off);
        const Tensor xr = to_ref(x64, t);
        for (double scale : {1.0, 1.0 / double(n)}) {  // sum, mean
          Tensor partials = poisoned({cuda::kSumBlocks}, DType::f64);
          Tensor y1 = poisoned({}, t), y2 = poisoned({}, t);
          cuda::sum(t, n, x.view.raw_data(), scale, y1.raw_data(), partials.raw_data(), stream());
          cuda::sum(t, n, x.view.raw_data(), scale, y2.raw_data(), partials.raw_data(), stream());
          double want = 0;
          with_ref_type(t, [&](auto z) {
            using R = decltype(z);
            want = cpu::sum<R>(n, xr.data<R>()) * scale;
          });
          const std::string what = label(scale == 1.0 ? "sum" : "mean", t, {n}) + " off=" + std::to_string(off);
          check_close({y1.item()}, {want}, gpu_tol_for(t), what, std::sqrt(double(n)) * scale);
          CHECK_MESSAGE(y1.item() == y2.item(), what, ": two runs differ");
        }
      }
    }
  }
}

// By hand: exact casts between storage dtypes, no gradient.
TEST_CASE("cast launcher matches the host conversion exactly") {
  if (!have_gpu("cast launcher matches the host conversion exactly")) return;
  for (int64_t n : kSizes) {
    const Tensor v64 = mul(rnd({n}, 31 + n), 10.0);
    for (DType from : kFloatTypes) {
      for (DType to : kFloatTypes) {
        const Tensor src = v64.to(from).to(gpu());
        Tensor dst = poisoned({n}, to);
        cuda::cast(from, to, n, src.raw_data(), dst.raw_data(), stream());
        const Tensor want = v64.to(from).to(to);  // host conversion, round-to-nearest-even
        check_on_gpu(dst, want, kExact, std::string("cast ") + dtype_name(from) + "->" + dtype_name(to) +
                                              " n=" + std::to_string(n));
        // Tensor::to(DType) on the GPU goes through the same kernel.
        check_on_gpu(src.to(to), want, kExact, std::string("Tensor::to ") + dtype_name(from) + "->" +
                                                     dtype_name(to) + " n=" + std::to_string(n));
      }
    }
    Generator g(41 + n);
    const Tensor bytes = randint({n}, g, 0, 256).to(DType::u8);
    Tensor dst = poisoned({n}, DType::f32);
    const Tensor gbytes = bytes.to(gpu());
    cuda::cast(DType::u8, DType::f32, n, gbytes.raw_data(), dst.raw_data(), stream());
    check_on_gpu(dst, bytes.to(DType::f32), kExact, "cast u8->f32 n=" + std::to_string(n));
  }
}

// ---- ops through autograd: CUDA vs CPU ---------------------------------------------------

// One row per op through autograd: every entry of the op table has one (checked below, so an
// op added to kernels/elementwise_ops.h without a row fails here), plus the scalar forms,
// the reductions and compositions.
struct OpRow {
  const char* name;
  int inputs;
  bool positive;  // inputs must be > 0 (sqrt, log, a fractional power, a divisor)
  OpFn f;
  bool sums = false;          // the output sums every input element (tolerance times sqrt(n))
  double half_widen = 1.0;    // bf16/f16 tolerance scale; a row that widens it says why
};

// sigmoid and tanh: their backward reads the saved output y, stored in the dtype: y(1 - y)
// and 1 - y^2 near |y| = 1 lose the digits y was rounded by (half an ulp: 2^-12 in f16, 2^-9
// in bf16), up to 2 * 2^-9 * |dy| absolute in bf16 (PyTorch's backward reads the same
// rounded output). Twice the dtype's tolerance covers |dy| up to 5.
constexpr double kSavedOutputWiden = 2.0;

const std::vector<OpRow>& op_rows() {
  static const std::vector<OpRow> rows = {
      {"add", 2, false, [](const std::vector<Tensor>& x) { return add(x[0], x[1]); }},
      {"sub", 2, false, [](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }},
      {"mul", 2, false, [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }},
      {"mul scalar", 1, false, [](const std::vector<Tensor>& x) { return mul(x[0], 1.75); }},
      {"add scalar", 1, false, [](const std::vector<Tensor>& x) { return add(x[0], -0.375); }},
      {"relu", 1, false, [](const std::vector<Tensor>& x) { return relu(x[0]); }},
      {"add_relu", 2, false, [](const std::vector<Tensor>& x) { return add_relu(x[0], x[1]); }},
      {"square", 1, false, [](const std::vector<Tensor>& x) { return square(x[0]); }},
      {"sqrt", 1, true, [](const std::vector<Tensor>& x) { return sqrt(x[0]); }},
      {"exp", 1, false, [](const std::vector<Tensor>& x) { return exp(x[0]); }},
      {"log", 1, true, [](const std::vector<Tensor>& x) { return log(x[0]); }},
      {"sigmoid", 1, false, [](const std::vector<Tensor>& x) { return sigmoid(x[0]); }, false, kSavedOutputWiden},
      {"tanh", 1, false, [](const std::vector<Tensor>& x) { return tanh(x[0]); }, false, kSavedOutputWiden},
      {"neg", 1, false, [](const std::vector<Tensor>& x) { return neg(x[0]); }},
      {"silu", 1, false, [](const std::vector<Tensor>& x) { return silu(x[0]); }},
      {"pow 3", 1, false, [](const std::vector<Tensor>& x) { return pow(x[0], 3.0); }},
      {"pow 2.5", 1, true, [](const std::vector<Tensor>& x) { return pow(x[0], 2.5); }},
      {"div", 2, true, [](const std::vector<Tensor>& x) { return div(x[0], x[1]); }},
      {"sum", 1, false, [](const std::vector<Tensor>& x) { return sum(x[0]); }, true},
      {"mean", 1, false, [](const std::vector<Tensor>& x) { return mean(x[0]); }},
      // x used twice: its gradient is accumulated with add_ on the device. (Compositions
      // whose intermediate results cancel, like x*y + x, are avoided: bf16/f16 round each
      // intermediate, an error relative to it rather than to the result.)
      {"x*x", 1, false, [](const std::vector<Tensor>& x) { return mul(x[0], x[0]); }},
      {"relu(x) + x", 1, false, [](const std::vector<Tensor>& x) { return add(relu(x[0]), x[0]); }},
  };
  return rows;
}

bool has_row(const std::string& op) {
  for (const OpRow& r : op_rows())
    if (r.name == op || std::string(r.name).rfind(op + " ", 0) == 0) return true;
  return false;
}

// The multi-tensor cast of mixed precision (cast_many): every floating pair, a list of odd
// sizes and one of several chunks, half assigning and half accumulating, bit for bit the
// per-tensor cast and, when accumulating, add_ of the converted tensor.
// By hand: one GPU path against another, bit for bit.
TEST_CASE("cast_many equals the per-tensor cast and add_ bit for bit") {
  if (!have_gpu("cast_many")) return;
  const std::vector<int64_t> sizes = {1, 7, 255, 256, 4097, 0, 33, cuda::kMtaChunk + 3, 64, 1000};
  for (DType from : kFloatTypes)
    for (DType to : kFloatTypes) {
      if (from == to) continue;
      std::vector<Tensor> src, dst, want;
      std::vector<cuda::CastTensor> list;
      for (size_t i = 0; i < sizes.size(); ++i) {
        const int64_t n = sizes[i];
        const Tensor v = rnd({n}, 500 + i);
        src.push_back(v.to(from).to(gpu()));
        const bool acc = i % 2 == 1;
        const Tensor before = rnd({n}, 900 + i).to(to).to(gpu());
        dst.push_back(acc ? before.clone() : poisoned({n}, to));
        want.push_back(acc ? add(before, src.back().to(to)) : src.back().to(to));
        list.push_back({src.back().raw_data(), dst.back().raw_data(), n, acc});
      }
      cuda::MultiTensorTable table;
      cuda::cast_many(from, to, list, table, stream());
      for (size_t i = 0; i < sizes.size(); ++i)
        check_on_gpu(dst[i], want[i], kExact, std::string("cast_many ") + dtype_name(from) + "->" + dtype_name(to) +
                                                  " tensor " + std::to_string(i));
    }
  cuda::MultiTensorTable table;
  CHECK_THROWS_WITH_AS(cuda::cast_many(DType::u8, DType::f32, {}, table, stream()),
                       doctest::Contains("u8 -> f32 has no CUDA kernel"), Error);
  // A same-dtype list is a copy: no kernel is compiled for it (Note [Kernel coverage]).
  CHECK_THROWS_WITH_AS(cuda::cast_many(DType::f32, DType::f32, {}, table, stream()),
                       doctest::Contains("the dtypes must differ"), Error);
}

TEST_CASE("every op of the table has a row (runs without a GPU)") {
  for (ew::Unary op : kAllUnary) CHECK_MESSAGE(has_row(ew::name(op)), "unary op ", ew::name(op), " has no row");
  for (ew::Binary op : kAllBinary) CHECK_MESSAGE(has_row(ew::name(op)), "binary op ", ew::name(op), " has no row");
}

struct ShapeCase {
  Shape shape;
  MemoryFormat fmt;
};

const std::vector<ShapeCase> kOpShapes = {
    {{1}, MemoryFormat::contiguous},           {{7}, MemoryFormat::contiguous},
    {{3, 5}, MemoryFormat::contiguous},        {{1, 3, 5, 7}, MemoryFormat::contiguous},
    {{1, 3, 5, 7}, MemoryFormat::channels_last}, {{2, 3, 4, 5}, MemoryFormat::contiguous},
    {{2, 3, 4, 5}, MemoryFormat::channels_last}, {{4, 16, 8, 8}, MemoryFormat::channels_last},
    {{2, 64, 9, 9}, MemoryFormat::contiguous},
};

MatchOptions row_options(const OpRow& r, MemoryFormat fmt, uint64_t seed) {
  MatchOptions o = MatchOptions().with_formats(std::vector<MemoryFormat>(size_t(r.inputs), fmt)).with_seed(seed);
  if (r.positive) o.positive();
  if (r.sums) o.with_forward_scale([](const Tensor&, const std::vector<Tensor>& in) {
    return std::sqrt(double(in[0].numel()));
  });
  return o;
}

TEST_CASE("ops forward and backward on CUDA match the CPU") {
  if (!have_gpu("ops forward and backward on CUDA match the CPU")) return;
  uint64_t seed = 100;
  for (const OpRow& r : op_rows()) {
    for (const ShapeCase& sc : kOpShapes) {
      const std::vector<Shape> shapes(size_t(r.inputs), sc.shape);
      MatchOptions o = row_options(r, sc.fmt, ++seed);
      check_matches_cpu(r.name, r.f, shapes, {DType::f32, DType::f64}, o);
      check_matches_cpu(r.name, r.f, shapes, {DType::bf16, DType::f16}, o.widened(r.half_widen));
    }
  }
}

// Seeded random shapes (odd and 1x1 spatial sizes, channels off the vector width, batch 1,
// both layouts), the second operand broadcast over some of the first's dims.
ShapeDraw draw_pair(std::mt19937_64& rng) {
  const auto pick = [&](std::initializer_list<int64_t> v) { return *(v.begin() + rng() % v.size()); };
  const Shape a = {pick({1, 2, 3}), pick({1, 3, 5, 8, 17}), pick({1, 2, 7, 9}), pick({1, 3, 8, 13})};
  Shape b = a;
  for (auto& d : b)
    if (rng() % 2) d = 1;
  const auto fmt = [&] { return rng() % 2 ? MemoryFormat::channels_last : MemoryFormat::contiguous; };
  return {{a, b}, {fmt(), fmt()}};
}

TEST_CASE("binary ops at seeded random shapes on CUDA match the CPU") {
  if (!have_gpu("binary ops at seeded random shapes on CUDA match the CPU")) return;
  const int cases = kEmulatedGpu ? 3 : 12;
  for (const OpRow& r : op_rows())
    if (r.inputs == 2 && !r.positive)
      check_matches_cpu_sweep(r.name, r.f, draw_pair, cases, 20261202, {DType::f32, DType::bf16});
}

// By hand: in-place ops (no autograd output), b converted from the other format.
TEST_CASE("in-place add_ and mul_ on CUDA match the CPU") {
  if (!have_gpu("in-place add_ and mul_ on CUDA match the CPU")) return;
  for (DType t : kFloatTypes) {
    for (const ShapeCase& sc : kOpShapes) {
      const Tensor a64 = rnd(sc.shape, 201), b64 = rnd(sc.shape, 202);
      Tensor ad = to_gpu(a64, t, sc.fmt), ar = to_ref(a64, t, sc.fmt);
      // b in the other format: add_ converts it.
      const MemoryFormat other = sc.fmt == MemoryFormat::contiguous ? MemoryFormat::channels_last : MemoryFormat::contiguous;
      add_(ad, to_gpu(b64, t, other), -0.625);
      add_(ar, to_ref(b64, t, other), -0.625);
      check_on_gpu(ad, ar, gpu_tol_for(t), label("add_", t, sc.shape, sc.fmt));
      mul_(ad, 1.5);
      mul_(ar, 1.5);
      check_on_gpu(ad, ar, gpu_tol_for(t), label("add_ then mul_", t, sc.shape, sc.fmt));
    }
  }
}

// Broadcast pairs: NHWC and NCHW images against per-channel and per-sample values, a
// scalar-like (1, 1, 1, 1), (N, C) + (C), both operands broadcast, and a channels_last
// operand against an NCHW one.
struct BroadcastCase {
  Shape a, b;
  MemoryFormat fa, fb;
};
const std::vector<BroadcastCase> kBroadcastCases = {
    {{4, 16, 8, 8}, {4, 16, 1, 1}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    {{4, 16, 8, 8}, {4, 16, 1, 1}, MemoryFormat::channels_last, MemoryFormat::contiguous},
    {{4, 16, 8, 8}, {1, 16, 1, 1}, MemoryFormat::channels_last, MemoryFormat::channels_last},
    {{2, 3, 5, 7}, {1, 1, 1, 1}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    {{2, 3, 5, 7}, {1, 3, 5, 7}, MemoryFormat::channels_last, MemoryFormat::contiguous},
    {{2, 3, 5, 7}, {2, 1, 5, 7}, MemoryFormat::channels_last, MemoryFormat::contiguous},
    {{1, 3, 1, 7}, {2, 1, 5, 1}, MemoryFormat::contiguous, MemoryFormat::channels_last},
    {{8, 100}, {100}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    {{100}, {8, 100}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    {{33, 1}, {1, 65}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    {{2, 64, 9, 9}, {64, 1, 1}, MemoryFormat::channels_last, MemoryFormat::contiguous},
    {{2, 64, 9, 9}, {}, MemoryFormat::contiguous, MemoryFormat::contiguous},
    // Sums of many terms per output (block kernel) and of few (thread kernel).
    {{32, 8, 32, 32}, {1, 8, 1, 1}, MemoryFormat::channels_last, MemoryFormat::contiguous},
    {{2, 8, 32, 32}, {1, 8, 32, 32}, MemoryFormat::contiguous, MemoryFormat::contiguous},
};

TEST_CASE("broadcasting binary ops on CUDA match the CPU, gradients summed to each operand") {
  if (!have_gpu("broadcasting binary ops on CUDA match the CPU, gradients summed to each operand")) return;
  const std::vector<std::pair<const char*, OpFn>> ops = {
      {"add", [](const std::vector<Tensor>& in) { return add(in[0], in[1]); }},
      {"sub", [](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }},
      {"mul", [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }},
      {"add_relu", [](const std::vector<Tensor>& in) { return add_relu(in[0], in[1]); }},
  };
  uint64_t seed = 300;
  for (const BroadcastCase& bc : kBroadcastCases) {
    for (const auto& [name, f] : ops)
      check_matches_cpu(name, f, {bc.a, bc.b}, {DType::f32, DType::f64, DType::bf16, DType::f16},
                        MatchOptions().with_formats({bc.fa, bc.fb}).with_seed(++seed));
    // div: positive operands (a divisor away from 0).
    const auto div_op = [](const std::vector<Tensor>& in) { return div(in[0], in[1]); };
    const MatchOptions div_opt = MatchOptions().with_formats({bc.fa, bc.fb}).with_seed(++seed).positive();
    check_matches_cpu("div", div_op, {bc.a, bc.b}, {DType::f32, DType::f64}, div_opt);
    // In bf16/f16 the divisor's gradient is a sum of terms -a g / b^2, each rounded to the
    // dtype before the sum (the full-size gradient is a bf16/f16 tensor, as in PyTorch's
    // backward), and with b >= 0.25 a term reaches 16 |a g| (about 4x on average): the
    // rounding errors of the sum are that many times a unit term's. First run under
    // --config=cuda-emu: 1-23 sums per shape just past gpu_tol_for(t).
    MatchOptions div_half = div_opt;
    div_half.tol_scale = 4.0;
    check_matches_cpu("div", div_op, {bc.a, bc.b}, {DType::bf16, DType::f16}, div_half);
  }
}

// Every op, dtype and wanted gradient of the broadcasting launchers against the CPU ones, a
// (3, 1, 5) op b (1, 4, 5) -> y (3, 4, 5), with 32-bit indices and with 64-bit ones: those
// only past 2^31 elements otherwise, taken here at a small size by WideIndexForTests. (The
// ops' backward asks only for the gradients it needs, e.g. add's none, sub's db alone: the
// other combinations run here only; Note [Kernel coverage] in cuda_emu/coverage.cc.)
// By hand: launchers with forced 64-bit indices against the CPU launchers.
TEST_CASE("broadcasting launchers with 32- and 64-bit indices match the CPU launchers") {
  if (!have_gpu("broadcasting launchers with 32- and 64-bit indices match the CPU launchers")) return;
  ew::BroadcastPlan plan;
  plan.nd = 3;
  const int64_t size[3] = {3, 4, 5}, sa[3] = {5, 0, 1}, sb[3] = {0, 5, 1};
  for (int d = 0; d < 3; ++d) {
    plan.size[d] = size[d];
    plan.stride[0][d] = sa[d];
    plan.stride[1][d] = sb[d];
  }
  const int64_t n = plan.numel();
  const cudaStream_t s = stream();
  for (const bool wide_index : {false, true}) {
    std::optional<cuda::WideIndexForTests> wide;
    if (wide_index) wide.emplace();
    for (DType t : kFloatTypes) {
      const Tensor a64 = rnd({15}, 71), b64 = rnd({20}, 72), pb64 = positive(rnd({20}, 73));
      const Tensor y64 = positive(rnd({n}, 74)), dy64 = rnd({n}, 75);
      const Placed a = place(a64, t, 0), b = place(b64, t, 0), pb = place(pb64, t, 0), y = place(y64, t, 0),
                   dy = place(dy64, t, 0);
      const Tensor ar = to_ref(a64, t), br = to_ref(b64, t), pbr = to_ref(pb64, t), yr = to_ref(y64, t),
                   dyr = to_ref(dy64, t);
      for (ew::Binary op : kAllBinary) {
        const bool div = op == ew::Binary::div;  // a divisor away from 0
        const Placed& bb = div ? pb : b;
        const Tensor& bbr = div ? pbr : br;
        const std::string what = label(std::string(ew::name(op)) + (wide_index ? " 64-bit" : " 32-bit"), t, {n});
        Placed out = poisoned_out(n, t, 0);
        cuda::binary_broadcast(op, t, plan, a.view.raw_data(), bb.view.raw_data(), out.view.raw_data(), s);
        Tensor want = Tensor::empty({n}, ref_dtype(t));
        with_ref_type(t, [&](auto z) {
          using R = decltype(z);
          cpu::binary_broadcast<R>(op, plan, ar.data<R>(), bbr.data<R>(), want.data<R>());
        });
        check_on_gpu(out.view, want, gpu_tol_for(t), what);
        for (int which = 0; which < 3; ++which) {  // da, db, both
          Placed da = poisoned_out(n, t, 0), db = poisoned_out(n, t, 0);
          cuda::binary_backward(op, t, plan, a.view.raw_data(), bb.view.raw_data(), y.view.raw_data(),
                                dy.view.raw_data(), which != 1 ? da.view.raw_data() : nullptr,
                                which != 0 ? db.view.raw_data() : nullptr, s);
          Tensor wa = Tensor::empty({n}, ref_dtype(t)), wb = Tensor::empty({n}, ref_dtype(t));
          with_ref_type(t, [&](auto z) {
            using R = decltype(z);
            cpu::binary_backward<R>(op, plan, ar.data<R>(), bbr.data<R>(), yr.data<R>(), dyr.data<R>(),
                                    which != 1 ? wa.data<R>() : nullptr, which != 0 ? wb.data<R>() : nullptr);
          });
          const std::string of = " (of " + std::to_string(which) + ")";
          if (which != 1) check_on_gpu(da.view, wa, gpu_tol_for(t), what + " da" + of);
          if (which != 0) check_on_gpu(db.view, wb, gpu_tol_for(t), what + " db" + of);
        }
      }
    }
  }
}

TEST_CASE("check_matches_cpu: a user's composed op in one line") {
  if (!have_gpu("check_matches_cpu: a user's composed op in one line")) return;
  // A gate composed of primitives: x * silu(s), s per (N, C).
  check_matches_cpu("x * silu(s)", [](const std::vector<Tensor>& in) { return mul(in[0], silu(in[1])); },
                    {{2, 8, 5, 5}, {2, 8, 1, 1}});
  check_matches_cpu("log(x) / x", [](const std::vector<Tensor>& in) { return div(log(in[0]), in[0]); }, {{3, 17}},
                    {DType::f32, DType::f64}, MatchOptions().positive());
}

// conv2d, global_avg_pool, linear and cross_entropy used to be checked here for throwing "has no
// CUDA kernel yet"; they have kernels now, and conv2d_cuda_test, pool_cuda_test, linear_cuda_test
// and cross_entropy_cuda_test check their values against the CPU.

// A table uploaded on one stream and used on another: that stream waits for the upload once
// (its first use, eagerly), so a CUDA graph captured there later makes no wait on the
// uncaptured upload, which CUDA refuses (cudaErrorStreamCaptureIsolation): a training step
// warmed up on one stream and captured on its own (train_step_bench --cuda-graphs).
TEST_CASE("a multi-tensor table uploaded on one stream can be captured on another after one use there") {
  if (!have_gpu("multi-tensor table across streams and a capture")) return;
  const int64_t n = 1000;
  const Tensor src = rnd({n}, 77).to(DType::f32).to(gpu());
  Tensor dst = poisoned({n}, DType::bf16);
  const std::vector<cuda::CastTensor> list = {{src.raw_data(), dst.raw_data(), n, false}};
  cuda::MultiTensorTable table;
  cuda::cast_many(DType::f32, DType::bf16, list, table, stream());  // uploaded on the current stream
  const Stream side = Stream::create(gpu());
  Event e(gpu());
  e.record(Stream::current(gpu()));
  e.block(side);
  const auto side_s = static_cast<cudaStream_t>(side.handle());
  cuda::cast_many(DType::f32, DType::bf16, list, table, side_s);  // eagerly: waits for the upload here
  CudaGraph g;
  g.capture(side, [&] { cuda::cast_many(DType::f32, DType::bf16, list, table, side_s); });
  Event back(gpu());  // the fill below comes after the side stream's eager write
  back.record(side);
  back.block(Stream::current(gpu()));
  dst.fill_(0.0);
  Event filled(gpu());
  filled.record(Stream::current(gpu()));
  filled.block(side);
  g.replay(side);
  side.synchronize();
  check_on_gpu(dst, src.to(DType::bf16), kExact, "cast_many replayed on the side stream");
  CHECK(table.uploads() == 1);
}

}  // namespace
}  // namespace rt
