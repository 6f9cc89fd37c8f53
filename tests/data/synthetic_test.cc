// The synthetic dataset: deterministic per index, independent of call order, seeded.
#include <doctest/doctest.h>

#include <cmath>

#include "data/datasets/dataset.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

DatasetOptions opts(uint64_t seed) {
  DatasetOptions o;
  o.synthetic.size = 50;
  o.synthetic.image_shape = {2, 5, 3};
  o.synthetic.num_classes = 7;
  o.synthetic.seed = seed;
  return o;
}

std::pair<std::vector<uint8_t>, int64_t> example(const Dataset& ds, int64_t i) {
  std::vector<uint8_t> img(30);
  int64_t label = -1;
  ds.get(i, 0, img.data(), &label);
  return {img, label};
}

}  // namespace

TEST_CASE("synthetic: sizes and options") {
  auto ds = open_dataset("synthetic", "", "train", opts(1));
  CHECK(ds->size() == 50);
  CHECK(ds->image_shape() == rt::Shape{2, 5, 3});
  CHECK(ds->num_classes() == 7);
  CHECK(ds->name() == "synthetic");
}

TEST_CASE("synthetic: example i depends only on (seed, split, i)") {
  auto a = open_dataset("synthetic", "", "train", opts(1));
  auto b = open_dataset("synthetic", "", "train", opts(1));
  // b is read backwards: order of calls must not matter.
  for (int64_t i = 49; i >= 0; --i) CHECK(example(*a, i) == example(*b, i));
  CHECK(example(*a, 3) == example(*a, 3));
  CHECK(example(*a, 3) != example(*a, 4));
  auto other_seed = open_dataset("synthetic", "", "train", opts(2));
  auto test_split = open_dataset("synthetic", "", "test", opts(1));
  CHECK(example(*a, 0) != example(*other_seed, 0));
  CHECK(example(*a, 0) != example(*test_split, 0));
}

TEST_CASE("synthetic: labels cover [0, classes), normalised pixels have mean ~0 and variance ~1") {
  auto ds = open_dataset("synthetic", "", "train", opts(3));
  const double m = ds->normalization().mean[0], sd = ds->normalization().std[0];
  std::vector<int> seen(7);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < 50; ++i) {
    auto [img, label] = example(*ds, i);
    REQUIRE(label >= 0);
    REQUIRE(label < 7);
    seen[size_t(label)] = 1;
    for (uint8_t b : img) {
      const double v = (b / 255.0 - m) / sd;
      CHECK(std::abs(v) < 1.7321);
      s += v;
      s2 += v * v;
    }
  }
  for (int c = 0; c < 7; ++c) CHECK_MESSAGE(seen[size_t(c)], "class ", c, " never drawn in 50 examples");
  const double n = 50 * 30;  // 1500 uniform draws: the sample mean has std 0.026
  CHECK(std::abs(s / n) < 0.1);
  CHECK(std::abs(s2 / n - 1.0) < 0.1);
}

TEST_CASE("synthetic: bad options and indices") {
  DatasetOptions o = opts(0);
  o.synthetic.size = 0;
  check_error([&] { open_dataset("synthetic", "", "train", o); }, {"size 0"});
  o = opts(0);
  o.synthetic.image_shape = {3, 32};
  check_error([&] { open_dataset("synthetic", "", "train", o); }, {"[3, 32]", "{C, H, W}"});
  o = opts(0);
  o.synthetic.num_classes = 0;
  check_error([&] { open_dataset("synthetic", "", "train", o); }, {"num_classes 0"});
  auto ds = open_dataset("synthetic", "", "train", opts(0));
  check_error([&] { example(*ds, 50); }, {"index 50", "[0, 50)"});
}

TEST_CASE("synthetic: an image size whose byte count overflows int64 is refused by name") {
  DatasetOptions o = opts(1);
  o.synthetic.size = 4;
  o.synthetic.image_shape = {3, int64_t(1) << 32, int64_t(1) << 32};  // --synthetic-size 4x3x4294967296x4294967296
  check_error([&] { open_dataset("synthetic", "", "train", o); },
              {"synthetic dataset: image shape [3, 4294967296, 4294967296] is too large"});
  o.synthetic.image_shape = {int64_t(1) << 62, 2, 2};
  check_error([&] { open_dataset("synthetic", "", "train", o); }, {"is too large"});
}

TEST_CASE("synthetic: label(i) is get()'s label, and check_labels needs no scan") {
  auto ds = open_dataset("synthetic", "", "train", opts(3));
  for (int64_t i = 0; i < ds->size(); ++i) CHECK(ds->label(i) == example(*ds, i).second);
  check_labels(*ds, 7);
  // 7 classes against a model of 3: some label is 3 or more.
  check_error([&] { check_labels(*ds, 3); }, {"dataset synthetic: label", "is outside [0, 3)"});
  // A huge dataset whose class count fits the model is not scanned.
  DatasetOptions o = opts(3);
  o.synthetic.size = int64_t(1) << 50;
  check_labels(*open_dataset("synthetic", "", "train", o), 7);
}
