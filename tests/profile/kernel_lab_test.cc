// The kernel lab's step report (profile/kernel_lab.h) on records written by hand: rows per
// kernel and launch site, the extrapolation to the target batch and its linearity check
// (Note [Extrapolating the lab]), the bound and limiter on the H200 model, the summary, the
// table, the JSON and the SVG, and the errors for files that are not the lab's.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "base/error.h"
#include "cuda_emu/h200.h"
#include "engine/io/json.h"
#include "profile/kernel_lab.h"

namespace {

using rt::json::Value;
namespace lab = rt::prof::lab;
namespace h200 = rt::emu::h200;

// A kernel record as the emulator writes it (cuda_emu/perf.cc), with the counters that
// matter here.
Value kernel(const std::string& name, const std::string& site, int64_t launches, int64_t grid_x, int64_t threads,
             double dram, double flops, int64_t ld_sec, int64_t ld_ideal, int64_t regs = 32) {
  return rt::json::parse(R"({"kind": "kernel", "kernel": ")" + name + R"(", "site": ")" + site +
                         R"(", "launches": )" + std::to_string(launches) + R"(, "grid": [)" + std::to_string(grid_x) +
                         R"(, 1, 1], "block": [)" + std::to_string(threads) +
                         R"(, 1, 1], "dynamic_shared_bytes": 0, "global_load_requests": 10, "global_load_sectors": )" +
                         std::to_string(ld_sec) + R"(, "global_load_sectors_ideal": )" + std::to_string(ld_ideal) +
                         R"(, "global_store_requests": 0, "global_store_sectors": 0, "global_store_sectors_ideal": 0,
                             "shared_load_requests": 4, "shared_store_requests": 4, "shared_wavefronts": 12,
                             "shared_bank_conflicts": 4, "atomics": 0, "memory_instructions": 18,
                             "active_lanes_per_instruction": 32, "dram_bytes_lower_bound": )" +
                         std::to_string(dram) + R"(, "flops": )" + std::to_string(flops) +
                         R"(, "math": "f32", "registers_per_thread": )" + std::to_string(regs) +
                         R"(, "static_shared_bytes": 0})");
}

Value library(const std::string& name, double dram, double flops) {
  return rt::json::parse(R"({"kind": "library", "kernel": ")" + name +
                         R"(", "site": "cudnnBackendExecute", "launches": 2, "shape": "x", "dram_bytes_lower_bound": )" +
                         std::to_string(dram) + R"(, "flops": )" + std::to_string(flops) + R"(, "math": "bf16"})");
}

Value doc(std::initializer_list<Value> records) {
  Value d = Value::object();
  d.set("format", "ringtape kernel lab 1");
  Value rs = Value::array();
  for (const Value& r : records) rs.push_back(r);
  d.set("records", std::move(rs));
  return d;
}

// A step at batch b: an elementwise kernel whose grid and bytes scale with b, the same kernel
// at a second site with a fixed part, a capped reduction (grid fixed, bytes linear), a
// per-channel finaliser that does not change with b, and a convolution.
Value step(int64_t b) {
  return doc({
      kernel("rt::cuda::{anonymous}::map_vec<float, rt::cuda::Relu>", "kernels/cuda/elementwise.cu:214", 3, 100 * b,
             256, 1e6 * b, 2.5e5 * b, 40 * b, 40 * b),
      kernel("rt::cuda::{anonymous}::map_vec<float, rt::cuda::Relu>", "kernels/cuda/elementwise.cu:216", 1, 10 * b, 256,
             1e5 + 1e5 * b, 0, 80 * b, 40 * b),
      kernel("rt::cuda::detail::partials<float>", "kernels/cuda/channel_reduce.cuh:98", 2, 132, 256, 2e6 * b, 0,
             100 * b, 90 * b, 128),
      kernel("rt::cuda::detail::finalize<float>", "kernels/cuda/channel_reduce.cuh:125", 2, 1, 256, 8192, 0, 64, 32),
      // A row whose grid stops growing past batch 2 (a cap): not linear.
      kernel("rt::cuda::capped<float>", "kernels/cuda/x.cu:1", 1, b >= 2 ? 64 : 32, 256, 1e6 * b, 0, 10, 10),
      library("cudnn engine0 convolution forward", 4e6 * b + 1e6, 1e10 * b),
  });
}

