// CIFAR-10, binary version (cifar-10-batches-bin): data_batch_1..5.bin (train) and
// test_batch.bin (test), each a sequence of 3073-byte records: a label byte, then a
// 32x32 image as 1024 red, 1024 green, 1024 blue bytes (CHW, rows top to bottom).
#include <filesystem>
#include <fstream>

#include "data/datasets/dataset_registry.h"
#include "data/datasets/u8_dataset.h"
#include "base/error.h"

namespace rt::data {

namespace {

constexpr int64_t kClasses = 10;
constexpr int64_t kImageBytes = 3 * 32 * 32;
constexpr int64_t kRecordBytes = 1 + kImageBytes;
// The training split's per-channel pixel statistics (RGB, values in [0, 1]), the values
// the common PyTorch CIFAR-10 recipes use.
const std::vector<double> kMean = {0.4914, 0.4822, 0.4465};
const std::vector<double> kStd = {0.2470, 0.2435, 0.2616};

std::vector<std::string> file_names(const std::string& split) {
  if (split == "test") return {"test_batch.bin"};
  std::vector<std::string> names;
  for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  return names;
}

std::unique_ptr<Dataset> open_cifar10(const std::string& dir_arg, const std::string& split,
                                      const AugmentOptions& augment) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Accept the folder the archive unpacks into as well as the folder that holds it.
  fs::path dir = dir_arg;
  if (!fs::exists(dir / "test_batch.bin", ec) && fs::exists(dir / "cifar-10-batches-bin", ec))
    dir /= "cifar-10-batches-bin";
  const std::vector<std::string> names = file_names(split);
  std::vector<uint8_t> pixels;
  std::vector<int64_t> labels;
  for (const std::string& name : names) {
    const std::string path = (dir / name).string();
    RT_CHECK(fs::is_regular_file(path, ec), "cifar10: '", path, "' not found; expected '", dir.string(),
             "' to hold data_batch_1.bin .. data_batch_5.bin and test_batch.bin (the binary version, ",
             "cifar-10-binary.tar.gz, unpacked); its path is <folder>/cifar-10-batches-bin");
    const uintmax_t bytes = fs::file_size(path, ec);
    RT_CHECK(!ec && bytes > 0 && bytes % kRecordBytes == 0, "cifar10: '", path, "' is ", ec ? 0 : bytes,
             " bytes; expected a positive multiple of ", kRecordBytes,
             " (1 label byte + 3x32x32 image bytes per record): a truncated or wrong file (the python or matlab ",
             "version?); fetch the binary version again");
    std::ifstream in(path, std::ios::binary);
    RT_CHECK(in, "cifar10: cannot open '", path, "' for reading; check its permissions");
    const int64_t records = int64_t(bytes) / kRecordBytes;
    std::vector<uint8_t> raw(static_cast<size_t>(bytes));
    in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(bytes));
    RT_CHECK(in.gcount() == std::streamsize(bytes), "cifar10: reading '", path, "' stopped after ", in.gcount(),
             " of ", bytes, " bytes; check the disk and fetch the file again");
    pixels.reserve(pixels.size() + size_t(records * kImageBytes));
    for (int64_t r = 0; r < records; ++r) {
      const uint8_t* rec = &raw[size_t(r * kRecordBytes)];
      RT_CHECK(rec[0] < kClasses, "cifar10: '", path, "': record ", r, " has label ", int(rec[0]),
               ", outside [0, 10); the file is damaged or not CIFAR-10 (CIFAR-100's records are 3074 bytes)");
      labels.push_back(rec[0]);
      pixels.insert(pixels.end(), rec + 1, rec + kRecordBytes);
    }
  }
  return std::make_unique<U8Dataset>("cifar10", Shape{3, 32, 32}, kClasses, pixels, std::move(labels),
                                     Normalization{kMean, kStd}, augment, dir.string());
}

}  // namespace

RT_REGISTER_DATASET("cifar10", [](::rt::data::DatasetEntry& e) {
  e.order = 20;
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    RT_CHECK(!path.empty(), "dataset cifar10 has no default location: download the binary ",
             "version (cifar-10-binary.tar.gz), unpack it and give the path ",
             "<folder>/cifar-10-batches-bin");
    return open_cifar10(path, split, o.augment);
  };
});

}  // namespace rt::data
