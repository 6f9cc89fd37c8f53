// "webdataset": ImageNet (or any classification set) as WebDataset tar shards, as
// `ringtape pack` writes them (data/pack/pack.h) or other tools do: samples "key.jpg" + "key.cls".
//
//   DIR/train-000000.tar ...   training split (DIR/train.json: the class names, optional)
//   DIR/val-000000.tar ...     evaluation split (DIR/val.json: its class names must be train's)
//
// Example i is the i-th sample of the shards in the order given (shard 0's first); the
// sampler reads them in Note [Shard order]'s sequence, so reads are sequential within a
// shard. Each read asks the kernel to read ahead (posix_fadvise WILLNEED) the next
// readahead_bytes of that shard, so the disk or network file system sees large streaming
// requests while the workers decode. The image pipeline, augmentation draws, evaluation
// transform and unreadable-sample handling are the folder path's (imagenet_example).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <list>
#include <mutex>
#include <sstream>

#include "base/error.h"
#include "data/datasets/dataset_registry.h"
#include "data/datasets/imagenet_common.h"
#include "data/formats/shard_index.h"
#include "data/formats/tar.h"
#include "data/datasets/u8_dataset.h"
#include "engine/io/json.h"

namespace rt::data {

namespace {

namespace fs = std::filesystem;

// The summary `ringtape pack` writes beside the shards: <dir>/<prefix>.json, e.g.
// shards/train.json for shards/train-000000.tar ("" for a shard name without a prefix).
std::string summary_path(const std::string& first_shard) {
  const fs::path p(first_shard);
  const std::string name = p.filename().string();
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos) return "";
  return (p.parent_path() / (name.substr(0, dash) + ".json")).string();
}

// The class names of the summary at `summary`; empty when there is none.
std::vector<std::string> read_classes(const std::string& summary) {
  if (summary.empty()) return {};
  std::ifstream in(summary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> classes;
  try {
    const json::Value v = json::parse(ss.str());
    if (const json::Value* c = v.find("classes"))
      for (const json::Value& x : c->as_array()) classes.push_back(x.as_string());
  } catch (const Error& e) {
    RT_FAIL("webdataset: '", summary, "' is not the summary `ringtape pack` writes: ", e.what(),
            "; delete it or re-run `ringtape pack`");
  }
  return classes;
}

// A label is a class index, so the evaluation split must list the training split's classes in
// the same order: shards of a val folder packed on its own (other class folders, or one more
// or fewer) would score every image against the wrong class while the run looks healthy.
void check_same_classes(const std::vector<std::string>& train, const std::string& train_summary,
                        const std::vector<std::string>& val, const std::string& val_summary) {
  if (train.empty() || val.empty() || train == val) return;
  size_t i = 0;
  while (i < train.size() && i < val.size() && train[i] == val[i]) ++i;
  const auto name = [&](const std::vector<std::string>& c) { return i < c.size() ? "'" + c[i] + "'" : "(none)"; };
  RT_FAIL("webdataset: the evaluation shards' classes differ from the training shards': class ", i, " is ",
          name(train), " in ", train_summary, " (", train.size(), " classes) but ", name(val), " in ", val_summary,
          " (", val.size(), " classes), so a label means another class in each split. Pack the evaluation images "
          "with the training split's class folders (`ringtape pack --data-path imagenet/val` takes them from "
          "imagenet/train for ImageNet's val), or point --val-data-path at the shards packed that way");
}

class WebDataset final : public Dataset {
 public:
  WebDataset(std::string location, std::vector<ShardIndex> shards, bool train, const ImageFolderOptions& image,
             const WebDatasetOptions& opt, int64_t num_classes, const std::string& classes_from)
      : location_(std::move(location)), shards_(std::move(shards)), train_(train), image_(image), opt_(opt),
        num_classes_(num_classes), advised_(new std::atomic<int64_t>[shards_.size()]), open_(shards_.size()) {
    size_ = train ? image.train_crop_size : image.val_crop_size;
    starts_.push_back(0);
    for (const ShardIndex& s : shards_) starts_.push_back(starts_.back() + int64_t(s.samples.size()));
    for (size_t s = 0; s < shards_.size(); ++s) advised_[s] = 0;
    for (const ShardIndex& s : shards_)
      for (const ShardSample& x : s.samples)
        // --num-classes does not enter here: a summary's class list that is shorter than the
        // labels is wrong about the shards, whatever the model's outputs.
        RT_CHECK(x.label < num_classes_, "webdataset: ", s.path, ": sample '", x.key, "' has label ", x.label,
                 ", outside [0, ", num_classes_, "): the summary ", classes_from, " lists ", num_classes_,
                 " classes, fewer than the shards' labels use; re-run `ringtape pack` for these shards (into an "
                 "empty output folder), or delete ", classes_from, " so that the class count comes from the labels "
                 "(the largest + 1)");
  }

  int64_t size() const override { return starts_.back(); }
  Shape image_shape() const override { return {3, size_, size_}; }
  int64_t num_classes() const override { return num_classes_; }
  std::string name() const override { return "webdataset"; }
  Normalization normalization() const override { return {{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}}; }
  std::string location() const override { return location_; }
  std::vector<int64_t> shard_sizes() const override {
    std::vector<int64_t> n;
    for (const ShardIndex& s : shards_) n.push_back(int64_t(s.samples.size()));
    return n;
  }

  void get(int64_t i, int64_t epoch, void* pixels, int64_t* label) const override {
    const size_t s = shard_of(i);
    const ShardSample& x = shards_[s].samples[size_t(i - starts_[s])];
    const std::string source = shards_[s].path + ":" + x.key + "." + x.field;
    thread_local std::vector<uint8_t> bytes;
    try {
      const std::shared_ptr<const RandomAccessFile> f = file(s);
      read_ahead(s, *f, x.offset);
      bytes.resize(size_t(x.size));
      f->read_exact(x.offset, bytes);
    } catch (const Error& e) {  // a shard that vanished or shrank: its samples are unreadable
      throw BadExample(source, e.what());
    }
    if (bytes.empty()) throw BadExample(source, source + ": empty image (0 bytes)");
    imagenet_example(bytes, source, train_, image_, i, epoch, static_cast<uint8_t*>(pixels));
    *label = x.label;
  }
  int64_t label(int64_t i) const override {
    const size_t s = shard_of(i);
    return shards_[s].samples[size_t(i - starts_[s])].label;
  }

 private:
  size_t shard_of(int64_t i) const {  // the shard holding example i (checked)
    check_index("webdataset", i, size());
    return size_t(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin() - 1);
  }

  // At most this many shards open at once (readers hold their file while they read): a
  // worker moves through about world_size / shards of them per epoch, never all 1024.
  static constexpr size_t kMaxOpen = 32;

  std::shared_ptr<const RandomAccessFile> file(size_t s) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_[s]) {
      if (lru_.size() >= kMaxOpen) {
        open_[lru_.front()].reset();
        lru_.pop_front();
      }
      open_[s] = std::make_shared<const RandomAccessFile>(shards_[s].path);
      open_[s]->sequential();
      lru_.push_back(s);
    }
    return open_[s];
  }

