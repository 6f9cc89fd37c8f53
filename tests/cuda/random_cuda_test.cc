// rt::randn / rand_uniform / randint on CUDA (kernels/cuda/random.cu) against the host loop
// run from an identical Generator: one element, odd sizes, 4-D in both memory formats and
// a million elements, in every floating dtype. Both paths must leave the Generators in the
// same state, so every later draw agrees too.
//
// The tolerances are rows of Note [Tolerances] in tests/test_util.h (random draws on two
// devices): rand_uniform and randint bit for bit (the same IEEE operations on both sides,
// Note [same values as the host] in kernels/cuda/random.cu); randn within kDeviateRelF64 of
// the deviate plus an ulp in f64, within an ulp in at most kInexactFraction of the elements in
// the other dtypes (CUDA's log and cos against glibc's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/random.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

struct Case {
  Shape shape;
  MemoryFormat format;
};
const std::vector<Case> kCases = {
    {{1}, kNCHW},          {{7}, kNCHW},           {{3, 5, 7}, kNCHW},        {{3, 5, 7, 9}, kNCHW},
    {{3, 5, 7, 9}, kNHWC}, {{1, 3, 1, 1}, kNHWC},  {{2, 33, 4, 65}, kNHWC},   {{1 << 20}, kNCHW},
    {{4, 64, 64, 64}, kNHWC},  // 1M elements, NHWC
};

using test::ulp_of;

// Compares in logical order; `tol(got, want)` is the allowed |got - want|. Reports the
// first failures, and returns how many elements are not identical (within tolerance or not).
template <typename Tol>
int64_t compare(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  REQUIRE_MESSAGE(got.device() == gpu(), what, ": result on ", got.device().str());
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", shape_str(got.shape()));
  CHECK_MESSAGE(got.dtype() == want.dtype(), what, ": dtype ", dtype_name(got.dtype()));
  CHECK_MESSAGE(got.format() == want.format(), what, ": format ", format_name(got.format()));
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  int64_t bad = 0, inexact = 0;
  std::ostringstream os;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i] == w[i]) continue;
    ++inexact;
    if (!(std::abs(g[i] - w[i]) <= tol(g[i], w[i]))) {  // NaN fails too
      if (bad < 8) os << "  [" << i << "] got " << g[i] << ", want " << w[i] << "\n";
      ++bad;
    }
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.size(), " elements out of tolerance\n", os.str());
  return inexact;
}

// The Generators after a GPU and a CPU fill: same state (`draws` past `seed`), same next draws.
void check_same_after(Generator& gpu_gen, Generator& cpu_gen, uint64_t seed, uint64_t draws, const std::string& what) {
  CHECK_MESSAGE(gpu_gen.state() == cpu_gen.state(), what, ": Generator states differ");
  CHECK_MESSAGE(gpu_gen.state() == seed + draws * Generator::kIncrement, what, ": not ", draws, " draws");
  CHECK_MESSAGE(gpu_gen.next_u64() == cpu_gen.next_u64(), what, ": next draw differs");
  CHECK_MESSAGE(randn({5}, gpu_gen).to_vector<double>() == randn({5}, cpu_gen).to_vector<double>(), what,
                ": next host randn differs");
}

// By hand: RNG streams against the host loop, and the generator's state.
TEST_CASE("randn on CUDA equals the host loop within its ulps and advances the Generator alike") {
  if (!have_gpu("randn")) return;
  for (const Case& c : kCases) {
    const uint64_t n = uint64_t(shape_numel(c.shape));
    for (DType t : kFloatTypes) {
      for (const std::pair<double, double>& ms : {std::pair{0.0, 1.0}, std::pair{0.5, 2.0}}) {
        const double mean = ms.first, stddev = ms.second;
        const std::string what = label("randn", t, c.shape, c.format) + " mean " + std::to_string(mean);
        const uint64_t seed = 1000 + n;
        Generator gg(seed), gc(seed);
        const Tensor got = randn(c.shape, gg, t, gpu(), c.format, mean, stddev);
        const Tensor want = randn(c.shape, gc, t, Device::cpu(), c.format, mean, stddev);
        const int64_t inexact =
            t == DType::f64
                ? compare(
                      got, want,
                      [&](double, double w) { return test::kDeviateRelF64 * std::abs(w - mean) + ulp_of(w, t); }, what)
                : compare(
                      got, want, [&](double g, double w) { return ulp_of(std::max(std::abs(g), std::abs(w)), t); },
                      what);
        if (t != DType::f64)
          CHECK_MESSAGE(double(inexact) <= test::kInexactFraction * double(n), what, ": ", inexact,
                        " elements 1 ulp off");
        if (inexact > 0) MESSAGE(what, ": ", inexact, " of ", n, " elements not bit-identical (within tolerance)");
        check_same_after(gg, gc, seed, 2 * n, what);
      }
    }
  }
}

