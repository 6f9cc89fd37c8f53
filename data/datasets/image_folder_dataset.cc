// "imagenet": ImageNet-1k (or any ImageFolder tree) decoded from its files on demand.
//
//   DIR/train/<wnid>/*.JPEG      training split: RandomResizedCrop + horizontal flip
//   DIR/val/<wnid>/*.JPEG        evaluation split: Resize(256) + CenterCrop(224)
//   DIR/val/*.JPEG + LOC_val_solution.csv (in DIR or DIR/val): the flat validation layout
//
// Class indices are the positions of the train split's sorted folder names (torchvision's
// ImageFolder), so labels agree with PyTorch-trained weights; validation folders are
// mapped by name to those indices. Examples are RGB uint8 HWC; the ImageNet mean/std are
// applied on the model's device.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "data/datasets/dataset_registry.h"
#include "data/datasets/imagenet_common.h"
#include "data/formats/image_folder.h"
#include "data/transforms/image_transforms.h"
#include "data/codecs/jpeg_decode.h"
#include "data/codecs/png_decode.h"
#include "data/datasets/u8_dataset.h"
#include "base/error.h"

namespace rt::data {

namespace {

namespace fs = std::filesystem;

const char* const kLayout =
    "expected ImageNet in the ImageFolder layout: DIR/train/<wnid>/*.JPEG and DIR/val/<wnid>/*.JPEG (or the flat "
    "DIR/val/*.JPEG with DIR/LOC_val_solution.csv)";

// A whole file into `buf` (reused per thread). Unreadable or empty: BadExample.
void read_file(const std::string& path, std::vector<uint8_t>& buf) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) throw BadExample(path, path + ": cannot open (" + std::strerror(errno) + ")");
  buf.clear();
  uint8_t chunk[1 << 16];
  for (;;) {
    const size_t n = std::fread(chunk, 1, sizeof chunk, f.get());
    buf.insert(buf.end(), chunk, chunk + n);
    if (n < sizeof chunk) break;
  }
  if (std::ferror(f.get())) throw BadExample(path, path + ": read error");
  if (buf.empty()) throw BadExample(path, path + ": empty file (0 bytes)");
}

}  // namespace

void check_image_pixels(int64_t width, int64_t height, int64_t limit, const std::string& source) {
  if (limit <= 0 || width * height <= limit) return;
  RT_FAIL(source, ": the image's header claims ", width, "x", height, " = ", width * height,
          " pixels, more than the limit of ", limit, " (--max-image-pixels, PIL's MAX_IMAGE_PIXELS); a corrupt ",
          "header or a decompression bomb. If the image is real, raise the limit (--max-image-pixels ",
          width * height, ", or 0 for none)");
}

std::pair<int64_t, int64_t> encoded_image_size(std::span<const uint8_t> bytes, const std::string& source) {
  if (is_png(bytes)) {
    // The IHDR chunk comes first: 8-byte signature, 4-byte length, "IHDR", then width and
    // height as big-endian 32-bit numbers (PNG spec, 11.2.2).
    RT_CHECK(bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0, source,
             ": a PNG whose header is truncated or does not start with IHDR");
    auto be32 = [&](size_t at) {
      return int64_t(bytes[at]) << 24 | int64_t(bytes[at + 1]) << 16 | int64_t(bytes[at + 2]) << 8 | bytes[at + 3];
    };
    return {be32(16), be32(20)};
  }
  const ImageInfo info = jpeg_info(bytes, source);
  return {info.width, info.height};
}

