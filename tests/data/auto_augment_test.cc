// data/transforms/auto_augment.h against torchvision 0.14 (tests/data/gen_auto_augment_golden.py writes
// the golden file): every operation at fixed magnitudes on three small images, the
// policies' op lists and magnitude bins, AutoAugment(IMAGENET)'s sub-policies and AugMix's
// mixing with scripted draws; then the policies' determinism and bounds on odd sizes.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/usage_error.h"
#include "data/transforms/augment.h"
#include "data/transforms/auto_augment.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"

namespace {

using namespace rt;
using namespace rt::data;

struct Golden {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;

  const Tensor& get(const std::string& key) const {
    auto it = tensors.find(key);
    if (it == tensors.end()) RT_FAIL("auto_augment_golden.safetensors has no tensor '", key, "'");
    return it->second;
  }
  json::Value json(const std::string& key) const { return json::parse(meta.at(key)); }
};

const Golden& golden() {
  static const Golden g = [] {
    Golden r;
    // Bazel runs tests in the workspace's runfiles root, where data files keep their paths.
    r.tensors = load_safetensors("tests/data/auto_augment_golden.safetensors", &r.meta);
    return r;
  }();
  return g;
}

AugmentOp op_named(const std::string& name) {
  for (int i = 0; i < kNumAugmentOps; ++i)
    if (name == augment_op_name(AugmentOp(i))) return AugmentOp(i);
  RT_FAIL("no AugmentOp named ", name);
}

// Every op repeats torchvision's float32 steps (Note [Matching torchvision's floats] in
// data/transforms/auto_augment_ops.cc), so every byte is torchvision's. Were a float step to differ,
// the ops through float32 would move by one level (kFloatOpTolerance) and the integer maps
// (posterize, solarize, invert, equalize, autocontrast, identity) would still be exact:
// the tolerance below is that bound, and the count of bytes one level off must be zero.
constexpr int kFloatOpTolerance = 1;
bool exact_op(AugmentOp op) {
  switch (op) {
    case AugmentOp::identity:
    case AugmentOp::posterize:
    case AugmentOp::solarize:
    case AugmentOp::autocontrast:
    case AugmentOp::equalize:
    case AugmentOp::invert:
      return true;
    default:
      return false;
  }
}

struct Diff {
  int64_t differing = 0;  // bytes not equal
  int max = 0;
  std::string first;  // where the first difference is
};

Diff compare(const uint8_t* got, const uint8_t* want, int w, int h) {
  Diff d;
  for (int64_t i = 0; i < int64_t(w) * h * 3; ++i) {
    const int e = std::abs(int(got[i]) - int(want[i]));
    if (e == 0) continue;
    if (d.differing++ == 0) {
      d.first = "(y " + std::to_string(i / 3 / w) + ", x " + std::to_string(i / 3 % w) + ", c " +
                std::to_string(i % 3) + "): got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
    }
    d.max = std::max(d.max, e);
  }
  return d;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const uint8_t* p = t.data<uint8_t>();
  return std::vector<uint8_t>(p, p + t.numel());
}

TEST_CASE("every op matches torchvision at fixed magnitudes, both interpolations") {
  const Golden& g = golden();
  const json::Value mags = g.json("magnitudes");
  int64_t checked = 0, off_by_one = 0;
  for (int i = 0; i < 3; ++i) {
    const Tensor& img = g.get("img." + std::to_string(i));
    const int h = int(img.size(0)), w = int(img.size(1));
    for (const auto& [name, list] : mags.as_object()) {
      const AugmentOp op = op_named(name);
      const bool geometric = op == AugmentOp::shear_x || op == AugmentOp::shear_y || op == AugmentOp::translate_x ||
                             op == AugmentOp::translate_y || op == AugmentOp::rotate;
      for (const char* interp : geometric ? std::vector<const char*>{"nearest", "bilinear"}
                                          : std::vector<const char*>{"none"}) {
        const Tensor& want = g.get("op." + std::to_string(i) + "." + name + "." + interp);
        const auto& m = list.as_array();
        REQUIRE(want.size(0) == int64_t(m.size()));
        for (size_t k = 0; k < m.size(); ++k) {
          std::vector<uint8_t> got = bytes_of(img);
          apply_op(op, m[k].as_double(), got.data(), w, h,
                   std::string(interp) == "nearest" ? Interpolation::nearest : Interpolation::bilinear);
          const Diff d = compare(got.data(), want.data<uint8_t>() + k * size_t(w) * h * 3, w, h);
          INFO("image ", i, " (", w, "x", h, ") ", name, "(", m[k].as_double(), ") ", interp, ": ", d.differing,
               " bytes differ, first at ", d.first);
          CHECK(d.max <= (exact_op(op) ? 0 : kFloatOpTolerance));
          ++checked;
          off_by_one += d.differing;
        }
      }
    }
  }
  CHECK_MESSAGE(off_by_one == 0, checked, " op results compared; ", off_by_one, " bytes one level off torchvision's");
}

TEST_CASE("the policies' op lists and magnitude bins are torchvision's") {
  const Golden& g = golden();
  const json::Value spaces = g.json("spaces");
  const json::Value sizes = g.json("sizes");
  for (const auto& [policy_name, spec] : spaces.as_object()) {
    const AutoAugmentPolicy policy = parse_auto_augment_policy(policy_name);
    const auto& ops = spec.find("ops")->as_array();
    const int64_t bins = spec.find("bins")->as_int();
    for (const json::Value& size : sizes.as_array()) {
      const int w = int(size.as_array()[0].as_int()), h = int(size.as_array()[1].as_int());
      INFO(policy_name, " for ", w, "x", h);
      const std::vector<OpSpace> s = augmentation_space(policy, w, h);
      REQUIRE(s.size() == ops.size());
      for (size_t k = 0; k < s.size(); ++k) {
        const std::string name = ops[k].as_array()[0].as_string();
        INFO("op ", k, " ", name);
        CHECK(augment_op_name(s[k].op) == name);
        CHECK(s[k].is_signed == ops[k].as_array()[1].as_bool());
        const Tensor& want = g.get("space." + policy_name + "." + std::to_string(w) + "x" + std::to_string(h) + "." +
                                   name);
        REQUIRE(size_t(want.numel()) == s[k].bins.size());
        if (s[k].bins.empty()) continue;
        CHECK(int64_t(s[k].bins.size()) == bins);
        // Bit for bit: a translation is int(bin), a threshold is compared with integers.
        CHECK(std::memcmp(s[k].bins.data(), want.data<float>(), s[k].bins.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("AutoAugment(IMAGENET)'s sub-policies are torchvision's") {
  const json::Value want = golden().json("imagenet");
  const auto got = imagenet_policies();
  REQUIRE(got.size() == want.as_array().size());
  for (size_t i = 0; i < got.size(); ++i) {
    for (size_t j = 0; j < 2; ++j) {
      const auto& w = want.as_array()[i].as_array()[j].as_array();
      INFO("sub-policy ", i, " op ", j);
      CHECK(augment_op_name(got[i][j].op) == w[0].as_string());
      CHECK(got[i][j].p == w[1].as_double());
      CHECK(got[i][j].bin == w[2].as_int());
    }
  }
}

TEST_CASE("AugMix mixes like torchvision given the same draws") {
  const Golden& g = golden();
  const Tensor& img = g.get("augmix.img");
  const int h = int(img.size(0)), w = int(img.size(1));
  AugMixDraws d;
  for (int i = 0; i < 2; ++i) d.m[size_t(i)] = g.get("augmix.m").data<float>()[i];
  for (int i = 0; i < kAugMixWidth; ++i) d.weights[size_t(i)] = g.get("augmix.weights").data<float>()[i];
  // The scripted torch.randint values: per chain its depth, per op its index, then a bin
  // when the op has magnitudes and a coin when it is signed.
  const json::Value draws = g.json("augmix_draws");
  const auto& v = draws.as_array();
  const std::vector<OpSpace> space = augmentation_space(AutoAugmentPolicy::augmix, w, h);
  size_t at = 0;
  for (int c = 0; c < kAugMixWidth; ++c) {
    d.depth[size_t(c)] = int(v.at(at++).as_int());
    for (int k = 0; k < d.depth[size_t(c)]; ++k) {
      AugMixStep& st = d.steps[size_t(c)][size_t(k)];
      st.op_index = int(v.at(at++).as_int());
      if (!space[size_t(st.op_index)].bins.empty()) st.bin = int(v.at(at++).as_int());
      if (space[size_t(st.op_index)].is_signed) st.negative = v.at(at++).as_int() == 1;
    }
  }
  REQUIRE(at == v.size());
  std::vector<uint8_t> got = bytes_of(img);
  augmix_apply(got.data(), w, h, d, Interpolation::bilinear);
  const Diff diff = compare(got.data(), g.get("augmix.out").data<uint8_t>(), w, h);
  INFO(diff.differing, " bytes differ, first at ", diff.first);
  CHECK(diff.max == 0);  // the same float32 steps: exact
}

std::vector<uint8_t> pattern(int w, int h, uint64_t seed) {
  Generator g(seed);
  std::vector<uint8_t> img(size_t(w) * h * 3);
  for (auto& b : img) b = uint8_t(g.next_u64() >> 56);
  return img;
}

TEST_CASE("each policy's draws are a function of the generator; odd sizes stay in bounds") {
  for (AutoAugmentPolicy p : {AutoAugmentPolicy::imagenet, AutoAugmentPolicy::ra, AutoAugmentPolicy::ta_wide,
                              AutoAugmentPolicy::augmix}) {
    for (Interpolation interp : {Interpolation::nearest, Interpolation::bilinear}) {
      AutoAugmentOptions opt;
      opt.policy = p;
      opt.interpolation = interp;
      for (auto [w, h] : {std::pair{1, 1}, {1, 9}, {9, 1}, {2, 2}, {3, 3}, {17, 13}, {32, 32}}) {
        INFO(auto_augment_policy_name(p), " ", interpolation_name(interp), " ", w, "x", h);
        int changed = 0;
        for (uint64_t seed = 0; seed < 12; ++seed) {
          const std::vector<uint8_t> src = pattern(w, h, seed);
          std::vector<uint8_t> a = src, b = src;
          Generator ga = example_generator(seed, 1, 7), gb = example_generator(seed, 1, 7);
          auto_augment(a.data(), w, h, opt, ga);
          auto_augment(b.data(), w, h, opt, gb);
          CHECK(a == b);
          CHECK(ga.state() == gb.state());
          changed += a != src;
        }
        if (w * h >= 64) CHECK(changed > 0);
      }
    }
  }
}

TEST_CASE("every op at extreme magnitudes on degenerate sizes") {
  // AddressSanitizer's build checks the reads; the results must simply exist.
  const double extremes[] = {0.0, 1e-3, -1e-3, 0.99, -0.99, 31.9, -31.9, 135.0, -135.0, 1e6, -1e6};
  for (int op = 0; op < kNumAugmentOps; ++op) {
    for (auto [w, h] : {std::pair{1, 1}, {1, 7}, {7, 1}, {2, 3}, {5, 4}}) {
      for (double m : extremes) {
        double mag = m;
        if (AugmentOp(op) == AugmentOp::posterize) mag = std::fmod(std::abs(m), 9.0);
        if (AugmentOp(op) == AugmentOp::solarize) mag = std::min(std::abs(m), 255.0);
        if (AugmentOp(op) >= AugmentOp::brightness && AugmentOp(op) <= AugmentOp::sharpness)
          mag = std::max(m, -1.0);  // factors are 1 + m >= 0
        for (Interpolation interp : {Interpolation::nearest, Interpolation::bilinear}) {
          std::vector<uint8_t> img = pattern(w, h, uint64_t(op * 131 + w * 7 + h));
          apply_op(AugmentOp(op), mag, img.data(), w, h, interp);
        }
      }
    }
  }
  // A whole translation out of the image leaves black.
  std::vector<uint8_t> img = pattern(9, 5, 3);
  apply_op(AugmentOp::translate_x, 9.0, img.data(), 9, 5, Interpolation::bilinear);
  CHECK(img == std::vector<uint8_t>(img.size(), 0));
}

TEST_CASE("names and options") {
  for (AutoAugmentPolicy p : {AutoAugmentPolicy::none, AutoAugmentPolicy::imagenet, AutoAugmentPolicy::ra,
                              AutoAugmentPolicy::ta_wide, AutoAugmentPolicy::augmix})
    CHECK(parse_auto_augment_policy(auto_augment_policy_name(p)) == p);
  CHECK(parse_interpolation("nearest") == Interpolation::nearest);
  CHECK(parse_interpolation("bilinear") == Interpolation::bilinear);
  try {
    parse_auto_augment_policy("trivial");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("imagenet, ra, ta_wide, augmix") != std::string::npos);
  }
  CHECK_THROWS_AS(parse_interpolation("bicubic"), UsageError);
  AutoAugmentOptions opt;
  opt.ra_magnitude = 31;
  CHECK_THROWS_AS(check_auto_augment_options(opt), UsageError);
  opt.ra_magnitude = 30;
  opt.augmix_severity = 0;
  CHECK_THROWS_AS(check_auto_augment_options(opt), UsageError);
  opt.augmix_severity = 10;
  CHECK_NOTHROW(check_auto_augment_options(opt));
}

TEST_CASE("timing: TrivialAugmentWide on 224x224 (reported, not checked)") {
  AutoAugmentOptions opt;
  opt.policy = AutoAugmentPolicy::ta_wide;
  const std::vector<uint8_t> src = pattern(224, 224, 1);
  std::vector<uint8_t> img(src.size());
  const int n = 300;
  for (Interpolation interp : {Interpolation::nearest, Interpolation::bilinear}) {
    opt.interpolation = interp;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      img = src;
      Generator g = example_generator(5, 0, i);
      auto_augment(img.data(), 224, 224, opt, g);
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    MESSAGE("TA-wide ", std::string(interpolation_name(interp)), " 224x224: ", us,
            " us per image (with a 150 KB copy)");
  }
  const double mags[kNumAugmentOps] = {0, 0.5, 0.5, 10, 10, 30, 0.5, 0.5, 0.5, 0.5, 4, 100, 0, 0, 0};
  std::string per_op;
  for (int op = 0; op < kNumAugmentOps; ++op) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) apply_op(AugmentOp(op), mags[op], img.data(), 224, 224, Interpolation::bilinear);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 50;
    per_op += std::string(" ") + augment_op_name(AugmentOp(op)) + " " + std::to_string(int(us));
  }
  MESSAGE("per op (us, bilinear):", per_op);
}

}  // namespace
