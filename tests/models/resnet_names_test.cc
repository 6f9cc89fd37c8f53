// ringtape's ResNets have torchvision's state_dict: the same keys, in the same order, with
// the same shapes, for resnet18/34/50/101/152, resnext50_32x4d and wide_resnet50_2 at full
// size (torchvision_names.txt, written by gen_golden.py from torchvision 0.14), and
// se_resnet50 has timm's seresnet50 layout (written there too); torchvision's
// initialisation, and the options change exactly what they should.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/nn/module.h"
#include "models/registry.h"

using rt::Shape;
using rt::Tensor;

namespace {

using Entries = std::vector<std::pair<std::string, Shape>>;

const std::vector<std::string> kModels = {"resnet18",        "resnet34",        "resnet50",   "resnet101", "resnet152",
                                          "resnext50_32x4d", "wide_resnet50_2", "se_resnet50"};

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
// width / 64 (a grouped conv's input channels per group too: resnext50_32x4d keeps its 32
// groups), conv1 takes in_channels inputs (and is 3x3 with the small stem), fc has
// num_classes outputs. A squeeze-and-excitation block (se.fc1 / se.fc2) of C channels keeps
// timm's reduced width: C / 16 rounded to a multiple of 8, at least 8 (not a scaled one).
Entries expected(const std::string& model, const rt::models::ModelOptions& o) {
  Entries want = torchvision_state().at(model);
  int64_t se_channels = 0;  // of the block whose se.fc1 was seen last
  auto reduced = [](int64_t c) { return std::max<int64_t>(8, (c / 16 + 4) / 8 * 8); };  // c / 16 is whole here
  for (auto& [k, s] : want) {
    if (k.find(".se.") != std::string::npos) {
      if (k.ends_with("se.fc1.weight")) se_channels = s[1] * o.width / 64;
      const int64_t rd = reduced(se_channels);
      if (k.ends_with("se.fc1.weight")) s = {rd, se_channels, 1, 1};
      else if (k.ends_with("se.fc1.bias")) s = {rd};
      else if (k.ends_with("se.fc2.weight")) s = {se_channels, rd, 1, 1};
      else s = {se_channels};
    } else if (k == "fc.weight") {
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

TEST_CASE("the reference lists the seven torchvision models and se_resnet50") {
  const auto& tv = torchvision_state();
  REQUIRE(tv.size() == kModels.size());
  // torchvision 0.14: 122, 218, 320, 626 and 932 state_dict entries; ResNeXt-50 and Wide
  // ResNet-50 have resnet50's 320 with other shapes.
  CHECK(tv.at("resnet18").size() == 122);
  CHECK(tv.at("resnet34").size() == 218);
  CHECK(tv.at("resnet50").size() == 320);
  CHECK(tv.at("resnet101").size() == 626);
  CHECK(tv.at("resnet152").size() == 932);
  CHECK(tv.at("resnext50_32x4d").size() == 320);
  CHECK(tv.at("wide_resnet50_2").size() == 320);
  CHECK(tv.at("se_resnet50").size() == 384);  // + se.fc1/fc2 weight and bias in 16 blocks
  CHECK(rt::models::model_names() == kModels);
}

// torchvision's initialisation: every conv weight ~ N(0, 2 / fan_out) with fan_out = out
// channels x kernel area (kaiming_normal_, mode="fan_out"; the groups do not enter it, the
// input channels per group would with fan_in: a 6x larger std for resnext50_32x4d's 3x3
// convs), batch norms weight 1 and bias 0. The sample std of the smallest conv (4,096
// values) is within ~1.1% of the true one; 6% is 5 of those.
void check_init(rt::nn::Module& model, const std::string& name) {
  int convs = 0;
  for (const auto& [k, t] : model.named_parameters()) {
    const std::vector<double> v = t.to_vector<double>();
    if (t.ndim() == 4) {
      double sum = 0, sq = 0;
      for (double x : v) sum += x, sq += x * x;
      const double n = double(v.size()), mean = sum / n, std = std::sqrt(sq / n - mean * mean);
      const double want = std::sqrt(2.0 / double(t.size(0) * t.size(2) * t.size(3)));
      CHECK_MESSAGE(std::abs(std / want - 1) < 0.06, name, " ", k, ": std ", std, ", kaiming_normal_ fan_out ", want);
      CHECK_MESSAGE(std::abs(mean) < 0.1 * want, name, " ", k, ": mean ", mean);
      ++convs;
    } else if (t.ndim() == 1 && !k.starts_with("fc.") && k.find(".se.") == std::string::npos) {
      // (The classifier's and squeeze-and-excitation's biases start like PyTorch's defaults.)
      const double want = k.ends_with(".weight") ? 1.0 : 0.0;
      CHECK_MESSAGE(std::all_of(v.begin(), v.end(), [want](double x) { return x == want; }), name, " ", k,
                    " is not all ", want);
    }
  }
  CHECK(convs > 0);
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
  check_init(*model, name);
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
TEST_CASE("full-size-resnext50_32x4d") { check_full_size("resnext50_32x4d"); }
TEST_CASE("full-size-wide_resnet50_2") { check_full_size("wide_resnet50_2"); }
TEST_CASE("full-size-se_resnet50") { check_full_size("se_resnet50"); }

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
      {"small_stem, in_channels 1, width 16, num_classes 10", opts(10, 16, 1, true)},
  };
  for (const auto& name : kModels) {
    int built = 0;
    for (const auto& v : variants) {
      // resnext50_32x4d takes widths whose 32 groups get whole channels: multiples of 16.
      if (name == "resnext50_32x4d" && v.o.width % 16 != 0) continue;
      CAPTURE(name);
      CAPTURE(v.what);
      const auto model = rt::models::make_model(name, v.o);
      check_entries(entries_of(model->state_dict()), expected(name, v.o), name + " (" + v.what + ")");
      ++built;
    }
    CHECK(built >= 2);
  }
  const auto o = opts(10, 64, 3, false);
  check_entries(entries_of(rt::models::make_model("resnet18", o)->state_dict()), expected("resnet18", o),
                "resnet18 (num_classes 10)");
}

TEST_CASE("zero_init_residual zeroes the last batch norm of every block, like torchvision") {
  for (const std::string name : {"resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2"}) {
    CAPTURE(name);
    rt::models::ModelOptions o;
    o.width = name == "resnext50_32x4d" ? 16 : 4;
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

TEST_CASE("resnext50_32x4d refuses a width whose 32 groups would not get whole channels") {
  // At width W its first-stage groups have W x 4 / 64 channels (4 at torchvision's 64).
  rt::models::ModelOptions o;
  o.num_classes = 10;
  for (int64_t w : {8, 24, 4, 1}) {
    CAPTURE(w);
    o.width = w;
    const std::string want = rt::detail::cat("ResNet: width ", w, " with width_per_group 4 gives the first stage's ",
                                             "bottleneck groups ", w, " x 4 / 64 channels each, not a whole number: ",
                                             "use a width that is a multiple of 16");
    CHECK_THROWS_WITH_AS(rt::models::make_model("resnext50_32x4d", o), doctest::Contains(want.c_str()), rt::Error);
  }
  o.width = 16;
  const auto m = rt::models::make_model("resnext50_32x4d", o);
  // 32 groups of 1 channel (conv2's weight is (out, in / groups, 3, 3)), 32 groups of 8 at the end.
  std::map<std::string, Shape> shapes;
  for (const auto& [k, t] : m->state_dict()) shapes[k] = t.shape();
  CHECK(shapes.at("layer1.0.conv2.weight") == Shape{32, 1, 3, 3});
  CHECK(shapes.at("layer4.2.conv2.weight") == Shape{256, 8, 3, 3});
}

TEST_CASE("groups and width_per_group: torchvision's ResNet kwargs, fixed by resnext50_32x4d and wide_resnet50_2") {
  rt::models::ModelOptions o;
  o.width = 16;
  o.num_classes = 10;
  // torchvision's resnet50(groups=32, width_per_group=4) is resnext50_32x4d, and
  // resnet50(width_per_group=128) is wide_resnet50_2.
  o.groups = 32;
  o.width_per_group = 4;
  CHECK(entries_of(rt::models::make_model("resnet50", o)->state_dict()) == expected("resnext50_32x4d", o));
  CHECK(entries_of(rt::models::make_model("resnext50_32x4d", o)->state_dict()) == expected("resnext50_32x4d", o));
  o.groups = 0;
  o.width_per_group = 128;
  CHECK(entries_of(rt::models::make_model("resnet50", o)->state_dict()) == expected("wide_resnet50_2", o));
  CHECK(entries_of(rt::models::make_model("wide_resnet50_2", o)->state_dict()) == expected("wide_resnet50_2", o));
  // A value the model fixes cannot change (torchvision's builders raise the same way).
  o.width_per_group = 64;
  CHECK_THROWS_WITH_AS(rt::models::make_model("wide_resnet50_2", o),
                       doctest::Contains("wide_resnet50_2 has width_per_group 128, not 64"), rt::Error);
  o.width_per_group = 0;
  o.groups = 16;
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnext50_32x4d", o),
                       doctest::Contains("resnext50_32x4d has groups 32, not 16"), rt::Error);
  // torchvision's BasicBlock has no groups.
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnet18", o),
                       doctest::Contains("the basic block (resnet18/34) supports only groups 1 and width_per_group 64"),
                       rt::Error);
  o.groups = -1;
  CHECK_THROWS_WITH_AS(rt::models::make_model("resnet50", o), doctest::Contains("groups must be in [1, 2^30]"),
                       rt::Error);
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