// By hand: RNG streams against the host loop, bit for bit.
TEST_CASE("rand_uniform on CUDA equals the host loop bit for bit") {
  if (!have_gpu("rand_uniform")) return;
  for (const Case& c : kCases) {
    const uint64_t n = uint64_t(shape_numel(c.shape));
    for (DType t : kFloatTypes) {
      const std::string what = label("rand_uniform", t, c.shape, c.format);
      const uint64_t seed = 7 * n;
      Generator gg(seed), gc(seed);
      const Tensor got = rand_uniform(c.shape, gg, -0.3, 1.7, t, gpu(), c.format);
      const Tensor want = rand_uniform(c.shape, gc, -0.3, 1.7, t, Device::cpu(), c.format);
      CHECK_MESSAGE(compare(got, want, [](double, double) { return 0.0; }, what) == 0, what);
      check_same_after(gg, gc, seed, n, what);
    }
  }
}

// By hand: RNG streams against the host loop, exactly.
TEST_CASE("randint on CUDA equals the host loop, any int64 range") {
  if (!have_gpu("randint")) return;
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 10}, {-5, 1000003}, {kMin, kMax}, {7, 8}};
  for (const Shape& s : {Shape{1}, Shape{7}, Shape{3, 5, 7, 9}, Shape{1 << 20}}) {
    const uint64_t n = uint64_t(shape_numel(s));
    for (const auto& [lo, hi] : ranges) {
      const std::string what = "randint " + shape_str(s) + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
      Generator gg(n), gc(n);
      const Tensor got = randint(s, gg, lo, hi, gpu());
      const Tensor want = randint(s, gc, lo, hi);
      REQUIRE(got.device() == gpu());
      CHECK(got.dtype() == DType::i64);
      CHECK_MESSAGE(got.to_vector<int64_t>() == want.to_vector<int64_t>(), what);
      check_same_after(gg, gc, n, n, what);
    }
  }
  Generator g(3);
  CHECK_THROWS_WITH_AS(randint({4}, g, 5, 5, gpu()), doctest::Contains("empty range"), Error);
  CHECK(g.state() == 3);
}

TEST_CASE("empty tensors on CUDA draw nothing") {
  if (!have_gpu("random empty")) return;
  for (const Case& c : {Case{{0}, kNCHW}, Case{{2, 0, 3, 3}, kNHWC}}) {
    Generator g(11);
    CHECK(randn(c.shape, g, DType::f32, gpu(), c.format).numel() == 0);
    CHECK(rand_uniform(c.shape, g, 0, 1, DType::bf16, gpu(), c.format).numel() == 0);
    CHECK(randint(c.shape, g, 5, 5, gpu()).numel() == 0);  // no draws, no range check (as on the host)
    CHECK(g.state() == 11);
  }
}

// Host-side checks, before any CUDA call: they run (and must throw) without a GPU.
TEST_CASE("random launchers reject bad arguments before touching the device") {
  void* const y = reinterpret_cast<void*>(uintptr_t{64});
  const cuda::RandomLayout four{2, 3, 4, 5, true};
  CHECK_THROWS_WITH_AS(cuda::random_normal(1, four, 0, 1, DType::i32, y, nullptr),
                       doctest::Contains("f32, f64, bf16 or f16, got i32"), Error);
  CHECK_THROWS_WITH_AS(cuda::random_uniform(1, {2, -3, 4, 5, true}, 0, 1, DType::f32, y, nullptr),
                       doctest::Contains("negative extent"), Error);
  CHECK_THROWS_WITH_AS(cuda::random_uniform(1, four, 0, 1, DType::f32, nullptr, nullptr),
                       doctest::Contains("null output"), Error);
  CHECK_THROWS_WITH_AS(cuda::random_normal(1, four, 0, 1, DType::f64, reinterpret_cast<void*>(uintptr_t{68}), nullptr),
                       doctest::Contains("not aligned"), Error);
  auto* yi = reinterpret_cast<int64_t*>(uintptr_t{64});
  CHECK_THROWS_WITH_AS(cuda::random_int(1, 4, 5, 5, yi, nullptr), doctest::Contains("empty range [5, 5)"), Error);
  CHECK_THROWS_WITH_AS(cuda::random_int(1, -1, 0, 5, yi, nullptr), doctest::Contains("negative element count"),
                       Error);
  CHECK_THROWS_WITH_AS(cuda::random_int(1, 4, 0, 5, nullptr, nullptr), doctest::Contains("null output"), Error);
  // Nothing to write: returns before any launch (no device needed).
  CHECK_NOTHROW(cuda::random_normal(1, {0, 3, 4, 5, true}, 0, 1, DType::f16, nullptr, nullptr));
  CHECK_NOTHROW(cuda::random_int(1, 0, 0, 5, nullptr, nullptr));
}

}  // namespace
}  // namespace rt
