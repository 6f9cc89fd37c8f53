// The Generator and the host random fills, written as the counter formulas the CUDA fills
// compute (kernels/cuda/random.cu): draw k after state s is mix(s + (k + 1) * kIncrement);
// randn takes draws 2i and 2i + 1 for element i, rand_uniform and randint draw i; the
// affine map is one fma; channels_last stores logical element i at its NHWC offset. If
// these hold on the host, a kernel that evaluates them per element reproduces the host loop
// (tests/cuda/random_cuda_test.cc checks the kernels themselves on a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"

namespace rt {
namespace {

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t draw_at(uint64_t s, uint64_t k) { return mix(s + (k + 1) * Generator::kIncrement); }
double uniform_at(uint64_t s, uint64_t k) { return double(draw_at(s, k) >> 11) * 0x1.0p-53; }
double normal_at(uint64_t s, uint64_t k) {
  const double u1 = 1.0 - uniform_at(s, k), u2 = uniform_at(s, k + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// NHWC offset of logical (row-major NCHW) index i.
int64_t nhwc_offset(int64_t i, const Shape& s) {
  const int64_t C = s[1], H = s[2], W = s[3];
  const int64_t w = i % W, h = i / W % H, c = i / (W * H) % C, n = i / (W * H * C);
  return ((n * H + h) * W + w) * C + c;
}

TEST_CASE("Generator: draw k is mix(state + (k + 1) * increment); skip(n) equals n draws") {
  for (uint64_t seed : {uint64_t{0}, uint64_t{0x5eed}, ~uint64_t{0} - 5}) {  // the last one wraps
    Generator g(seed);
    for (uint64_t k = 0; k < 100; ++k) REQUIRE(g.next_u64() == draw_at(seed, k));
    Generator a(seed), b(seed);
    for (int k = 0; k < 37; ++k) a.next_u64();
    b.skip(37);
    CHECK(a.state() == b.state());
    CHECK(a.next_u64() == b.next_u64());
  }
}

TEST_CASE("randn and rand_uniform: element i is fma of the counter draws, in every dtype and format") {
  const double mean = 0.5, stddev = 2.0, lo = -0.3, hi = 1.7;
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{3, 5, 7, 9}}) {
    const int64_t n = shape_numel(s);
    for (MemoryFormat f : {kNCHW, kNHWC}) {
      if (f == kNHWC && s.size() != 4) continue;
      for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
        Generator g(42);
        const uint64_t s0 = g.state();
        const Tensor x = randn(s, g, t, Device::cpu(), f, mean, stddev);
        CHECK(g.state() == s0 + 2 * uint64_t(n) * Generator::kIncrement);
        const uint64_t s1 = g.state();
        const Tensor u = rand_uniform(s, g, lo, hi, t, Device::cpu(), f);
        CHECK(g.state() == s1 + uint64_t(n) * Generator::kIncrement);
        REQUIRE(x.format() == f);
        REQUIRE(u.format() == f);
        // Expected values rounded like the fills: double -> f32 -> dtype (f64 stays).
        std::vector<double> wx(static_cast<size_t>(n)), wu(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const double vx = std::fma(stddev, normal_at(s0, 2 * uint64_t(i)), mean);
          const double vu = std::fma(hi - lo, uniform_at(s1, uint64_t(i)), lo);
          wx[size_t(i)] = t == DType::f64 ? vx : double(float(vx));
          wu[size_t(i)] = t == DType::f64 ? vu : double(float(vu));
        }
        const Tensor ex = Tensor::from_vector(wx, s).to(t), eu = Tensor::from_vector(wu, s).to(t);
        CHECK_MESSAGE(x.to_vector<double>() == ex.to_vector<double>(), "randn ", dtype_name(t), shape_str(s));
        CHECK_MESSAGE(u.to_vector<double>() == eu.to_vector<double>(), "rand_uniform ", dtype_name(t), shape_str(s));
        if (f == kNHWC && t == DType::f64) {  // logical element i sits at its NHWC offset
          const double* p = x.data<double>();
          for (int64_t i = 0; i < n; ++i) REQUIRE(p[nhwc_offset(i, s)] == wx[size_t(i)]);
        }
      }
    }
  }
}

TEST_CASE("randint: lo + draw % (hi - lo), one draw per element, any int64 range") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 10}, {-5, 1000003}, {kMin, kMax}, {kMin, 0}, {7, 8}};
  for (const auto& [lo, hi] : ranges) {
    Generator g(9);
    const Tensor r = randint({3, 5, 7}, g, lo, hi);
    CHECK(r.dtype() == DType::i64);
    CHECK(g.state() == 9 + 105 * Generator::kIncrement);
    const std::vector<int64_t> v = r.to_vector<int64_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      const uint64_t range = uint64_t(hi) - uint64_t(lo);
      REQUIRE(v[i] == int64_t(uint64_t(lo) + draw_at(9, i) % range));
      REQUIRE((v[i] >= lo && v[i] < hi));
    }
  }
  Generator g(1);
  CHECK_THROWS_AS(randint({2}, g, 5, 5), Error);
  CHECK(g.state() == 1);  // the range is checked before drawing
  CHECK(randint({0}, g, 5, 5).numel() == 0);  // no draws, no check (the CUDA path agrees)
}

}  // namespace
}  // namespace rt
