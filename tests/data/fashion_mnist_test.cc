// Fashion-MNIST from small idx files written here: gzip and plain, and every way such a
// file can be wrong.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "data/datasets/dataset.h"
#include "data/formats/gz_reader.h"
#include "data/formats/idx.h"
#include "tests/data/data_test_util.h"

namespace fs = std::filesystem;
using namespace rt::data;
using namespace rt::data::test;

namespace {

// n images of r x c with pixel (i, k) = (7 * i + k) mod 256, labels i mod 10.
Bytes pixels(int n, int r, int c) {
  Bytes p;
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < r * c; ++k) p.push_back(uint8_t((7 * i + k) % 256));
  return p;
}
Bytes labels(int n) {
  Bytes l;
  for (int i = 0; i < n; ++i) l.push_back(uint8_t(i % 10));
  return l;
}

// A folder with the four files of a Fashion-MNIST install: train (gzip) and t10k (plain).
std::string make_install(const std::string& name, int n_train = 5, int n_test = 3) {
  const std::string dir = fresh_dir(name);
  write_gz(dir + "/train-images-idx3-ubyte.gz", idx_bytes({uint32_t(n_train), 4, 3}, pixels(n_train, 4, 3)));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_bytes({uint32_t(n_train)}, labels(n_train)));
  write_bytes(dir + "/t10k-images-idx3-ubyte", idx_bytes({uint32_t(n_test), 4, 3}, pixels(n_test, 4, 3)));
  write_bytes(dir + "/t10k-labels-idx1-ubyte", idx_bytes({uint32_t(n_test)}, labels(n_test)));
  return dir;
}

void check_split(const std::string& dir, const std::string& split, int n) {
  auto ds = open_dataset("fashion-mnist", dir, split);
  REQUIRE(ds->size() == n);
  CHECK(ds->image_shape() == rt::Shape{1, 4, 3});
  CHECK(ds->num_classes() == 10);
  CHECK(ds->name() == "fashion-mnist");
  CHECK(ds->normalization().mean == std::vector<double>{0.2860});
  CHECK(ds->normalization().std == std::vector<double>{0.3530});
  const Bytes want = pixels(n, 4, 3);
  std::vector<uint8_t> img(12);
  for (int i = 0; i < n; ++i) {
    int64_t label = -1;
    ds->get(i, 0, img.data(), &label);
    CHECK(label == i % 10);
    CHECK(Bytes(img.begin(), img.end()) == Bytes(want.begin() + i * 12, want.begin() + (i + 1) * 12));
  }
}

}  // namespace

TEST_CASE("fashion-mnist reads gzip (train) and plain (t10k) idx files") {
  const std::string dir = make_install("fm_ok");
  check_split(dir, "train", 5);
  check_split(dir, "test", 3);
}

TEST_CASE("the .gz file wins over a plain file of the same name") {
  const std::string dir = make_install("fm_both");
  // A broken plain copy next to the good .gz must not be read.
  write_bytes(dir + "/train-images-idx3-ubyte", Bytes{1, 2, 3});
  check_split(dir, "train", 5);
}

TEST_CASE("missing path: names the folder, the expected files and the fix") {
  const std::string dir = fresh_dir("fm_missing") + "/nowhere";
  check_error([&] { open_dataset("fashion-mnist", dir, "train"); },
              {dir, "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
               "apt-get install dataset-fashion-mnist", "give the path of its files"});
}

TEST_CASE("folder without the split's files: names the missing file") {
  const std::string dir = make_install("fm_nolabels");
  fs::remove(dir + "/t10k-labels-idx1-ubyte");
  check_error([&] { open_dataset("fashion-mnist", dir, "test"); },
              {dir + "/t10k-labels-idx1-ubyte.gz", "not found", "dataset-fashion-mnist"});
  // The other split is still fine.
  check_split(dir, "train", 5);
}

TEST_CASE("wrong magic: a labels file where images belong") {
  const std::string dir = make_install("fm_magic");
  fs::copy_file(dir + "/t10k-labels-idx1-ubyte", dir + "/t10k-images-idx3-ubyte",
                fs::copy_options::overwrite_existing);
  check_error([&] { open_dataset("fashion-mnist", dir, "test"); },
              {dir + "/t10k-images-idx3-ubyte", "0x00000801", "expected 0x00000803", "images"});
}