  // Asks for the next readahead_bytes from `offset` on once the reads come within half of
  // that of the end of what was asked for before.
  void read_ahead(size_t s, const RandomAccessFile& f, int64_t offset) const {
    const int64_t ra = opt_.readahead_bytes;
    if (ra <= 0) return;
    int64_t advised = advised_[s].load(std::memory_order_relaxed);
    if (offset >= advised - ra / 2 || offset < advised - 2 * ra) {  // near its end, or a new pass
      const int64_t from = offset < advised && offset >= advised - 2 * ra ? advised : offset;
      f.will_need(from, offset + ra - from);
      advised_[s].store(offset + ra, std::memory_order_relaxed);
    }
  }

  std::string location_;
  std::vector<ShardIndex> shards_;
  std::vector<int64_t> starts_;  // example index of each shard's first sample; size() last
  bool train_;
  ImageFolderOptions image_;
  WebDatasetOptions opt_;
  int64_t num_classes_;
  int64_t size_;
  std::unique_ptr<std::atomic<int64_t>[]> advised_;  // per shard: read-ahead asked up to here

  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const RandomAccessFile>> open_;  // per shard, or null
  mutable std::list<size_t> lru_;                                      // open shards, oldest first
};

// The shards of `split`: see WebDatasetOptions::val_path.
std::vector<std::string> split_shards(const std::string& path, const std::string& split,
                                      const WebDatasetOptions& opt) {
  std::error_code ec;
  const bool folder = path.find('{') == std::string::npos && fs::is_directory(path, ec);
  if (split == "train") return list_shards(path, "train");
  if (!opt.val_path.empty()) return list_shards(opt.val_path, "val");
  if (folder) return list_shards(path, "val");
  const std::string dir = fs::path(path).parent_path().string();
  RT_CHECK(fs::is_directory(dir.empty() ? "." : dir, ec), "webdataset: no folder '", dir,
           "' for the evaluation shards; give them with --val-data-path");
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("val-", 0) == 0 && n.size() > 8 && n.compare(n.size() - 4, 4, ".tar") == 0)
      found.push_back(e.path().string());
  }
  RT_CHECK(!found.empty(), "webdataset: the training shards '", path, "' have no val-*.tar beside them in '", dir,
           "'; give the evaluation shards with --val-data-path (a folder, a .tar or a brace pattern)");
  std::sort(found.begin(), found.end());
  return found;
}