const lab::Row& row(const lab::Lab& l, const std::string& kernel, const std::string& site = "") {
  for (const lab::Row& r : l.rows)
    if (r.kernel == kernel && (site.empty() || r.site == site)) return r;
  FAIL("no row " << kernel << " " << site);
  return l.rows.front();
}

TEST_CASE("rows are a kernel at a launch site; counters extrapolate on the line through the two largest batches") {
  const lab::Lab l = lab::build({{4, step(4)}, {1, step(1)}, {2, step(2)}}, 256);
  CHECK(l.batches == std::vector<int>{1, 2, 4});
  CHECK(l.rows.size() == 6);
  const lab::Row& a = row(l, "rt::cuda::{anonymous}::map_vec<float, rt::cuda::Relu>", "kernels/cuda/elementwise.cu:214");
  CHECK(a.target.launches == 3);
  CHECK(a.target.blocks == doctest::Approx(3 * 100 * 256));
  CHECK(a.target.dram_bytes == doctest::Approx(1e6 * 256));
  CHECK(a.nonlinear.empty());
  const lab::Row& b = row(l, "rt::cuda::{anonymous}::map_vec<float, rt::cuda::Relu>", "kernels/cuda/elementwise.cu:216");
  CHECK(b.target.dram_bytes == doctest::Approx(1e5 + 1e5 * 256));  // the constant part kept
  CHECK(b.sector_efficiency() == doctest::Approx(0.5));
  const lab::Row& f = row(l, "rt::cuda::detail::finalize<float>");
  CHECK(f.target.dram_bytes == 8192);
  CHECK(f.target.blocks == 2);
  CHECK(f.nonlinear.empty());
  const lab::Row& c = row(l, "rt::cuda::capped<float>");
  REQUIRE(c.nonlinear.size() == 1);
  CHECK(c.nonlinear[0] == "blocks");
  CHECK(c.target.blocks == 64);  // the line through batches 2 and 4: flat
  // Shared counters: 4 conflicts over 8 requests.
  CHECK(a.conflicts_per_request() == doctest::Approx(0.5));
}

TEST_CASE("each row is bounded on the H200 model at the target") {
  const lab::Lab l = lab::build({{1, step(1)}, {2, step(2)}, {4, step(4)}}, 256);
  const lab::Row& a = row(l, "rt::cuda::{anonymous}::map_vec<float, rt::cuda::Relu>", "kernels/cuda/elementwise.cu:214");
  const double mem_us = 256e6 / h200::kDramBytesPerS * 1e6;
  CHECK(a.memory_us == doctest::Approx(mem_us));
  CHECK(a.compute_us == doctest::Approx(2.5e5 * 256 / h200::kFlopsF32 * 1e6));
  CHECK(a.launch_us == doctest::Approx(3 * h200::kLaunchUs));
  CHECK(a.bound_us == doctest::Approx(mem_us + 3 * h200::kLaunchUs));
  CHECK(a.limiter == "memory");
  CHECK(a.occupancy == 1.0);  // 32 registers, 256 threads
  // 132 blocks of 8 warps at 25% occupancy (128 registers): 2 blocks per SM, fill 1056 of 8448 warps.
  const lab::Row& p = row(l, "rt::cuda::detail::partials<float>");
  CHECK(p.occupancy == 0.25);
  CHECK(p.limiter == "latency");
  CHECK(row(l, "rt::cuda::detail::finalize<float>").limiter == "launch");
  // The library call: bounded by bf16's tensor cores, no latency judged without a grid.
  const lab::Row& conv = row(l, "cudnn engine0 convolution forward");
  CHECK(conv.compute_us == doctest::Approx(1e10 * 256 / h200::kFlopsBf16Tensor * 1e6));
  CHECK(conv.limiter == (conv.compute_us > conv.memory_us ? "compute" : "memory"));
  // Sorted by bound, largest first; the summary adds them up.
  for (size_t i = 1; i < l.rows.size(); ++i) CHECK(l.rows[i - 1].bound_us >= l.rows[i].bound_us);
  double kernels = 0, launches = 0;
  for (const lab::Row& r : l.rows)
    if (r.kind == "kernel") kernels += r.bound_us, launches += r.target.launches;
  CHECK(l.summary.kernel_us == doctest::Approx(kernels));
  CHECK(l.summary.kernel_launches == launches);
  CHECK(l.summary.library_calls == 2);
  CHECK(l.summary.total_us == doctest::Approx(kernels + conv.bound_us));
  CHECK(l.summary.images_per_s == doctest::Approx(256 / (l.summary.total_us * 1e-6)));
}

