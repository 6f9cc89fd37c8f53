// The host half of the multi-tensor apply (kernels/cuda/multi_tensor_plan.h), checked on the
// CPU: the plan driven the way multi_tensor_kernel drives it (every block of every launch,
// chunks strided by the grid, each thread's elements of its chunk). No GPU needed.
//   - every element of every tensor is visited exactly once, by a block of one launch;
//   - launches are consecutive chunk ranges covering all chunks, each with at most
//     kMtaMaxGroups scalar sets, and a row's local set names its own id;
//   - empty tensors get no chunk; set ids follow first appearance; bad input is refused.
// Lists are drawn from a seeded generator: sizes 0, 1, around a chunk's multiples and large,
// few or many distinct scalar sets.
#include "kernels/cuda/multi_tensor_plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"

namespace rt::cuda {
namespace {

// Runs the kernel's walk over `rows` with `grid` blocks per launch: visits[t][i] counts the
// visits of element i of tensor t.
std::vector<std::vector<int>> walk(const std::vector<MtaRow>& rows, const std::vector<int32_t>& chunk_tensor,
                                   const std::vector<MtaRange>& ranges, int grid, int threads) {
  std::vector<std::vector<int>> visits(rows.size());
  for (size_t t = 0; t < rows.size(); ++t) visits[t].assign(size_t(rows[t].n), 0);
  for (const MtaRange& r : ranges)
    for (int b = 0; b < grid; ++b)
      for (int64_t c = r.chunk_begin + b; c < r.chunk_end; c += grid) {
        const MtaRow& row = rows[size_t(chunk_tensor[size_t(c)])];
        const int64_t begin = (c - row.first_chunk) * kMtaChunk, end = std::min(row.n, begin + kMtaChunk);
        REQUIRE(begin >= 0);
        REQUIRE(begin < end);  // no block gets an empty chunk
        for (int th = 0; th < threads; ++th)
          for (int64_t i = begin + th; i < end; i += threads) ++visits[size_t(row.index)][size_t(i)];
      }
  return visits;
}

void check_plan(const std::vector<int64_t>& sizes, const std::vector<int>& ids, const std::string& what) {
  CAPTURE(what);
  std::vector<MtaRow> rows(sizes.size(), MtaRow{});
  for (size_t i = 0; i < sizes.size(); ++i) rows[i].n = sizes[i];
  std::vector<int32_t> chunk_tensor;
  std::vector<MtaRange> ranges;
  plan_multi_tensor(rows, ids, chunk_tensor, ranges);

  int64_t expect_chunks = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].index == int32_t(i));
    CHECK(rows[i].first_chunk == expect_chunks);
    expect_chunks += mta_chunks(sizes[i]);
  }
  REQUIRE(int64_t(chunk_tensor.size()) == expect_chunks);
  for (size_t c = 0; c < chunk_tensor.size(); ++c) {
    const MtaRow& row = rows[size_t(chunk_tensor[c])];
    CHECK(int64_t(c) >= row.first_chunk);
    CHECK(int64_t(c) < row.first_chunk + mta_chunks(row.n));
  }

  // Ranges: consecutive, covering, at most kMtaMaxGroups sets, rows naming their own set.
  int64_t next = 0, elements = 0;
  for (const MtaRange& r : ranges) {
    elements += r.elements;
    CHECK(r.chunk_begin == next);
    CHECK(r.chunk_end > r.chunk_begin);
    CHECK(r.groups.size() >= 1);
    CHECK(r.groups.size() <= size_t(kMtaMaxGroups));
    for (int64_t c = r.chunk_begin; c < r.chunk_end; ++c) {
      const MtaRow& row = rows[size_t(chunk_tensor[size_t(c)])];
      REQUIRE(row.group >= 0);
      REQUIRE(size_t(row.group) < r.groups.size());
      CHECK(r.groups[size_t(row.group)] == ids[size_t(row.index)]);
    }
    next = r.chunk_end;
  }
  CHECK(next == expect_chunks);
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  CHECK(elements == total);
  // As few launches as the sets allow: each launch but the last was full when it was cut.
  for (size_t k = 0; k + 1 < ranges.size(); ++k) CHECK(ranges[k].groups.size() == size_t(kMtaMaxGroups));

  for (int grid : {1, 3, kMtaMaxBlocks}) {
    const std::vector<std::vector<int>> visits = walk(rows, chunk_tensor, ranges, grid, 256);
    for (size_t t = 0; t < visits.size(); ++t) {
      const auto [lo, hi] = std::minmax_element(visits[t].begin(), visits[t].end());
      if (lo == visits[t].end()) continue;
      CHECK_MESSAGE(*lo == 1, "tensor ", t, " of ", sizes[t], " elements: an element visited ", *lo, " times");
      CHECK_MESSAGE(*hi == 1, "tensor ", t, " of ", sizes[t], " elements: an element visited ", *hi, " times");
    }
  }
}

