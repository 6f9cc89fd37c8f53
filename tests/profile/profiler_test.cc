// The profiler (engine/profiler.h, profile/): what the scopes record on a real model's
// forward and backward, the summary's tables and totals, the Chrome trace, and the
// session's step window. CPU only (the GPU's CUPTI records need a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/autograd.h"
#include "engine/nn/module.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "profile/report.h"
#include "profile/session.h"
#include "profile/trace.h"
#include "tests/test_util.h"
#include "tests/models/tiny_resnet.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<nn::Module> small_resnet() {
  auto m = test::tiny_resnet18({.classes = 10, .width = 8, .stem_stride = 2});
  nn::name_modules_for_profiling(*m);
  return m;
}

// One "training step" of `m` on a batch: phases as the trainer opens them.
void step(nn::Module& m, int64_t i) {
  prof::RangeScope s(prof::EventKind::step, "step " + std::to_string(i + 1));
  prof::set_step(i);
  Tensor x, y;
  {
    prof::RangeScope d(prof::EventKind::phase, "data");
    x = test::rnd({4, 1, 28, 28}, 100 + uint64_t(i), DType::f32);
    y = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4});
  }
  Tensor loss;
  {
    prof::RangeScope f(prof::EventKind::phase, "forward");
    loss = cross_entropy(m.forward(x), y);
  }
  {
    prof::RangeScope b(prof::EventKind::phase, "backward");
    loss.backward();
  }
  {
    prof::RangeScope o(prof::EventKind::phase, "optimizer");
    NoGradGuard ng;
    for (Tensor& p : m.parameters()) {
      if (p.grad().defined()) add_(p, p.grad(), -0.01);
      p.zero_grad();
    }
  }
}

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("rt_profiler_test_" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST_CASE("nothing is recorded outside a profile") {
  auto m = small_resnet();
  CHECK_FALSE(prof::recording());
  step(*m, 0);
  prof::start();
  const std::vector<prof::Event> none = prof::stop();
  CHECK(none.empty());
}

TEST_CASE("scopes attribute every op, forward and backward, to its layer, with its cost") {
  auto m = small_resnet();
  step(*m, 0);  // warm-up
  prof::start();
  step(*m, 1);
  const std::vector<prof::Event> ev = prof::stop();
  REQUIRE(!ev.empty());

  std::map<std::string, int> fwd_conv_paths, bwd_conv_paths;
  int steps = 0, phases = 0, modules = 0;
  for (const prof::Event& e : ev) {
    CHECK(e.end_ns >= e.begin_ns);
    if (e.kind == prof::EventKind::step) ++steps;
    if (e.kind == prof::EventKind::phase) ++phases;
    if (e.kind == prof::EventKind::module) ++modules;
    if (e.kind != prof::EventKind::op) continue;
    CHECK(e.self_ns() >= 0);
    CHECK(e.child_ns <= e.end_ns - e.begin_ns);
    CHECK(e.step == 1);
    if (e.name == "conv2d") {
      (e.backward ? bwd_conv_paths : fwd_conv_paths)[e.path]++;
      CHECK(e.cost.flops > 0);
      CHECK(e.cost.bytes > 0);
      CHECK(e.detail.find("f32") != std::string::npos);
      CHECK(e.phase == (e.backward ? "backward" : "forward"));
    }
    if (e.name == "add_") CHECK(e.phase == "optimizer");
  }
  CHECK(steps == 1);
  CHECK(phases == 4);
  CHECK(modules > 20);
  // resnet18: conv1, 16 block convs, 3 downsamples = 20 convolutions, each once per pass.
  CHECK(fwd_conv_paths.size() == 20);
  CHECK(bwd_conv_paths.size() == 20);
  CHECK(fwd_conv_paths.count("conv1") == 1);
  CHECK(fwd_conv_paths.count("layer3.1.conv2") == 1);
  CHECK(fwd_conv_paths.count("layer2.0.downsample.0") == 1);
  CHECK(bwd_conv_paths.count("layer3.1.conv2") == 1);  // the backward knows its layer
  // conv1 of the small stem: 8 outputs x 14x14 x 1x3x3 taps x batch 4, 2 FLOPs each.
  for (const prof::Event& e : ev)
    if (e.kind == prof::EventKind::op && e.name == "conv2d" && e.path == "conv1" && !e.backward)
      CHECK(e.cost.flops == 2.0 * 4 * 8 * 14 * 14 * 9);
}

TEST_CASE("the summary's rows and totals add up") {
  auto m = small_resnet();
  step(*m, 0);
  prof::start();
  for (int64_t i = 1; i < 3; ++i) step(*m, i);
  const std::vector<prof::Event> ev = prof::stop();
  prof::DevicePeaks peaks;
  peaks.key = "test";
  peaks.copy_bytes_per_s = 10e9;
  peaks.flops = {{"f32", 100e9}};
  const prof::Profile p = prof::summarize(ev, Device::cpu(), peaks, false, 1, 3);
  const prof::Totals& t = p.totals;
  CHECK(t.steps == 2);
  CHECK(t.wall_s > 0);
  // Every op's self time lands in one row of each grouping: the groupings' sums agree.
  for (prof::Group g : {prof::Group::op, prof::Group::layer, prof::Group::kernel}) {
    double sum = 0;
    for (const prof::Row& r : p.rows(g)) sum += r.seconds;
    CHECK(sum == doctest::Approx(t.op_s).epsilon(1e-9));
  }
  // Self times never count a nested op twice: they fit in the steps' wall time, and the
  // phases (timed apart from the ops) cover the step to within the loop's own overhead.
  CHECK(t.op_s <= t.wall_s);
  CHECK(t.op_s + t.outside_ops_s == doctest::Approx(t.wall_s).epsilon(1e-9));
  const double phases = t.data_s + t.forward_s + t.backward_s + t.optimizer_s;
  CHECK(phases <= t.wall_s);
  // Outside the phases: the step's own bookkeeping (freeing the batch, the loss and what the
  // graph kept), measured at 5-12% of these 25 ms steps.
  CHECK(phases >= 0.75 * t.wall_s);
  CHECK(t.op_s >= 0.5 * phases);  // a model step is mostly ops
  // The forward's conv rows are there, sorted longest first, with a pass each.
  bool fwd = false, bwd = false;
  for (size_t i = 0; i < p.by_op.size(); ++i) {
    if (i > 0) CHECK(p.by_op[i - 1].seconds >= p.by_op[i].seconds);
    if (p.by_op[i].name == "conv2d") (p.by_op[i].pass == "forward" ? fwd : bwd) = true;
  }
  CHECK(fwd);
  CHECK(bwd);
  // Every layer appears in a table long enough (which layers make a top 10 depends on timing).
  const std::string table = prof::format_table(p, prof::Group::layer, 1000);
  CHECK(table.find("layer1.0.conv1") != std::string::npos);
  CHECK(table.find("layer4.1.bn2") != std::string::npos);
  CHECK(table.find("outside ops") != std::string::npos);
  CHECK(prof::format_table(p, prof::Group::layer, 3).find("more rows") != std::string::npos);
  // profile.json round-trips through the parser with the same totals.
  const json::Value j = json::parse(json::dump(prof::to_json(p)));
  CHECK(j.find("totals")->find("op_seconds")->as_double() == doctest::Approx(t.op_s));
  CHECK(j.find("by_layer")->as_array().size() == p.by_layer.size());
}

TEST_CASE("the trace is valid Chrome JSON: named tracks, slices inside their step, memory counters") {
  auto m = small_resnet();
  prof::thread_id("main");
  step(*m, 0);
  prof::start();
  step(*m, 1);
  const std::vector<prof::Event> ev = prof::stop();
  const json::Value t = json::parse(json::dump(prof::trace_json(ev, prof::thread_names(), 0)));
  const json::Array& te = t.find("traceEvents")->as_array();
  double step_b = -1, step_e = -1;
  for (const json::Value& e : te)
    if (e.find("cat") && e.find("cat")->as_string() == "step") {
      step_b = e.find("ts")->as_double();
      step_e = step_b + e.find("dur")->as_double();
    }
  REQUIRE(step_b >= 0);
  int slices = 0, counters = 0, names = 0;
  std::set<std::string> seen;
  for (const json::Value& e : te) {
    const std::string ph = e.find("ph")->as_string();
    if (ph == "M") {
      ++names;
      seen.insert(e.find("args")->find("name")->as_string());
      continue;
    }
    if (ph == "C") {
      ++counters;
      continue;
    }
    REQUIRE(ph == "X");
    ++slices;
    const double ts = e.find("ts")->as_double(), dur = e.find("dur")->as_double();
    CHECK(ts >= 0);
    CHECK(dur >= 0);
    if (e.find("cat")->as_string() == "op") {
      CHECK(ts >= step_b - 1e-3);
      CHECK(ts + dur <= step_e + 1e-3);
      seen.insert(e.find("name")->as_string());
    }
  }
  CHECK(slices > 100);
  CHECK(counters > 10);
  CHECK(names >= 2);
  CHECK(seen.count("rank 0 host") == 1);
  CHECK(seen.count("main") == 1);
  CHECK(seen.count("conv2d") == 1);
  CHECK(seen.count("conv2d backward") == 1);
}

TEST_CASE("a session records steps A..B-1 only and writes profile.json and trace.json") {
  ScratchDir dir;
  ::setenv("RINGTAPE_CACHE_DIR", dir.path.c_str(), 1);  // the device peaks are measured into it
  auto m = small_resnet();
  prof::ProfileSession s(prof::parse_profile_steps("2:4"), Device::cpu(), false, dir.path.string());
  double timed_s = 0;  // the profiled steps, timed here independently of the profiler
  for (int64_t i = 0; i < 5; ++i) {
    s.begin_step(i);
    CHECK(s.recording() == (i >= 1 && i < 3));
    const int64_t t0 = prof::now_ns();
    step(*m, i);
    if (s.recording()) timed_s += double(prof::now_ns() - t0) / 1e9;
    s.end_step(i);
  }
  CHECK(s.done());
  REQUIRE(s.profile());
  CHECK(s.profile()->totals.steps == 2);
  // The profile's step time is the steps' wall time: within 2% (+0.2 ms for the clock reads
  // and set_step outside the step's range) of the same steps timed from outside.
  CHECK(s.profile()->totals.wall_s <= timed_s);
  CHECK(s.profile()->totals.wall_s >= 0.98 * timed_s - 2e-4);
  CHECK(fs::exists(dir.path / "profile.json"));
  CHECK(fs::exists(dir.path / "trace.json"));
  CHECK(fs::exists(dir.path / "device_peaks.json"));
  CHECK(s.profile()->peaks.copy_bytes_per_s > 1e8);
  CHECK(s.profile()->peaks.flops_for(DType::f32) > 1e8);
  std::ifstream f(dir.path / "profile.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const json::Value j = json::parse(ss.str());
  CHECK(j.find("first_step")->as_int() == 2);
  CHECK(j.find("last_step")->as_int() == 3);
  ::unsetenv("RINGTAPE_CACHE_DIR");
}

TEST_CASE("profiled steps and profile group: bad values are clear errors") {
  CHECK(prof::parse_profile_steps("").enabled() == false);
  const prof::ProfileConfig c = prof::parse_profile_steps("10:12", "layer");
  CHECK(c.first == 9);
  CHECK(c.end == 11);
  CHECK(c.group == prof::Group::layer);
  for (const char* bad : {"10", "0:3", "5:5", "7:3", "a:b", "3:x", ":4"})
    CHECK_THROWS_WITH(prof::parse_profile_steps(bad), doctest::Contains("profiled steps"));
  CHECK_THROWS_WITH(prof::parse_profile_steps("1:2", "ops"), doctest::Contains("op, layer or kernel"));
}

}  // namespace
}  // namespace rt