TEST_CASE("the table, the JSON and the roofline") {
  const lab::Lab l = lab::build({{1, step(1)}, {2, step(2)}, {4, step(4)}}, 256);
  const std::string t = lab::table(l, 3);
  CHECK(t.find("map_vec<float, Relu> (elementwise.cu:214)") != std::string::npos);
  CHECK(t.find("3 more rows in the JSON") != std::string::npos);
  CHECK(t.find("capped<float> (kernels/cuda/x.cu:1): blocks") != std::string::npos);
  CHECK(t.find("step bound at batch 256") != std::string::npos);
  const Value j = rt::json::parse(rt::json::dump(lab::to_json(l)));
  CHECK(j.find("target_batch")->as_int() == 256);
  CHECK(j.find("rows")->as_array().size() == 6);
  CHECK(j.find("summary")->find("launches")->as_double() == l.summary.launches);
  const std::string svg = lab::roofline_svg(l, "a <title>");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("HBM3e 4.8 TB/s") != std::string::npos);
  CHECK(svg.find("BF16 tensor") != std::string::npos);
  CHECK(svg.find("a &lt;title>") != std::string::npos);
  CHECK(svg.find("<rect x=") != std::string::npos);  // the convolution's square
}

TEST_CASE("host launches per step: a graph launch counts once, from the largest batch's file") {
  // Without the fields (files before graphs were counted): not printed.
  const lab::Lab plain = lab::build({{1, step(1)}, {2, step(2)}}, 256);
  CHECK(plain.summary.host_launches == -1);
  CHECK(lab::table(plain, 0).find("host launches") == std::string::npos);
  Value a = step(1), b = step(2);
  a.set("host_launches", 9), a.set("graph_launches", 1);
  b.set("host_launches", 3), b.set("graph_launches", 1);
  const lab::Lab l = lab::build({{2, b}, {1, a}}, 256);
  CHECK(l.summary.host_launches == 3);
  CHECK(l.summary.graph_launches == 1);
  CHECK(lab::table(l, 0).find("host launches per step: 3 (1 of them CUDA graph launches)") != std::string::npos);
  const Value j = rt::json::parse(rt::json::dump(lab::to_json(l)));
  CHECK(j.find("summary")->find("host_launches")->as_double() == 3);
}

TEST_CASE("short names drop every qualifier") {
  CHECK(lab::short_name("rt::cuda::{anonymous}::map_vec<__nv_bfloat16, rt::cuda::{anonymous}::BinaryFwd<rt::ew::Add, "
                        "float> >") == "map_vec<__nv_bfloat16, BinaryFwd<Add, float> >");
  CHECK(lab::short_name("plain") == "plain");
  CHECK(lab::short_name("rt::cuda::detail::channel_finalize<rt::cuda::detail::SumState<float>, "
                        "rt::cuda::(anonymous namespace)::BackwardCoefs<float, float> >") ==
        "channel_finalize<SumState<float>, BackwardCoefs<float, float> >");
}

TEST_CASE("files that are not the lab's are refused, naming them") {
  CHECK_THROWS_WITH_AS(lab::build({{1, step(1)}}, 256), doctest::Contains("two batches at least"), rt::Error);
  CHECK_THROWS_WITH_AS(lab::build({{1, step(1)}, {1, step(1)}}, 256), doctest::Contains("given twice"), rt::Error);
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/x.json";
  std::ofstream(path) << "{\"records\": []}";
  CHECK_THROWS_WITH_AS(lab::load({{1, path}, {2, path}}, 256), doctest::Contains("is not a kernel lab file"), rt::Error);
  CHECK_THROWS_WITH_AS(lab::load({{1, path + ".missing"}, {2, path}}, 256), doctest::Contains("cannot read"),
                       rt::Error);
}

}  // namespace
