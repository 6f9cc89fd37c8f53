// Fashion-MNIST from idx files, as Debian's package dataset-fashion-mnist installs them
// (/usr/share/datasets/fashion-mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz);
// unpacked files without ".gz" work too.
#include <filesystem>

#include "data/datasets/dataset_registry.h"
#include "data/formats/idx.h"
#include "data/datasets/u8_dataset.h"
#include "base/error.h"

namespace rt::data {

namespace {

constexpr int64_t kClasses = 10;
// The training split's pixel statistics (all 60000 x 28 x 28 values scaled to [0, 1]):
// mean 0.28604, std 0.35302. Both splits use them, like the usual PyTorch recipes;
// data_test checks them against the installed files.
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;

constexpr const char* kInstallHint =
    "install Debian's package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or give the path of its "
    "files";

// "<dir>/<base>.gz" if present, else "<dir>/<base>".
std::string find_file(const std::string& dir, const std::string& prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  RT_CHECK(fs::is_directory(dir, ec), "fashion-mnist: data path '", dir, "' is not a readable folder; expected ",
           "it to hold train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and ",
           "t10k-labels-idx1-ubyte.gz (or the same without .gz); ", kInstallHint);
  for (const std::string& name : {prefix + ".gz", prefix}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p, ec)) return p.string();
  }
  RT_FAIL("fashion-mnist: '", (fs::path(dir) / (prefix + ".gz")).string(), "' not found (nor without .gz); expected ",
          dir, " to hold {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz; ", kInstallHint);
}

std::unique_ptr<Dataset> open_fashion_mnist(const std::string& dir, const std::string& split,
                                            const AugmentOptions& augment) {
  const std::string stem = split == "train" ? "train" : "t10k";
  const std::string images_path = find_file(dir, stem + "-images-idx3-ubyte");
  const std::string labels_path = find_file(dir, stem + "-labels-idx1-ubyte");
  IdxArray images = read_idx_u8(images_path, 3, "images");
  IdxArray labels = read_idx_u8(labels_path, 1, "labels");
  RT_CHECK(images.dims[0] == labels.dims[0], "fashion-mnist: '", images_path, "' holds ", images.dims[0],
           " images but '", labels_path, "' holds ", labels.dims[0], " labels; both files must come from the same ",
           "split (", stem, "); reinstall or fetch them again");
  std::vector<int64_t> y(labels.data.size());
  for (size_t i = 0; i < y.size(); ++i) {
    RT_CHECK(labels.data[i] < kClasses, "fashion-mnist: '", labels_path, "': label ", int(labels.data[i]),
             " of example ", i, " is outside [0, ", kClasses, "); the file is damaged");
    y[i] = labels.data[i];
  }
  return std::make_unique<U8Dataset>("fashion-mnist", Shape{1, images.dims[1], images.dims[2]}, kClasses,
                                     images.data, std::move(y), Normalization{{kMean}, {kStd}}, augment, dir);
}

}  // namespace

// 28-px images: padding 2 for the random crop.
RT_REGISTER_DATASET("fashion-mnist", [](::rt::data::DatasetEntry& e) {
  e.order = 10;
  e.default_path = "/usr/share/datasets/fashion-mnist";
  e.augment_pad = 2;
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    return open_fashion_mnist(path, split, o.augment);
  };
});

}  // namespace rt::data
