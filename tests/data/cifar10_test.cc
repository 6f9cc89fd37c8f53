// CIFAR-10 binary batches written here in the real format (1 label byte + 3072 CHW bytes).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "data/datasets/dataset.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

constexpr int kRecord = 3073;

// Record `id`: label id % 10, pixel k = (id * 13 + k) mod 256.
Bytes record(int id) {
  Bytes r = {uint8_t(id % 10)};
  for (int k = 0; k < 3072; ++k) r.push_back(uint8_t((id * 13 + k) % 256));
  return r;
}

// data_batch_1..5 with 2, 1, 1, 1, 2 records (ids 0..6), test_batch with 3 (ids 100..102).
std::string make_batches(const std::string& name) {
  const std::string dir = fresh_dir(name) + "/cifar-10-batches-bin";
  std::filesystem::create_directories(dir);
  const int per_file[5] = {2, 1, 1, 1, 2};
  int id = 0;
  for (int f = 0; f < 5; ++f) {
    Bytes b;
    for (int k = 0; k < per_file[f]; ++k) {
      const Bytes r = record(id++);
      b.insert(b.end(), r.begin(), r.end());
    }
    write_bytes(dir + "/data_batch_" + std::to_string(f + 1) + ".bin", b);
  }
  Bytes t;
  for (int i = 100; i < 103; ++i) {
    const Bytes r = record(i);
    t.insert(t.end(), r.begin(), r.end());
  }
  write_bytes(dir + "/test_batch.bin", t);
  return dir;
}

// Examples are the record's pixels, HWC (the file stores CHW), with CIFAR-10's statistics.
void check_example(const Dataset& ds, int64_t i, int id) {
  CHECK(ds.normalization().mean == std::vector<double>{0.4914, 0.4822, 0.4465});
  CHECK(ds.normalization().std == std::vector<double>{0.2470, 0.2435, 0.2616});
  std::vector<uint8_t> img(3072);
  int64_t label = -1;
  ds.get(i, 0, img.data(), &label);
  CHECK(label == id % 10);
  const Bytes r = record(id);
  int bad = 0;
  for (int k = 0; k < 3072; ++k) bad += img[size_t((k % 1024) * 3 + k / 1024)] != r[size_t(k + 1)];
  CHECK_MESSAGE(bad == 0, "example ", i, ": ", bad, " pixels differ");
}

}  // namespace

TEST_CASE("cifar10: train concatenates data_batch_1..5 in order, test is test_batch") {
  const std::string dir = make_batches("c10_ok");
  auto train = open_dataset("cifar10", dir, "train");
  REQUIRE(train->size() == 7);
  CHECK(train->image_shape() == rt::Shape{3, 32, 32});
  CHECK(train->num_classes() == 10);
  for (int i = 0; i < 7; ++i) check_example(*train, i, i);
  auto test = open_dataset("cifar10", dir, "test");
  REQUIRE(test->size() == 3);
  for (int i = 0; i < 3; ++i) check_example(*test, i, 100 + i);
}

TEST_CASE("cifar10: the folder holding cifar-10-batches-bin works too") {
  const std::string dir = make_batches("c10_parent");
  auto test = open_dataset("cifar10", std::filesystem::path(dir).parent_path().string(), "test");
  CHECK(test->size() == 3);
}

TEST_CASE("cifar10: a size that is not a multiple of 3073 is refused, naming the file") {
  const std::string dir = make_batches("c10_size");
  Bytes b = read_bytes(dir + "/data_batch_4.bin");
  b.resize(b.size() - 100);
  write_bytes(dir + "/data_batch_4.bin", b);
  check_error([&] { open_dataset("cifar10", dir, "train"); },
              {dir + "/data_batch_4.bin", std::to_string(kRecord - 100) + " bytes", "multiple of 3073"});
  write_bytes(dir + "/test_batch.bin", Bytes{});
  check_error([&] { open_dataset("cifar10", dir, "test"); }, {dir + "/test_batch.bin", "0 bytes"});
}

TEST_CASE("cifar10: missing file and bad label") {
  const std::string dir = make_batches("c10_missing");
  std::filesystem::remove(dir + "/data_batch_3.bin");
  check_error([&] { open_dataset("cifar10", dir, "train"); },
              {dir + "/data_batch_3.bin", "not found", "data_batch_1.bin", "test_batch.bin",
               "its path is <folder>/cifar-10-batches-bin"});
  Bytes t = read_bytes(dir + "/test_batch.bin");
  t[size_t(kRecord)] = 10;  // label of record 1
  write_bytes(dir + "/test_batch.bin", t);
  check_error([&] { open_dataset("cifar10", dir, "test"); }, {dir + "/test_batch.bin", "record 1 has label 10"});
  check_error([&] { open_dataset("cifar10", dir + "/nope", "test"); }, {dir + "/nope", "not found"});
}