TEST_CASE("wrong element type and garbage files") {
  const std::string dir = fresh_dir("fm_types");
  Bytes floats = idx_bytes({2}, Bytes(8, 0));
  floats[2] = 0x0d;  // float elements
  write_bytes(dir + "/f", floats);
  check_error([&] { read_idx_u8(dir + "/f", 1, "labels"); }, {dir + "/f", "0x00000d01", "expected 0x00000801"});
  write_bytes(dir + "/text", Bytes{'h', 'e', 'l', 'l', 'o', '\n'});
  check_error([&] { read_idx_u8(dir + "/text", 1, "labels"); }, {dir + "/text", "magic number"});
  write_bytes(dir + "/empty", Bytes{});
  check_error([&] { read_idx_u8(dir + "/empty", 3, "images"); }, {dir + "/empty", "0 bytes long"});
  write_bytes(dir + "/zero_dim", idx_bytes({0, 28, 28}, {}));
  check_error([&] { read_idx_u8(dir + "/zero_dim", 3, "images"); }, {dir + "/zero_dim", "dimension 0 is 0"});
  write_bytes(dir + "/short_header", Bytes{0, 0, 8, 3, 0, 0, 0, 5, 0, 0});
  check_error([&] { read_idx_u8(dir + "/short_header", 3, "images"); }, {"truncated inside its header"});
}

TEST_CASE("truncated plain and gzip files, extra bytes, corrupt gzip data") {
  const std::string dir = fresh_dir("fm_trunc");
  const Bytes good = idx_bytes({50, 4, 3}, pixels(50, 4, 3));

  Bytes cut(good.begin(), good.end() - 7);
  write_bytes(dir + "/plain", cut);
  check_error([&] { read_idx_u8(dir + "/plain", 3, "images"); },
              {dir + "/plain", "truncated", "600 bytes", "593"});

  write_gz(dir + "/full.gz", good);
  REQUIRE(read_idx_u8(dir + "/full.gz", 3, "images").data == pixels(50, 4, 3));
  const Bytes gz = read_bytes(dir + "/full.gz");
  write_bytes(dir + "/cut.gz", Bytes(gz.begin(), gz.begin() + long(gz.size() / 2)));
  check_error([&] { read_idx_u8(dir + "/cut.gz", 3, "images"); }, {dir + "/cut.gz"});
  // Only the 8-byte trailer (CRC, length) missing: all data decodes, the end check fails.
  write_bytes(dir + "/notrailer.gz", Bytes(gz.begin(), gz.end() - 8));
  check_error([&] { read_idx_u8(dir + "/notrailer.gz", 3, "images"); }, {dir + "/notrailer.gz", "fetch the file"});
  // Read through GzReader without probing past the data: the missing trailer still shows.
  {
    rt::data::GzReader r(dir + "/notrailer.gz");
    Bytes all(good.size());
    check_error([&] { r.read(all.data(), all.size()); }, {dir + "/notrailer.gz", "unexpected end of file"});
  }
  Bytes bad = gz;
  bad[bad.size() - 6] ^= 0xff;  // the CRC no longer matches
  write_bytes(dir + "/crc.gz", bad);
  check_error([&] { read_idx_u8(dir + "/crc.gz", 3, "images"); }, {dir + "/crc.gz"});

  Bytes extra = good;
  extra.push_back(0);
  write_gz(dir + "/extra.gz", extra);
  check_error([&] { read_idx_u8(dir + "/extra.gz", 3, "images"); }, {dir + "/extra.gz", "more data"});
}

TEST_CASE("images and labels must agree in count, labels must be < 10") {
  const std::string dir = make_install("fm_count");
  write_bytes(dir + "/t10k-labels-idx1-ubyte", idx_bytes({2}, labels(2)));
  check_error([&] { open_dataset("fashion-mnist", dir, "test"); }, {"3 images", "2 labels"});
  write_bytes(dir + "/t10k-labels-idx1-ubyte", idx_bytes({3}, Bytes{0, 10, 1}));
  check_error([&] { open_dataset("fashion-mnist", dir, "test"); },
              {dir + "/t10k-labels-idx1-ubyte", "label 10 of example 1"});
}

TEST_CASE("open_dataset: fashion-mnist is the default path; unknown names and splits") {
  CHECK(default_data_path("fashion-mnist") == "/usr/share/datasets/fashion-mnist");
  check_error([] { open_dataset("mnist", "", "train"); }, {"unknown dataset 'mnist'", "fashion-mnist, cifar10, imagenet"});
  check_error([] { open_dataset("synthetic", "", "val"); }, {"split 'val'", "\"train\" or \"test\""});
  check_error([] { open_dataset("cifar10", "", "train"); }, {"cifar10", "give the path <folder>/cifar-10-batches-bin"});
  check_error([] { open_dataset("tensors", "", "train"); }, {"tensors", "needs a path"});
}

TEST_CASE("example index out of range") {
  auto ds = open_dataset("fashion-mnist", make_install("fm_range"), "test");
  std::vector<uint8_t> img(12);
  int64_t label;
  check_error([&] { ds->get(3, 0, img.data(), &label); }, {"index 3", "[0, 3)"});
  check_error([&] { ds->get(-1, 0, img.data(), &label); }, {"index -1"});
}
