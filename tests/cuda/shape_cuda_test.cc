// GPU-vs-CPU tests of the copying shape ops (permute, contiguous, narrow, split, concat)
// through the CUDA strided-copy kernel: exact values (bits only move) for every float dtype,
// i64 and u8 (the four element sizes), both formats, seeded random shapes; gradients through
// autograd. Without a GPU the GPU tests print SKIPPED lines; the launcher's host-side checks
// still run.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "kernels/cuda/strided_copy.h"
#include "tests/cuda/cuda_test_util.h"

namespace rt {
namespace {

using namespace cuda_test;

constexpr MemoryFormat kNCHW = MemoryFormat::contiguous, kNHWC = MemoryFormat::channels_last;

TEST_CASE("strided_copy launcher: host-side checks (runs without a GPU)") {
  const int64_t size[9] = {2, 2, 2, 2, 2, 2, 2, 2, 2}, st[9] = {};
  CHECK_THROWS_WITH_AS(cuda::strided_copy(4, 9, size, st, st, nullptr, nullptr, nullptr),
                       doctest::Contains("at most 8"), Error);
  int64_t buf[2] = {};
  CHECK_THROWS_WITH_AS(cuda::strided_copy(3, 1, size, st, st, buf, buf, nullptr),
                       doctest::Contains("element size 3"), Error);
  CHECK_THROWS_WITH_AS(cuda::strided_copy(4, 1, size, st, st, nullptr, nullptr, nullptr),
                       doctest::Contains("null pointer"), Error);
  const int64_t zero[1] = {0};
  cuda::strided_copy(4, 1, zero, st, st, nullptr, nullptr, nullptr);  // nothing to copy: no launch
}

// One drawn case of the shape ops: x of rank 1 to 5 (sizes 1, 2, 3, 5, 7 and 33), NHWC for
// half the 4-D ones, a permutation of its dims, a dim and a split point in [0, len] (an empty
// piece too).
struct ShapeCase {
  Shape s;
  MemoryFormat f;
  std::vector<int> order;
  int d;
  int64_t cut;
};
ShapeCase draw_case(std::mt19937_64& rng) {
  const int64_t sizes[] = {1, 2, 3, 5, 7, 33};
  Generator g(rng());
  ShapeCase c;
  const int n = int(g.randint(1, 6));
  for (int d = 0; d < n; ++d) c.s.push_back(sizes[g.randint(0, 6)]);
  c.f = n == 4 && g.randint(0, 2) == 1 ? kNHWC : kNCHW;
  c.order.resize(size_t(n));
  std::iota(c.order.begin(), c.order.end(), 0);
  for (int k = n - 1; k > 0; --k) std::swap(c.order[size_t(k)], c.order[size_t(g.randint(0, k + 1))]);
  c.d = int(g.randint(0, n));
  c.cut = g.randint(0, c.s[size_t(c.d)] + 1);
  return c;
}

// A sweep's draw for one shape op: every op's sweep has the same seed, so the same cases.
using CaseOp = std::function<Tensor(const ShapeCase&, const Tensor&)>;
std::function<ShapeDraw(std::mt19937_64&)> drawing(CaseOp op) {
  return [op](std::mt19937_64& rng) {
    const ShapeCase c = draw_case(rng);
    return ShapeDraw{{c.s}, {c.f}, [op, c](const std::vector<Tensor>& in) { return op(c, in[0]); }};
  };
}
std::vector<Tensor> pieces(const ShapeCase& c, const Tensor& x) {
  return split(x, {c.cut, c.s[size_t(c.d)] - c.cut}, c.d);
}

// i64 and u8 besides the float dtypes: the four element sizes of the strided copy.
const std::vector<DType> kTypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::u8};
constexpr int kCases = 40;
constexpr uint64_t kSeed = 61;

// Bits only move: every result and gradient exactly the CPU's, in every dtype (integers:
// forward only), with the result's format.
TEST_CASE("permute, split and contiguous on CUDA equal the CPU exactly (every dtype, both formats)") {
  const MatchOptions exact = MatchOptions().exact();
  check_matches_cpu_sweep("permute", nullptr,
                          drawing([](const ShapeCase& c, const Tensor& x) { return permute(x, c.order); }), kCases,
                          kSeed, kTypes, exact);
  for (int p : {0, 1})
    check_matches_cpu_sweep("split piece " + std::to_string(p), nullptr,
                            drawing([p](const ShapeCase& c, const Tensor& x) { return pieces(c, x)[size_t(p)]; }),
                            kCases, kSeed, kTypes, exact);
  check_matches_cpu_sweep("contiguous", nullptr,
                          drawing([](const ShapeCase&, const Tensor& x) { return contiguous(x); }), kCases, kSeed,
                          kTypes, exact);
}

// x beside its own pieces: x's gradient adds the pieces' to its own, one rounding per add in
// the dtype (a 16-bit sum differs from the CPU's f32 one), so the gradient is checked within
// gpu_tol_for and the output exactly.
TEST_CASE("concat of a tensor and its split pieces on CUDA equals the CPU exactly (every dtype, both formats)") {
  check_matches_cpu_sweep("concat", nullptr, drawing([](const ShapeCase& c, const Tensor& x) {
                            const std::vector<Tensor> p = pieces(c, x);
                            return concat({p[1], x, p[0]}, c.d);
                          }),
                          kCases, kSeed, kTypes, MatchOptions().exact_forward());
}

}  // namespace
}  // namespace rt
