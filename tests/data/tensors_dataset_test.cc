// The "tensors" dataset: safetensors files written with rt::save_safetensors.
#include <doctest/doctest.h>

#include <cmath>

#include "data/datasets/dataset.h"
#include "engine/io/safetensors.h"
#include "engine/random.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;
using rt::DType;
using rt::Tensor;

namespace {

// 4 images of 2x2x3 with pixel values (i * 12 + k) * 5 and labels 3, 0, 2, 1.
Tensor u8_images() {
  std::vector<uint8_t> v;
  for (int k = 0; k < 48; ++k) v.push_back(uint8_t(k * 5));
  return Tensor::from_vector(v, {4, 2, 2, 3});
}
Tensor labels(std::vector<int64_t> v = {3, 0, 2, 1}) { return Tensor::from_vector(v, {int64_t(v.size())}); }

std::string write(const std::string& dir, const std::string& file, const std::map<std::string, Tensor>& t) {
  const std::string path = dir + "/" + file;
  rt::save_safetensors(path, t);
  return path;
}

}  // namespace

TEST_CASE("tensors: u8 images are raw HWC pixels with the options' normalisation") {
  const std::string path = write(fresh_dir("t_u8"), "d.safetensors", {{"images", u8_images()}, {"labels", labels()}});
  DatasetOptions o;
  o.mean = {0.5, 0.25};
  o.std = {0.5, 2.0};
  auto ds = open_dataset("tensors", path, "train", o);
  REQUIRE(ds->size() == 4);
  CHECK(ds->image_shape() == rt::Shape{2, 2, 3});
  CHECK(ds->num_classes() == 4);  // largest label + 1
  CHECK(ds->normalization().mean == o.mean);
  CHECK(ds->normalization().std == o.std);
  std::vector<uint8_t> img(12);
  for (int i = 0; i < 4; ++i) {
    int64_t label = -1;
    ds->get(i, 0, img.data(), &label);
    CHECK(label == std::vector<int64_t>{3, 0, 2, 1}[size_t(i)]);
    // Stored CHW (k = c * 6 + p), served HWC (p * 2 + c).
    for (int k = 0; k < 12; ++k) CHECK(img[size_t((k % 6) * 2 + k / 6)] == uint8_t((i * 12 + k) * 5));
  }
  // No mean/std: v / 255 (mean 0, std 1).
  auto plain = open_dataset("tensors", path, "test");
  CHECK(plain->normalization().mean == std::vector<double>{0.0});
  CHECK(plain->normalization().std == std::vector<double>{1.0});
}

TEST_CASE("tensors: f32 images are used as stored; num_classes from the options") {
  rt::Generator g(4);
  const Tensor images = rt::randn({3, 1, 2, 2}, g);
  const std::string path =
      write(fresh_dir("t_f32"), "d.safetensors", {{"images", images}, {"labels", labels({0, 1, 0})}});
  DatasetOptions o;
  o.num_classes = 10;
  auto ds = open_dataset("tensors", path, "train", o);
  CHECK(ds->num_classes() == 10);
  CHECK(ds->pixel_dtype() == DType::f32);
  std::vector<float> img(4);
  int64_t label;
  ds->get(2, 0, img.data(), &label);
  CHECK(label == 0);
  const std::vector<float> all = images.to_vector<float>();
  CHECK(img == std::vector<float>(all.begin() + 8, all.end()));
  o.mean = {0.5};
  check_error([&] { open_dataset("tensors", path, "train", o); }, {path, "f32", "mean/std apply to u8"});
}

TEST_CASE("tensors: a folder holds <split>.safetensors") {
  const std::string dir = fresh_dir("t_dir");
  write(dir, "train.safetensors", {{"images", u8_images()}, {"labels", labels()}});
  CHECK(open_dataset("tensors", dir, "train")->size() == 4);
  check_error([&] { open_dataset("tensors", dir, "test"); }, {dir + "/test.safetensors", "not found"});
  check_error([&] { open_dataset("tensors", dir + "/x.safetensors", "test"); }, {dir + "/x.safetensors", "not found"});
}

