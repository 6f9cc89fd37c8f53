// The real Fashion-MNIST, when Debian's dataset-fashion-mnist is installed: sizes, label
// counts, and the normalisation constants against the training set's pixel statistics.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "data/datasets/dataset.h"
#include "data/formats/idx.h"

using namespace rt::data;

namespace {

const std::string kDir = "/usr/share/datasets/fashion-mnist";

bool installed() {
  if (std::filesystem::exists(kDir + "/train-images-idx3-ubyte.gz")) return true;
  std::printf("SKIPPED: %s not found (apt-get install dataset-fashion-mnist to run this test)\n", kDir.c_str());
  return false;
}

}  // namespace

TEST_CASE("real Fashion-MNIST: 60000 / 10000 examples of 1x28x28, 6000 / 1000 per class") {
  if (!installed()) return;
  for (auto [split, n] : {std::pair<const char*, int64_t>{"train", 60000}, {"test", 10000}}) {
    auto ds = open_dataset("fashion-mnist", "", split);  // "" = the default path
    REQUIRE(ds->size() == n);
    CHECK(ds->image_shape() == rt::Shape{1, 28, 28});
    std::array<int64_t, 10> counts{};
    std::vector<uint8_t> img(784);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t label = -1;
      ds->get(i, 0, img.data(), &label);
      REQUIRE(label >= 0);
      REQUIRE(label < 10);
      ++counts[size_t(label)];
      for (uint8_t v : img) sum += v;
    }
    for (int c = 0; c < 10; ++c) CHECK_MESSAGE(counts[size_t(c)] == n / 10, split, " class ", c);
    // The training set's mean pixel is the normalisation mean.
    if (std::string(split) == "train")
      CHECK(std::abs(sum / (double(n) * 784 * 255) - ds->normalization().mean[0]) < 1e-4);
  }
}

TEST_CASE("real Fashion-MNIST: mean 0.2860 and std 0.3530 are the training set's pixel statistics") {
  if (!installed()) return;
  const IdxArray images = read_idx_u8(kDir + "/train-images-idx3-ubyte.gz", 3, "images");
  std::array<int64_t, 256> hist{};
  for (uint8_t v : images.data) ++hist[v];
  double n = 0, s = 0, s2 = 0;
  for (int v = 0; v < 256; ++v) {
    const double x = v / 255.0;
    n += double(hist[size_t(v)]);
    s += double(hist[size_t(v)]) * x;
    s2 += double(hist[size_t(v)]) * x * x;
  }
  const double mean = s / n, std = std::sqrt(s2 / n - mean * mean);
  INFO("mean ", mean, " std ", std);
  // The constants are rounded to 4 decimals.
  CHECK(std::abs(mean - 0.2860) < 1e-4);
  CHECK(std::abs(std - 0.3530) < 1e-4);
}
