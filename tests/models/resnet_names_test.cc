// ringtape's ResNets have torchvision's state_dict: the same keys, in the same order, with
// the same shapes, for resnet18/34/50/101/152 at full size (torchvision_names.txt, written
// by gen_golden.py from torchvision 0.14), and the options change exactly what they should.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "engine/nn/module.h"
#include "models/registry.h"

using rt::Shape;
using rt::Tensor;

namespace {

using Entries = std::vector<std::pair<std::string, Shape>>;

const std::vector<std::string> kModels = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"};

// "## <model>" then "<key> <d0>,<d1>,..." ("-" for a 0-D shape), one entry a line.
const std::map<std::string, Entries>& torchvision_state() {
  static const std::map<std::string, Entries> m = [] {
    const std::string path = "tests/models/torchvision_names.txt";  // runfiles-relative
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot open ", path);
    std::map<std::string, Entries> out;
    Entries* cur = nullptr;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line.starts_with("## ")) {
        cur = &out[line.substr(3)];
        continue;
      }
      REQUIRE_MESSAGE(cur != nullptr, "entry before a model header: ", line);
      std::istringstream ls(line);
      std::string key, dims;
      ls >> key >> dims;
      Shape s;
      if (dims != "-") {
        std::istringstream ds(dims);
        std::string d;
        while (std::getline(ds, d, ',')) s.push_back(std::stoll(d));
      }
      cur->emplace_back(key, s);
    }
    return out;
  }();
  return m;
}

Entries entries_of(const rt::nn::NamedTensors& t) {
  Entries e;
  for (const auto& [k, v] : t) e.emplace_back(k, v.shape());
  return e;
}

bool is_buffer_name(const std::string& k) {
  return k.ends_with(".running_mean") || k.ends_with(".running_var") || k.ends_with(".num_batches_tracked");
}

// Compares entry by entry so a failure names the first differing key, not just "differs".
void check_entries(const Entries& got, const Entries& want, const std::string& what) {
  const size_t n = std::min(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    if (got[i] == want[i]) continue;
    ++bad;
    FAIL_CHECK(what, ": entry ", i, " is ", got[i].first, " ", rt::shape_str(got[i].second), ", torchvision has ",
               want[i].first, " ", rt::shape_str(want[i].second));
  }
  CHECK_MESSAGE(got.size() == want.size(), what, ": ", got.size(), " entries, torchvision has ", want.size());
}

// torchvision's shapes for a model built with other options: channel dims scale with
// width / 64, conv1 takes in_channels inputs (and is 3x3 with the small stem), fc has
// num_classes outputs.
Entries expected(const std::string& model, const rt::models::ModelOptions& o) {
  Entries want = torchvision_state().at(model);
  for (auto& [k, s] : want) {
    if (k == "fc.weight") {
      s = {o.num_classes, s[1] * o.width / 64};
    } else if (k == "fc.bias") {
      s = {o.num_classes};
    } else if (k == "conv1.weight") {
      s = {o.width, o.in_channels, o.small_stem ? 3 : 7, o.small_stem ? 3 : 7};
    } else if (s.size() == 4) {  // conv: (out, in, kh, kw)
      s[0] = s[0] * o.width / 64;
      s[1] = s[1] * o.width / 64;
    } else if (s.size() == 1) {  // batch norm
      s[0] = s[0] * o.width / 64;
    }
  }
  return want;
}

}  // namespace

TEST_CASE("the reference lists all five torchvision models") {
  const auto& tv = torchvision_state();
  REQUIRE(tv.size() == kModels.size());
  // torchvision 0.14: 122, 218, 320, 626 and 932 state_dict entries.
  CHECK(tv.at("resnet18").size() == 122);
  CHECK(tv.at("resnet34").size() == 218);
  CHECK(tv.at("resnet50").size() == 320);
  CHECK(tv.at("resnet101").size() == 626);
  CHECK(tv.at("resnet152").size() == 932);
  CHECK(rt::models::model_names() == kModels);
}

// Constructing a full-size model costs ~0.1 us per parameter (the random initialisation),
// ~6 s for resnet152: each model is its own test case, and BUILD runs the two largest in
// targets of their own so they run in parallel.
void check_full_size(const std::string& name) {
  const auto model = rt::models::make_model(name, {});
  const Entries& want = torchvision_state().at(name);
  check_entries(entries_of(model->state_dict()), want, name + " state_dict");

  // Parameters and buffers split like PyTorch's named_parameters() / named_buffers(),
  // each in state_dict order.
  Entries want_params, want_buffers;
  for (const auto& e : want) (is_buffer_name(e.first) ? want_buffers : want_params).push_back(e);
  check_entries(entries_of(model->named_parameters()), want_params, name + " named_parameters");
  check_entries(entries_of(model->named_buffers()), want_buffers, name + " named_buffers");
  for (const auto& [k, t] : model->named_parameters()) {
    CHECK_MESSAGE(t.dtype() == rt::DType::f32, k);
    CHECK_MESSAGE(t.requires_grad(), k, " does not require grad");
  }
  for (const auto& [k, t] : model->named_buffers()) {
    CHECK_MESSAGE(!t.requires_grad(), k, " is a buffer but requires grad");
    if (k.find("num_batches_tracked") != std::string::npos) {
      CHECK_MESSAGE((t.dtype() == rt::DType::i64 && t.ndim() == 0 && t.item() == 0), k, " is ", t.str());
    } else {
      CHECK_MESSAGE(t.dtype() == rt::DType::f32, k);
    }
  }
}

