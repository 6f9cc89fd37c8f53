// Datasets: random-access image classification examples.
//
// An example is raw pixels, uint8 HWC (pixel_dtype() u8): batches of them leave the CPU
// as (N, H, W, C) bytes and are normalised with normalization() on the model's device
// (normalize_pixels), a quarter of the f32 bytes over PCIe. Only f32 "tensors" files give
// f32 CHW examples, already normalised (pixel_dtype() f32).
//
// A dataset carries its transform, like torchvision's `transform=`: training
// augmentation or evaluation resize/crop. The random choices for example i in epoch e
// come from (seed, e, i) alone (data/seed.h), so every worker thread builds the same
// example, in any order. Reads are const and thread-safe: the loader's workers share one
// instance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/transforms/augment.h"
#include "data/transforms/auto_augment.h"
#include "data/transforms/image_transforms.h"
#include "engine/tensor.h"

namespace rt::data {

// Per-channel mean and std of pixel / 255 (one value: every channel). The default leaves
// pixels at v / 255.
struct Normalization {
  std::vector<double> mean = {0.0};
  std::vector<double> std = {1.0};
};

// An example that cannot be read: a corrupt, truncated or non-image file. The loader
// skips it (and names it); anything else a dataset throws is a real error.
class BadExample : public Error {
 public:
  BadExample(const std::string& source, const std::string& what) : Error(what), source_(source) {}
  const std::string& source() const { return source_; }  // the file

 private:
  std::string source_;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape image_shape() const = 0;  // {C, H, W} of every example
  virtual int64_t num_classes() const = 0;
  virtual std::string name() const = 0;
  virtual DType pixel_dtype() const { return DType::u8; }
  // How u8 pixels become model inputs (ignored for f32 datasets).
  virtual Normalization normalization() const { return {}; }
  // Writes example i (0 <= i < size()) as drawn in `epoch`: u8 datasets H*W*C bytes
  // (HWC), f32 datasets C*H*W floats (CHW), and its label in [0, num_classes()). Throws
  // BadExample for an unreadable example, rt::Error for anything else.
  virtual void get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const = 0;
  // The label of example i alone, without reading its pixels: what get() writes.
  virtual int64_t label(int64_t i) const = 0;
  // Where the examples come from, for messages: the file or folder ("" when computed).
  virtual std::string location() const { return ""; }
  // A sharded dataset (read sequentially, Note [Shard order] in data/loading/sampler.h): the number
  // of examples in each shard, shard 0's being indices [0, n0), ...; empty otherwise.
  virtual std::vector<int64_t> shard_sizes() const { return {}; }

  // Bytes of one example (image_shape() of pixel_dtype()); every dataset checks at open
  // time that they fit in int64.
  int64_t example_bytes() const { return shape_nbytes(image_shape(), pixel_dtype()); }
};

// Note [Label range]
// Every dataset checks its labels against its own class count when it opens (labels in
// [0, num_classes()), the first bad one named with its file, index and value), so training
// never meets a label the loss cannot take. A model may have another class count
// (--num-classes); check_labels then checks the dataset's labels against it, before
// training starts. Throws rt::Error naming the dataset's location, the first example whose
// label is outside [0, num_classes), its value and the range.
void check_labels(const Dataset& d, int64_t num_classes);

// The "synthetic" dataset: random examples computed on demand (nothing is stored).
struct SyntheticOptions {
  int64_t size = 1024;                // examples per split
  Shape image_shape = {3, 32, 32};    // {C, H, W}
  int64_t num_classes = 10;
  uint64_t seed = 0;
};

// Training-time sizes of the ImageNet pipeline (torchvision's reference-script defaults).
struct ImageFolderOptions {
  int train_crop_size = 224;   // RandomResizedCrop output
  int val_resize_size = 256;   // evaluation: shorter side resized to this ...
  int val_crop_size = 224;     // ... then centre-cropped to this
  uint64_t seed = 0;           // augmentation randomness
  Interpolation interpolation = Interpolation::bilinear;  // of the crop and resize (--interpolation)
  AutoAugmentOptions auto_augment;  // training: the policy after the crop and flip
  std::string cache_dir;       // file-list cache ("" = the default, see data/formats/image_folder.h)
  bool use_cache = true;
  // An image whose header claims more pixels (width x height) is refused before it is
  // decoded (--max-image-pixels; 0 = no limit; PIL's default): Note [Decoded-pixel limit].
  int64_t max_image_pixels = 178956970;
};

// "webdataset": ImageNet as tar shards (`ringtape pack`; data/datasets/webdataset.cc). The image
// pipeline is ImageFolderOptions'.
struct WebDatasetOptions {
  // The test split's shards (a folder's val-*.tar, a pattern or a .tar); "" = the data
  // path's val-*.tar when it is a folder, else the val-*.tar beside its shards.
  std::string val_path;
  // Bytes of each shard the reader asks the kernel to read ahead of the samples it decodes
  // (posix_fadvise WILLNEED), so that reads stream in large sequential requests.
  int64_t readahead_bytes = int64_t(64) << 20;
};

struct DatasetOptions {
  SyntheticOptions synthetic;
  // In-memory u8 datasets (fashion-mnist, cifar10, u8 tensors), split "train" only:
  // random crop from the zero-padded image and flip.
  AugmentOptions augment;
  ImageFolderOptions image_folder;
  WebDatasetOptions webdataset;
  // "tensors" with uint8 images: per-channel mean and std applied after /255. Empty: no
  // normalisation; one value: the same for every channel; else one per channel.
  std::vector<double> mean;
  std::vector<double> std;
  // "tensors": number of classes (--num-classes: every label must be below it); 0 = the
  // largest label + 1, at most kMaxDerivedClasses.
  int64_t num_classes = 0;
};

// A class count derived from labels (a "tensors" file without num_classes) is at most this:
// more than any classification dataset has (ImageNet-21k: 21841 classes), so a larger label
// is a corrupt file, not a class. A real larger count is given explicitly (--num-classes).
inline constexpr int64_t kMaxDerivedClasses = int64_t(1) << 24;

// Where `name` looks when no data path is given ("" when it needs one).
std::string default_data_path(const std::string& name);

// name: a registered dataset (data/datasets/dataset_registry.h: fashion-mnist, cifar10, imagenet,
// webdataset, synthetic, tensors and any a program registers); split: "train" | "test"
// (imagenet: the train and val folders). data_path: a folder (fashion-mnist, cifar10,
// imagenet), a .safetensors file or a folder holding <split>.safetensors (tensors),
// ignored by synthetic; "" = default_data_path(name).
// Throws rt::Error naming the path, what was expected there and how to fix it, or listing the
// registered names for an unknown one.
std::unique_ptr<Dataset> open_dataset(const std::string& name, const std::string& data_path, const std::string& split,
                                      const DatasetOptions& opt = {});

}  // namespace rt::data