void imagenet_example(std::span<const uint8_t> bytes, const std::string& source, bool train,
                      const ImageFolderOptions& opt, int64_t i, int64_t epoch, uint8_t* out) {
  try {
    if (opt.max_image_pixels > 0) {  // Note [Decoded-pixel limit]
      const auto [w, h] = encoded_image_size(bytes, source);
      check_image_pixels(w, h, opt.max_image_pixels, source);
    }
    if (train) {
      Generator g = example_generator(opt.seed, epoch, i);
      // Flip first, then the crop draws (torchvision draws the crop first; both are
      // uniform and independent, only the stream order differs).
      const bool flip = g.next_u64() >> 63;
      train_transform(bytes, source, opt.train_crop_size, g, flip, out, DecodeMode::region_scaled, opt.interpolation);
      // The policy draws after the crop's, from the same generator (torchvision's order:
      // RandomResizedCrop, RandomHorizontalFlip, then the policy).
      if (opt.auto_augment.policy != AutoAugmentPolicy::none)
        auto_augment(out, opt.train_crop_size, opt.train_crop_size, opt.auto_augment, g);
    } else {
      eval_transform(bytes, source, opt.val_resize_size, opt.val_crop_size, out, DecodeMode::region_scaled,
                     opt.interpolation);
    }
  } catch (const BadExample&) {
    throw;
  } catch (const Error& e) {
    throw BadExample(source, e.what());
  }
}

void check_imagenet_sizes(const ImageFolderOptions& opt, const char* dataset) {
  RT_CHECK(opt.train_crop_size > 0 && opt.val_crop_size > 0 && opt.val_resize_size >= opt.val_crop_size, dataset,
           ": sizes train_crop_size ", opt.train_crop_size, ", val_resize_size ", opt.val_resize_size,
           ", val_crop_size ", opt.val_crop_size, " must be positive, with the resize at least the crop");
  for (const int px : {opt.train_crop_size, opt.val_resize_size})
    RT_CHECK(uint64_t(px) * uint64_t(px) <= kMaxImagePixels, dataset, ": a size of ", px, " px makes images of ",
             uint64_t(px) * uint64_t(px), " pixels, more than the ", kMaxImagePixels,
             " (2^28) the decoders accept; use crop and resize sizes of at most 16384");
}

namespace {

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(ImageFolderIndex index, bool train, const ImageFolderOptions& opt, int64_t num_classes)
      : index_(std::move(index)), train_(train), opt_(opt), num_classes_(num_classes) {
    size_ = train ? opt.train_crop_size : opt.val_crop_size;
    // By construction (folder positions), but the index may come from a cache file.
    check_label_range(index_.labels, num_classes_, "imagenet ('" + index_.root + "')");
  }

  int64_t size() const override { return int64_t(index_.files.size()); }
  Shape image_shape() const override { return {3, size_, size_}; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return "imagenet"; }
  // torchvision's ImageNet statistics (references/classification/presets.py).
  Normalization normalization() const override { return {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}; }

  void get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const override {
    check_index("imagenet", i, size());
    const std::string path = (fs::path(index_.root) / index_.files[size_t(i)]).string();
    thread_local std::vector<uint8_t> bytes;
    read_file(path, bytes);
    imagenet_example(bytes, path, train_, opt_, i, epoch, static_cast<uint8_t*>(pixels));
    *label = index_.labels[size_t(i)];
  }
  int64_t label(int64_t i) const override {
    check_index("imagenet", i, size());
    return index_.labels[size_t(i)];
  }
  std::string location() const override { return index_.root; }

 private:
  ImageFolderIndex index_;
  bool train_;
  ImageFolderOptions opt_;
  int64_t num_classes_;
  int64_t size_;
};

}  // namespace

void report_empty_classes(const ImageFolderIndex& idx, const char* who) {
  if (idx.empty_classes.empty()) return;
  std::string names;
  for (size_t k = 0; k < idx.empty_classes.size() && k < 5; ++k) names += (k ? ", " : "") + idx.empty_classes[k];
  if (idx.empty_classes.size() > 5) names += ", ...";
  std::fprintf(stderr, "%s: %zu class folder(s) in %s hold no images (%s); they keep their class index, so the "
               "labels are those of the whole tree\n", who, idx.empty_classes.size(), idx.root.c_str(), names.c_str());
}

namespace {

bool has_class_folders(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string()[0] != '.' && e.is_directory(ec)) return true;
  return false;
}

}  // namespace