TEST_CASE("full-size-resnet18") { check_full_size("resnet18"); }
TEST_CASE("full-size-resnet34") { check_full_size("resnet34"); }
TEST_CASE("full-size-resnet50") { check_full_size("resnet50"); }
TEST_CASE("full-size-resnet101") { check_full_size("resnet101"); }
TEST_CASE("full-size-resnet152") { check_full_size("resnet152"); }

// (That the small stem also drops the max-pool is checked numerically by the small-stem
// case of resnet_parity_test.)
TEST_CASE("num_classes, width, in_channels and small_stem change exactly torchvision's corresponding shapes") {
  struct Variant {
    const char* what;
    rt::models::ModelOptions o;
  };
  auto opts = [](int64_t classes, int64_t width, int64_t in_ch, bool small) {
    rt::models::ModelOptions o;
    o.num_classes = classes;
    o.width = width;
    o.in_channels = in_ch;
    o.small_stem = small;
    return o;
  };
  // Narrow, so constructing all of them stays cheap; num_classes alone at full width for
  // resnet18 below.
  const std::vector<Variant> variants = {
      {"width 16", opts(1000, 16, 3, false)},
      {"width 8, num_classes 100", opts(100, 8, 3, false)},
      {"small_stem, width 8, num_classes 10", opts(10, 8, 3, true)},
      {"in_channels 1, width 4", opts(10, 4, 1, false)},
  };
  for (const auto& name : kModels) {
    for (const auto& v : variants) {
      CAPTURE(name);
      CAPTURE(v.what);
      const auto model = rt::models::make_model(name, v.o);
      check_entries(entries_of(model->state_dict()), expected(name, v.o), name + " (" + v.what + ")");
    }
  }
  const auto o = opts(10, 64, 3, false);
  check_entries(entries_of(rt::models::make_model("resnet18", o)->state_dict()), expected("resnet18", o),
                "resnet18 (num_classes 10)");
}

TEST_CASE("zero_init_residual zeroes the last batch norm of every block, like torchvision") {
  for (const std::string name : {"resnet18", "resnet50"}) {
    CAPTURE(name);
    rt::models::ModelOptions o;
    o.width = 4;
    o.num_classes = 10;
    o.zero_init_residual = true;
    const auto model = rt::models::make_model(name, o);
    const std::string last = name == "resnet18" ? ".bn2.weight" : ".bn3.weight";
    int zeroed = 0;
    for (const auto& [k, t] : model->named_parameters()) {
      if (!k.ends_with(".weight") || t.ndim() != 1) continue;  // batch-norm weights only
      const bool is_last = k.starts_with("layer") && k.ends_with(last);
      double mx = 0;
      for (double x : t.to_vector<double>()) mx = std::max(mx, std::abs(x));
      if (is_last) {
        CHECK_MESSAGE(mx == 0.0, k, " not zeroed");
        ++zeroed;
      } else {
        CHECK_MESSAGE(mx == 1.0, k, " should stay 1");
      }
    }
    CHECK(zeroed == (name == "resnet18" ? 8 : 16));
  }
}

TEST_CASE("an unknown model name is an error that lists the known ones") {
  try {
    rt::models::make_model("resnet19", {});
    FAIL("no error");
  } catch (const rt::Error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("resnet19") != std::string::npos, msg);
    for (const auto& n : kModels) CHECK_MESSAGE(msg.find(n) != std::string::npos, msg);
  }
}

TEST_CASE("a num_classes or width whose weights cannot exist is an error naming it, before any layer") {
  rt::models::ModelOptions o;
  o.width = 4;
  o.num_classes = (int64_t(1) << 62) + 1;  // --num-classes 4611686018427387905
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnet18", o),
                       doctest::Contains("ResNet: num_classes 4611686018427387905 is too large: the classifier's "
                                         "weight [4611686018427387905, 32] of f32"),
                       rt::Error);
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnet50", o), doctest::Contains("weight [4611686018427387905, 128]"),
                       rt::Error);
  o.num_classes = 10;
  o.width = int64_t(1) << 60;
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnet18", o),
                       doctest::Contains("ResNet: width 1152921504606846976 is too large"), rt::Error);
  // Sizes that fit the checks but not memory fail in the allocator or the shape check.
  o.width = 4;
  o.num_classes = int64_t(1) << 55;
  CHECK_THROWS_AS(rt::models::make_model("resnet18", o), rt::Error);
}