std::unique_ptr<Dataset> open_webdataset(const std::string& path, const std::string& split,
                                         const ImageFolderOptions& image, const WebDatasetOptions& opt) {
  check_imagenet_sizes(image, "webdataset");
  RT_CHECK(opt.readahead_bytes >= 0, "webdataset: read-ahead of ", opt.readahead_bytes, " bytes must be >= 0");
  const std::vector<std::string> files = split_shards(path, split, opt);
  // The shards' indexes, a few at a time (scanning a shard without one reads its headers).
  std::vector<ShardIndex> shards(files.size());
  const size_t threads = std::min<size_t>(8, files.size());
  std::vector<std::future<void>> jobs;
  std::atomic<size_t> next{0};
  for (size_t t = 0; t < threads; ++t)
    jobs.push_back(std::async(std::launch::async, [&] {
      for (size_t k; (k = next.fetch_add(1)) < files.size();) shards[k] = load_shard(files[k]);
    }));
  for (auto& j : jobs) j.get();  // rethrows the first failure
  int64_t total = 0, skipped = 0, max_label = -1;
  for (const ShardIndex& s : shards) {
    total += int64_t(s.samples.size());
    skipped += s.skipped;
    for (const ShardSample& x : s.samples) max_label = std::max(max_label, x.label);
  }
  RT_CHECK(total > 0, "webdataset: the ", files.size(), " shard(s) of split ", split, " (", files.front(),
           ", ...) hold no samples with an image and a label");
  if (skipped > 0)
    std::fprintf(stderr, "webdataset: %lld sample(s) without an image or a label left out of split %s\n",
                 (long long)skipped, split.c_str());
  // The class count: the summary's classes; else, for the test split, the train split's; else
  // the largest label + 1 (--num-classes checks it against the model). Where both splits
  // have a summary, their classes must agree.
  const std::string summary = summary_path(files.front());
  std::vector<std::string> classes = read_classes(summary);
  std::string classes_from = summary;
  if (split != "train") {
    std::string train_summary;
    try {
      train_summary = summary_path(split_shards(path, "train", opt).front());
    } catch (const Error&) {  // no train shards here: nothing to compare with
    }
    const std::vector<std::string> train_classes = read_classes(train_summary);
    check_same_classes(train_classes, train_summary, classes, summary);
    if (classes.empty() && !train_classes.empty()) {
      classes = train_classes;
      classes_from = train_summary;
    }
  }
  int64_t num_classes = int64_t(classes.size());
  if (num_classes == 0) num_classes = max_label + 1;
  RT_CHECK(num_classes <= kMaxDerivedClasses || !classes.empty(), "webdataset: label ", max_label,
           " in the shards of split ", split, " is not a class index (more than ", kMaxDerivedClasses, ")");
  const std::string location = split != "train" && !opt.val_path.empty() ? opt.val_path : path;
  return std::make_unique<WebDataset>(location, std::move(shards), split == "train", image, opt, num_classes,
                                      classes_from);
}

}  // namespace

RT_REGISTER_DATASET("webdataset", [](::rt::data::DatasetEntry& e) {
  e.order = 40;
  e.path_help = "the folder `ringtape pack` wrote (train-*.tar, val-*.tar) or the training shards' "
                "brace pattern, e.g. 'shards/train-{000000..000146}.tar'";
  e.image_pipeline = true;
  e.sharded = true;
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    RT_CHECK(!path.empty(), "dataset webdataset needs a path: the folder `ringtape pack` wrote ",
             "(train-*.tar for training, val-*.tar for evaluation), or a brace pattern like ",
             "'shards/train-{000000..000146}.tar'");
    return open_webdataset(path, split, o.image_folder, o.webdataset);
  };
});

}  // namespace rt::data
