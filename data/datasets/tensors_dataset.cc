// "tensors": a safetensors file with "images" (N, C, H, W; uint8 or float32) and "labels"
// (N; int64), e.g. written by numpy/PyTorch from any image folder. uint8 images are raw
// pixels, normalised (v / 255 - mean) / std with the options' mean/std on the model's
// device; float32 images are used as they are (already normalised by whoever wrote them).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <new>

#include "data/datasets/dataset_registry.h"
#include "data/datasets/u8_dataset.h"
#include "base/error.h"
#include "engine/io/safetensors.h"

namespace rt::data {

namespace {

class F32Dataset final : public Dataset {
 public:
  F32Dataset(Tensor images, std::vector<int64_t> labels, int64_t num_classes, std::string path)
      : images_(std::move(images)), labels_(std::move(labels)), num_classes_(num_classes), path_(std::move(path)) {}

  int64_t size() const override { return int64_t(labels_.size()); }
  Shape image_shape() const override { return {images_.size(1), images_.size(2), images_.size(3)}; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return "tensors"; }
  DType pixel_dtype() const override { return DType::f32; }
  void get(int64_t i, int64_t, void* chw, int64_t* label) const override {
    check_index("tensors", i, size());
    const int64_t n = images_.size(1) * images_.size(2) * images_.size(3);
    std::memcpy(chw, images_.data<float>() + i * n, size_t(n) * sizeof(float));
    *label = labels_[size_t(i)];
  }
  int64_t label(int64_t i) const override {
    check_index("tensors", i, size());
    return labels_[size_t(i)];
  }
  std::string location() const override { return path_; }

 private:
  Tensor images_;
  std::vector<int64_t> labels_;
  int64_t num_classes_;
  std::string path_;
};

// The class count (Note [Label range]): given, every label must be below it; derived,
// the largest label + 1, which must stay within kMaxDerivedClasses.
int64_t class_count(const std::vector<int64_t>& y, int64_t given, const std::string& path) {
  const std::string what = "tensors dataset '" + path + "'";
  if (given > 0) {
    check_label_range(y, given, what, detail::cat(", the ", given, " classes given"));
    return given;
  }
  check_label_range(y, kMaxDerivedClasses, what,
                    detail::cat(": labels are class indices 0..K-1 and, with no class count given, K is the ",
                                "largest label + 1, at most ", kMaxDerivedClasses,
                                " (a larger label is a corrupt file, or give the number of classes)"));
  return *std::max_element(y.begin(), y.end()) + 1;
}

// A file is used for any split; a folder must hold <split>.safetensors.
std::string resolve(const std::string& path, const std::string& split) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string file = (fs::path(path) / (split + ".safetensors")).string();
    RT_CHECK(fs::is_regular_file(file, ec), "tensors dataset: '", file, "' not found; expected the folder '", path,
             "' to hold train.safetensors and test.safetensors, or give the file itself as the path");
    return file;
  }
  RT_CHECK(fs::is_regular_file(path, ec), "tensors dataset: '", path, "' not found; expected a .safetensors ",
           "file with \"images\" (N, C, H, W) and \"labels\" (N), or a folder holding <split>.safetensors");
  return path;
}

std::unique_ptr<Dataset> open_tensors(const std::string& path_arg, const std::string& split,
                                      const DatasetOptions& opt) {
  const std::string path = resolve(path_arg, split);
  std::map<std::string, Tensor> t = load_safetensors(path);
  for (const char* key : {"images", "labels"})
    RT_CHECK(t.count(key), "tensors dataset '", path, "': no tensor \"", key, "\"; expected \"images\" ",
             "(N, C, H, W; U8 or F32) and \"labels\" (N; I64)");
  const Tensor& images = t["images"];
  const Tensor& labels = t["labels"];
  RT_CHECK(images.ndim() == 4 && images.numel() > 0, "tensors dataset '", path, "': \"images\" has shape ",
           shape_str(images.shape()), "; expected 4 non-zero dims (N, C, H, W): add a channel dim for grayscale");
  RT_CHECK(images.dtype() == DType::u8 || images.dtype() == DType::f32, "tensors dataset '", path,
           "': \"images\" is ", dtype_name(images.dtype()), "; expected u8 (raw pixels) or f32 (normalised)");
  RT_CHECK(labels.dtype() == DType::i64, "tensors dataset '", path, "': \"labels\" is ", dtype_name(labels.dtype()),
           "; expected i64 (e.g. numpy .astype(np.int64))");
  RT_CHECK(labels.ndim() == 1 && labels.size(0) == images.size(0), "tensors dataset '", path,
           "': \"labels\" has shape ", shape_str(labels.shape()), "; expected (", images.size(0),
           ") to match \"images\" ", shape_str(images.shape()));
  RT_CHECK(opt.num_classes >= 0, "tensors dataset: num_classes ", opt.num_classes, " must be >= 0 (0 = from labels)");

  std::vector<int64_t> y = labels.to_vector<int64_t>();
  const int64_t classes = class_count(y, opt.num_classes, path);

  const Shape chw = {images.size(1), images.size(2), images.size(3)};
  if (images.dtype() == DType::f32) {
    RT_CHECK(opt.mean.empty() && opt.std.empty(), "tensors dataset '", path, "': \"images\" is f32 and is used ",
             "as stored; mean/std apply to u8 images only: drop them or store raw u8 pixels");
    return std::make_unique<F32Dataset>(images, std::move(y), classes, path);
  }
  Normalization norm;
  if (!opt.mean.empty()) norm.mean = opt.mean;
  if (!opt.std.empty()) norm.std = opt.std;
  check_normalization(norm, chw[0], "tensors dataset '" + path + "'");
  AugmentOptions augment = opt.augment;
  augment.enabled = augment.enabled && split == "train";
  try {
    const uint8_t* p = images.data<uint8_t>();
    const std::vector<uint8_t> pixels(p, p + images.numel());
    return std::make_unique<U8Dataset>("tensors", chw, classes, pixels, std::move(y), norm, augment, path);
  } catch (const std::bad_alloc&) {
    // The file fit in memory, its two working copies (CHW, then HWC) did not.
    RT_FAIL("tensors dataset '", path, "': out of host memory copying the file's \"images\" ",
            images.str(), " (", images.nbytes(), " bytes; loading needs three times that); the file declares ",
            "more images than this machine can hold");
  }
}

}  // namespace

RT_REGISTER_DATASET("tensors", [](::rt::data::DatasetEntry& e) {
  e.order = 60;
  e.path_help = "a .safetensors file";
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    RT_CHECK(!path.empty(), "dataset tensors needs a path: a .safetensors file with \"images\" ",
             "(N,C,H,W) and \"labels\" (N), or a folder holding train.safetensors and ",
             "test.safetensors");
    return open_tensors(path, split, o);
  };
});

}  // namespace rt::data