ImageFolderIndex imagenet_split_index(const std::string& root, const std::string& split, const IndexOptions& io,
                                      std::vector<std::string>* classes_out) {
  std::error_code ec;
  RT_CHECK(fs::is_directory(root, ec), "imagenet: '", root, "' is not a folder; ", kLayout);
  const fs::path train_dir = fs::path(root) / "train", val_dir = fs::path(root) / "val";
  const bool have_train = fs::is_directory(train_dir, ec);
  if (split == "train") {
    RT_CHECK(have_train, "imagenet: '", train_dir.string(), "' not found; ", kLayout);
    ImageFolderIndex idx = index_image_folder(train_dir.string(), io);
    report_empty_classes(idx, "imagenet");
    *classes_out = idx.classes;
    return idx;
  }
  RT_CHECK(fs::is_directory(val_dir, ec), "imagenet: '", val_dir.string(), "' not found; ", kLayout);
  // The classes labels refer to: the train split's, when there is one.
  std::vector<std::string> classes;
  if (have_train) classes = index_image_folder(train_dir.string(), io).classes;
  ImageFolderIndex idx;
  if (has_class_folders(val_dir)) {
    idx = index_image_folder(val_dir.string(), io);
    if (!classes.empty()) {  // map val folder names to train indices
      std::vector<int32_t> to_train(idx.classes.size());
      for (size_t c = 0; c < idx.classes.size(); ++c) {
        const auto it = std::lower_bound(classes.begin(), classes.end(), idx.classes[c]);
        RT_CHECK(it != classes.end() && *it == idx.classes[c], "imagenet: class folder '", idx.classes[c], "' in ",
                 val_dir.string(), " has no counterpart in ", train_dir.string(),
                 "; both splits must use the same class folders (wnids)");
        to_train[c] = int32_t(it - classes.begin());
      }
      for (int32_t& l : idx.labels) l = to_train[size_t(l)];
    } else {
      classes = idx.classes;
    }
  } else {
    fs::path csv = fs::path(root) / "LOC_val_solution.csv";
    if (!fs::exists(csv, ec)) csv = val_dir / "LOC_val_solution.csv";
    RT_CHECK(fs::exists(csv, ec), "imagenet: '", val_dir.string(), "' has no class folders, so it must be the flat ",
             "validation layout with its labels file, but neither ", (fs::path(root) / "LOC_val_solution.csv").string(),
             " nor ", csv.string(), " exists; ", kLayout);
    RT_CHECK(!classes.empty(), "imagenet: the flat validation layout (", val_dir.string(), " with ", csv.string(),
             ") needs ", train_dir.string(), " for the class list (labels are positions of the train folders' wnids)");
    idx = index_flat_val(val_dir.string(), csv.string(), classes);
  }
  report_empty_classes(idx, "imagenet");
  *classes_out = std::move(classes);
  return idx;
}

namespace {

std::unique_ptr<Dataset> open_image_folder(const std::string& root, const std::string& split,
                                           const ImageFolderOptions& opt) {
  check_imagenet_sizes(opt, "imagenet");
  IndexOptions io;
  io.cache_dir = opt.cache_dir;
  io.use_cache = opt.use_cache;
  std::vector<std::string> classes;
  ImageFolderIndex idx = imagenet_split_index(root, split, io, &classes);
  return std::make_unique<ImageFolderDataset>(std::move(idx), split == "train", opt, int64_t(classes.size()));
}

}  // namespace

RT_REGISTER_DATASET("imagenet", [](::rt::data::DatasetEntry& e) {
  e.order = 30;
  e.path_help = "DIR with train/ and val/";
  e.image_pipeline = true;
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    RT_CHECK(!path.empty(), "dataset imagenet needs a path DIR: ImageNet-1k in the ImageFolder ",
             "layout, DIR/train/<wnid>/*.JPEG and DIR/val/<wnid>/*.JPEG (or DIR/val/*.JPEG with ",
             "DIR/LOC_val_solution.csv)");
    return open_image_folder(path, split, o.image_folder);
  };
});

}  // namespace rt::data