TEST_CASE("tensors: wrong names, shapes, dtypes and labels are refused clearly") {
  const std::string dir = fresh_dir("t_bad");
  auto err = [&](const std::map<std::string, Tensor>& t, const std::vector<std::string>& parts,
                 DatasetOptions o = {}) {
    const std::string path = write(dir, "bad.safetensors", t);
    std::vector<std::string> all = parts;
    all.push_back(path);
    check_error([&] { open_dataset("tensors", path, "train", o); }, all);
  };
  err({{"images", u8_images()}}, {"no tensor \"labels\""});
  err({{"x", u8_images()}, {"labels", labels()}}, {"no tensor \"images\""});
  err({{"images", u8_images().view({4, 12})}, {"labels", labels()}}, {"[4, 12]", "(N, C, H, W)"});
  err({{"images", u8_images().to(DType::f64)}, {"labels", labels()}}, {"f64", "u8", "f32"});
  err({{"images", u8_images()}, {"labels", labels().to(DType::i32)}}, {"i32", "expected i64"});
  err({{"images", u8_images()}, {"labels", labels({1, 2, 3})}}, {"[3]", "expected (4)"});
  err({{"images", u8_images()}, {"labels", labels({1, -2, 3, 0})}}, {"label -2 of example 1"});
  DatasetOptions o;
  o.num_classes = 3;
  err({{"images", u8_images()}, {"labels", labels()}}, {"label 3 of example 0", "[0, 3)"}, o);
  o = {};
  o.mean = {0.1, 0.2, 0.3};
  err({{"images", u8_images()}, {"labels", labels()}}, {"mean has 3 values", "one per channel (2)"}, o);
  o = {};
  o.std = {0.0};
  err({{"images", u8_images()}, {"labels", labels()}}, {"std > 0"}, o);
}

// Labels are checked when the file opens (Note [Label range]), against the given class
// count or the derived one (largest label + 1, at most kMaxDerivedClasses), and
// check_labels checks a dataset against a model's class count before training starts.
TEST_CASE("tensors: a label of 2^62 is refused at open time, not turned into 2^62 + 1 classes") {
  const std::string dir = fresh_dir("t_label_huge");
  const int64_t huge = int64_t(1) << 62;
  const std::string path = write(dir, "d.safetensors", {{"images", u8_images()}, {"labels", labels({0, 1, huge, 3})}});
  check_error([&] { open_dataset("tensors", path, "train"); },
              {"tensors dataset '" + path + "'", "label 4611686018427387904 of example 2 is outside [0, 16777216)",
               "largest label + 1", "give the number of classes"});
  DatasetOptions o;
  o.num_classes = 10;
  check_error([&] { open_dataset("tensors", path, "train", o); },
              {path, "label 4611686018427387904 of example 2 is outside [0, 10)", "the 10 classes given"});
  // f32 images go through the same check.
  const std::string f32 = write(dir, "f.safetensors",
                                {{"images", u8_images().to(DType::f32)}, {"labels", labels({0, huge, 1, 2})}});
  check_error([&] { open_dataset("tensors", f32, "train"); }, {f32, "label 4611686018427387904 of example 1"});
  // The largest derivable count itself is fine.
  const std::string edge =
      write(dir, "e.safetensors", {{"images", u8_images()}, {"labels", labels({0, kMaxDerivedClasses - 1, 1, 2})}});
  CHECK(open_dataset("tensors", edge, "train")->num_classes() == kMaxDerivedClasses);
}

TEST_CASE("tensors: label 5000 against 10 classes fails before training, naming the file and the example") {
  const std::string dir = fresh_dir("t_label_5000");
  const std::string path = write(dir, "d.safetensors", {{"images", u8_images()}, {"labels", labels({0, 1, 5000, 3})}});
  // Given a class count (--num-classes 10): the dataset refuses to open.
  DatasetOptions o;
  o.num_classes = 10;
  check_error([&] { open_dataset("tensors", path, "train", o); },
              {"tensors dataset '" + path + "'", "label 5000 of example 2 is outside [0, 10)"});
  // Derived: 5001 classes; a model of 10 classes is refused by check_labels, one of 5001
  // or more is fine.
  auto ds = open_dataset("tensors", path, "train");
  CHECK(ds->num_classes() == 5001);
  CHECK(ds->location() == path);
  CHECK(ds->label(2) == 5000);
  check_error([&] { check_labels(*ds, 10); },
              {"dataset tensors ('" + path + "')", "label 5000 of example 2 is outside [0, 10)",
               "raise the number of classes"});
  check_labels(*ds, 5001);
  check_labels(*ds, 100000);
  check_error([&] { check_labels(*ds, 0); }, {"must be positive"});
  // A model with fewer classes than the dataset declares is fine when no label reaches them.
  auto small = open_dataset("tensors", write(dir, "s.safetensors", {{"images", u8_images()}, {"labels", labels()}}),
                            "train");
  CHECK(small->num_classes() == 4);
  check_labels(*small, 4);
  check_error([&] { check_labels(*small, 3); }, {"label 3 of example 0 is outside [0, 3)"});
}