TEST_CASE("multi-tensor plan: every element once, launches by scalar sets, seeded random lists") {
  std::mt19937_64 rng(20261204);
  const int64_t special[] = {0, 1, 255, 256, kMtaChunk - 1, kMtaChunk, kMtaChunk + 1, 3 * kMtaChunk + 17};
  for (int trial = 0; trial < 40; ++trial) {
    const int count = int(rng() % 40) + 1;
    const int sets = trial % 4 == 0 ? 1 : int(rng() % 20) + 1;  // beyond kMtaMaxGroups in many trials
    std::vector<int64_t> sizes;
    std::vector<int> ids;
    for (int i = 0; i < count; ++i) {
      sizes.push_back(rng() % 3 == 0 ? special[rng() % 8] : int64_t(rng() % 5000));
      ids.push_back(int(rng() % uint64_t(sets)) * 7);  // any ints name sets
    }
    check_plan(sizes, ids, "trial " + std::to_string(trial));
  }
}

TEST_CASE("multi-tensor plan: one launch for a ResNet50-like list with two scalar sets") {
  std::vector<int64_t> sizes;
  std::vector<int> ids;
  for (int i = 0; i < 161; ++i) {  // conv weights and batch-norm vectors, wd and no wd
    sizes.push_back(i % 3 == 0 ? 64 * 64 * 9 : 256);
    ids.push_back(i % 3 == 0 ? 0 : 1);
  }
  std::vector<MtaRow> rows(sizes.size(), MtaRow{});
  for (size_t i = 0; i < sizes.size(); ++i) rows[i].n = sizes[i];
  std::vector<int32_t> chunk_tensor;
  std::vector<MtaRange> ranges;
  plan_multi_tensor(rows, ids, chunk_tensor, ranges);
  CHECK(ranges.size() == 1);
  check_plan(sizes, ids, "resnet-like");
}

TEST_CASE("multi-tensor plan: empty lists and empty tensors need no launch") {
  check_plan({}, {}, "empty list");
  check_plan({0, 0, 0}, {0, 1, 2}, "empty tensors");
  std::vector<MtaRow> rows(2, MtaRow{});
  std::vector<int32_t> chunk_tensor;
  std::vector<MtaRange> ranges;
  plan_multi_tensor(rows, {0, 0}, chunk_tensor, ranges);
  CHECK(ranges.empty());
  CHECK(chunk_tensor.empty());
  // Empty tensors take no scalar set: nine sets of which one is on an empty tensor fit one launch.
  std::vector<int64_t> sizes;
  std::vector<int> ids;
  for (int i = 0; i < 9; ++i) {
    sizes.push_back(i == 4 ? 0 : 10);
    ids.push_back(i);
  }
  std::vector<MtaRow> r9(9, MtaRow{});
  for (size_t i = 0; i < 9; ++i) r9[i].n = sizes[i];
  plan_multi_tensor(r9, ids, chunk_tensor, ranges);
  CHECK(ranges.size() == 1);
}

TEST_CASE("multi-tensor plan: negative sizes and mismatched ids are refused") {
  std::vector<MtaRow> rows(2, MtaRow{});
  rows[1].n = -1;
  std::vector<int32_t> chunk_tensor;
  std::vector<MtaRange> ranges;
  CHECK_THROWS_WITH_AS(plan_multi_tensor(rows, {0, 0}, chunk_tensor, ranges),
                       doctest::Contains("tensor 1 has a negative size -1"), Error);
  rows[1].n = 3;
  CHECK_THROWS_WITH_AS(plan_multi_tensor(rows, {0}, chunk_tensor, ranges), doctest::Contains("2 tensors but 1"),
                       Error);
}

TEST_CASE("multi-tensor plan: set ids follow first appearance") {
  struct K {
    double a;
    int b;
    bool operator==(const K& o) const { return a == o.a && b == o.b; }
  };
  std::vector<K> distinct;
  const std::vector<int> ids = mta_set_ids(std::vector<K>{{0.5, 1}, {0.0, 1}, {0.5, 1}, {0.5, 0}, {0.0, 1}}, distinct);
  CHECK(ids == std::vector<int>{0, 1, 0, 2, 1});
  REQUIRE(distinct.size() == 3);
  CHECK(distinct[2].a == 0.5);
  CHECK(distinct[2].b == 0);
}

}  // namespace
}  // namespace rt::cuda
