// GPU-vs-CPU tests of the elementwise, reduction and cast kernels: first each launcher on
// NaN-poisoned outputs (aligned and misaligned pointers, odd sizes), then every op through
// autograd on CUDA against the same op on the CPU. Without a GPU every GPU test prints a
// SKIPPED line and passes; the host-side checks (argument validation) still run.
#include <cmath>
#include <functional>
#include <limits>

#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/cast.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/reduce.cuh"
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

// Sizes around the vector widths (2, 4, 8 elements a pack), odd ones, and one past 65535
// blocks of 256 threads so the grid-stride loop wraps.
const std::vector<int64_t> kSizes = {1, 3, 7, 8, 13, 64, 1000, 4099, 65536 + 3, (1 << 20) + 8};
// Odd, so the scalar path; one grid (65535 blocks x 256 threads) short of covering it.
constexpr int64_t kHuge = 65535LL * 256 + 5;

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

TEST_CASE("launchers reject bad arguments on the host (runs without a GPU)") {
  CHECK_THROWS_WITH_AS(cuda::binary(cuda::Binary::add, DType::i32, 4, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("CUDA backend computes in f32, f64, bf16 or f16"), Error);
  CHECK_THROWS_WITH_AS(cuda::unary(cuda::Unary::relu, DType::f32, -1, nullptr, nullptr, nullptr),
                       doctest::Contains("negative element count"), Error);
  CHECK_THROWS_WITH_AS(cuda::axpy(DType::f32, 8, 1.0, nullptr, nullptr, nullptr), doctest::Contains("null pointer"),
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

TEST_CASE("elementwise launchers write every element, aligned and misaligned") {
  if (!have_gpu("elementwise launchers write every element, aligned and misaligned")) return;
  for (DType t : kFloatTypes) {
    std::vector<int64_t> sizes = kSizes;
    if (t == DType::f32) sizes.push_back(kHuge);
    for (int64_t n : sizes) {
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
          check_close(y.view, want, tol_for(t), what);
          check_untouched(y, off, what);
        };
        const cudaStream_t s = stream();
        for (auto [op, cop, name] : {std::tuple{cpu::Binary::add, cuda::Binary::add, "add"},
                                     std::tuple{cpu::Binary::sub, cuda::Binary::sub, "sub"},
                                     std::tuple{cpu::Binary::mul, cuda::Binary::mul, "mul"},
                                     std::tuple{cpu::Binary::add_relu, cuda::Binary::add_relu, "add_relu"}}) {
          run(name, [&](void* y) { cuda::binary(cop, t, n, a.view.raw_data(), b.view.raw_data(), y, s); },
              [&](auto z, Tensor& w) {
                using R = decltype(z);
                cpu::binary<R>(op, n, ar.data<R>(), br.data<R>(), w.data<R>());
              });
        }
        for (auto [op, cop, name] : {std::tuple{cpu::Unary::relu, cuda::Unary::relu, "relu"},
                                     std::tuple{cpu::Unary::square, cuda::Unary::square, "square"},
                                     std::tuple{cpu::Unary::sqrt, cuda::Unary::sqrt, "sqrt"}}) {
          const Placed& x = op == cpu::Unary::sqrt ? p : a;
          const Tensor& xr = op == cpu::Unary::sqrt ? pr : ar;
          run(name, [&](void* y) { cuda::unary(cop, t, n, x.view.raw_data(), y, s); },
              [&](auto z, Tensor& w) {
                using R = decltype(z);
                cpu::unary<R>(op, n, xr.data<R>(), w.data<R>());
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

TEST_CASE("sum launcher: every dtype and size, deterministic") {
  if (!have_gpu("sum launcher: every dtype and size, deterministic")) return;
  for (DType t : kFloatTypes) {
    {  // n == 0: the sum of nothing is 0 (both kernels still run, x is never read).
      Tensor partials = poisoned({cuda::kSumBlocks}, DType::f64), y = poisoned({}, t);
      cuda::sum(t, 0, nullptr, 1.0, y.raw_data(), partials.raw_data(), stream());
      CHECK_MESSAGE(y.item() == 0.0, label("sum", t, {0}));
    }
    std::vector<int64_t> sizes = kSizes;
    if (t == DType::f32) sizes.push_back(kHuge);
    for (int64_t n : sizes) {
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
          check_close({y1.item()}, {want}, tol_for(t), what, std::sqrt(double(n)) * scale);
          CHECK_MESSAGE(y1.item() == y2.item(), what, ": two runs differ");
        }
      }
    }
  }
}

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
        check_close(dst, want, Tol{0, 0}, std::string("cast ") + dtype_name(from) + "->" + dtype_name(to) +
                                              " n=" + std::to_string(n));
        // Tensor::to(DType) on the GPU goes through the same kernel.
        check_close(src.to(to), want, Tol{0, 0}, std::string("Tensor::to ") + dtype_name(from) + "->" +
                                                     dtype_name(to) + " n=" + std::to_string(n));
      }
    }
    Generator g(41 + n);
    const Tensor bytes = randint({n}, g, 0, 256).to(DType::u8);
    Tensor dst = poisoned({n}, DType::f32);
    const Tensor gbytes = bytes.to(gpu());
    cuda::cast(DType::u8, DType::f32, n, gbytes.raw_data(), dst.raw_data(), stream());
    check_close(dst, bytes.to(DType::f32), Tol{0, 0}, "cast u8->f32 n=" + std::to_string(n));
  }
}

// ---- ops through autograd: CUDA vs CPU ---------------------------------------------------

struct OpCase {
  const char* name;
  int inputs;
  bool positive;  // inputs must be > 0 (sqrt)
  std::function<Tensor(const std::vector<Tensor>&)> f;
  bool reduces;   // output is a sum over all inputs (tolerance scaled)
};

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {"add", 2, false, [](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, false},
      {"sub", 2, false, [](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, false},
      {"mul", 2, false, [](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, false},
      {"mul scalar", 1, false, [](const std::vector<Tensor>& x) { return mul(x[0], 1.75); }, false},
      {"add scalar", 1, false, [](const std::vector<Tensor>& x) { return add(x[0], -0.375); }, false},
      {"relu", 1, false, [](const std::vector<Tensor>& x) { return relu(x[0]); }, false},
      {"add_relu", 2, false, [](const std::vector<Tensor>& x) { return add_relu(x[0], x[1]); }, false},
      {"square", 1, false, [](const std::vector<Tensor>& x) { return square(x[0]); }, false},
      {"sqrt", 1, true, [](const std::vector<Tensor>& x) { return sqrt(x[0]); }, false},
      {"sum", 1, false, [](const std::vector<Tensor>& x) { return sum(x[0]); }, true},
      {"mean", 1, false, [](const std::vector<Tensor>& x) { return mean(x[0]); }, true},
      // x used twice: its gradient is accumulated with add_ on the device. (Compositions
      // whose intermediate results cancel, like x*y + x, are avoided: bf16/f16 round each
      // intermediate, an error relative to it rather than to the result.)
      {"x*x", 1, false, [](const std::vector<Tensor>& x) { return mul(x[0], x[0]); }, false},
      {"relu(x) + x", 1, false, [](const std::vector<Tensor>& x) { return add(relu(x[0]), x[0]); }, false},
  };
  return cases;
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

TEST_CASE("ops forward and backward on CUDA match the CPU") {
  if (!have_gpu("ops forward and backward on CUDA match the CPU")) return;
  uint64_t seed = 100;
  for (const OpCase& op : op_cases()) {
    for (DType t : kFloatTypes) {
      for (const ShapeCase& sc : kOpShapes) {
        const std::string what = label(op.name, t, sc.shape, sc.fmt);
        std::vector<Tensor> dev, ref;
        for (int i = 0; i < op.inputs; ++i) {
          Tensor v = rnd(sc.shape, ++seed);
          if (op.positive) v = positive(v);
          dev.push_back(to_gpu(v, t, sc.fmt).set_requires_grad(true));
          ref.push_back(to_ref(v, t, sc.fmt).set_requires_grad(true));
        }
        poison_allocator(shape_numel(sc.shape));
        const Tensor yd = op.f(dev), yr = op.f(ref);
        const double scale = op.reduces ? std::sqrt(double(shape_numel(sc.shape))) : 1.0;
        check_close(yd, yr, tol_for(t), what + " forward", op.name == std::string("mean") ? 1.0 : scale);
        const Tensor seed64 = rnd(yr.shape(), ++seed);
        poison_allocator(shape_numel(sc.shape));
        yd.backward(to_gpu(seed64, t, yd.format()));
        yr.backward(to_ref(seed64, t, yr.format()));
        for (int i = 0; i < op.inputs; ++i)
          check_close(dev[size_t(i)].grad(), ref[size_t(i)].grad(), tol_for(t),
                      what + " grad " + std::to_string(i));
      }
    }
  }
}

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
      check_close(ad, ar, tol_for(t), label("add_", t, sc.shape, sc.fmt));
      mul_(ad, 1.5);
      mul_(ar, 1.5);
      check_close(ad, ar, tol_for(t), label("add_ then mul_", t, sc.shape, sc.fmt));
    }
  }
}

// conv2d, global_avg_pool, linear and cross_entropy used to be checked here for throwing "has no
// CUDA kernel yet"; they have kernels now, and conv2d_cuda_test, pool_cuda_test, linear_cuda_test
// and cross_entropy_cuda_test check their values against the CPU.

}  // namespace
}  // namespace rt
