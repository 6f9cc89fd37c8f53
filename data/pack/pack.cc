#include "data/pack/pack.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/usage_error.h"
#include "data/datasets/imagenet_common.h"
#include "data/formats/image_folder.h"
#include "data/transforms/image_transforms.h"
#include "data/codecs/jpeg_decode.h"
#include "data/codecs/jpeg_encode.h"
#include "data/pack/pack_lock.h"
#include "data/pack/pack_paths.h"
#include "data/pack/pack_resume.h"
#include "data/codecs/png_decode.h"
#include "data/seed.h"
#include "data/formats/shard_index.h"
#include "data/formats/tar.h"
#include "engine/io/json.h"
#include "engine/random.h"

namespace rt::data {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPackStream = 0x7061636b'73ull;  // "packs"

// One file's result, from a worker to the writer.
struct Encoded {
  bool ok = false;
  std::vector<uint8_t> jpeg;
  std::string reason;  // why it was skipped
  bool reencoded = false;
  int64_t bytes_in = 0;
  ShardInput id;  // size, mtime and crc32 of what was read (Note [Resumable pack])
};

// torchvision's Resize(max_side) on a decoded (possibly DCT-scaled) image, then JPEG.
std::vector<uint8_t> resize_and_encode(const DecodedImage& img, int W, int H, int max_side, int quality,
                                       const std::string& label) {
  int ow = img.width, oh = img.height;
  if (max_side > 0 && std::min(W, H) > max_side) {
    const Box s = resize_shorter_size(W, H, max_side);
    ow = s.w;
    oh = s.h;
  }
  if (ow == img.width && oh == img.height) return encode_jpeg(img.rgb.data(), ow, oh, quality, label);
  std::vector<uint8_t> out(size_t(ow) * size_t(oh) * 3);
  resize_bilinear(img.rgb.data(), img.width, img.height, Box{0, 0, img.width, img.height}, ow, oh, out.data());
  return encode_jpeg(out.data(), ow, oh, quality, label);
}

Encoded encode_file(const std::string& path, const PackOptions& opt) {
  Encoded e;
  try {
    const std::vector<uint8_t> bytes = read_input(path, &e.id);
    e.bytes_in = int64_t(bytes.size());
    RT_CHECK(!bytes.empty(), path, ": empty file (0 bytes)");
    // Note [Decoded-pixel limit] (data/datasets/imagenet_common.h): the header's size, before any decode.
    if (is_png(bytes)) {
      const auto [pw, ph] = encoded_image_size(bytes, path);
      check_image_pixels(pw, ph, opt.max_image_pixels, path);
      const DecodedImage img = decode_png(bytes, path);
      e.jpeg = resize_and_encode(img, img.width, img.height, opt.max_side, opt.quality, path);
      e.reencoded = true;
    } else {
      const ImageInfo info = jpeg_info(bytes, path);
      const int W = info.width, H = info.height, shorter = std::min(W, H);
      check_image_pixels(W, H, opt.max_image_pixels, path);
      if (opt.max_side == 0 || shorter <= opt.max_side) {
        decode_jpeg(bytes, path);  // the whole image must decode, as training will need it
        e.jpeg = bytes;
      } else {
        // DCT scaling by the largest d that keeps the shorter side at least max_side.
        int d = 1;
        for (const int c : {8, 4, 2})
          if ((shorter + c - 1) / c >= opt.max_side) {
            d = c;
            break;
          }
        const DecodedImage img = decode_jpeg_region(bytes, path, Box{0, 0, W, H}, d);
        e.jpeg = resize_and_encode(img, W, H, opt.max_side, opt.quality, path);
        e.reencoded = true;
      }
    }
    e.ok = true;
  } catch (const Error& err) {
    e.ok = false;
    e.jpeg.clear();
    e.reason = err.what();
  }
  return e;
}

std::string shard_name(const std::string& output, int64_t k) {
  char num[32];
  std::snprintf(num, sizeof num, "-%06lld.tar", (long long)k);
  return output + num;
}

std::string duration(double s) {
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(s) % 60);
  return b;
}

// The writer's view of the workers: results for positions [next_out, next_out + window).
class Pipeline {
 public:
  Pipeline(const std::vector<std::string>& paths, int64_t first, const PackOptions& opt, int workers)
      : paths_(paths), opt_(opt), window_(4 * int64_t(workers) + 16), ring_(size_t(window_)),
        next_claim_(first), next_out_(first) {
    for (int t = 0; t < workers; ++t) threads_.emplace_back([this] { work(); });
  }
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  Encoded take() {  // the result of position next_out_
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<Encoded>& slot = ring_[size_t(next_out_ % window_)];
    cv_.wait(lock, [&] { return slot.has_value(); });
    Encoded e = std::move(*slot);
    slot.reset();
    ++next_out_;
    lock.unlock();
    cv_.notify_all();
    return e;
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] {
        return stop_ || (next_claim_ < int64_t(paths_.size()) && next_claim_ < next_out_ + window_);
      });
      if (stop_) return;
      const int64_t p = next_claim_++;
      lock.unlock();
      Encoded e = encode_file(paths_[size_t(p)], opt_);
      lock.lock();
      ring_[size_t(p % window_)] = std::move(e);
      cv_.notify_all();
    }
  }

  const std::vector<std::string>& paths_;
  const PackOptions& opt_;
  const int64_t window_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<Encoded>> ring_;
  int64_t next_claim_, next_out_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

void write_summary(const std::string& output, const std::vector<std::string>& classes,
                   const std::vector<ShardIndex>& shards, int64_t files, const std::string& options) {
  json::Value v = json::Value::object();
  v.set("wids_version", 1);
  v.set("name", fs::path(output).filename().string());
  v.set("options", options);
  int64_t samples = 0;
  json::Value list = json::Value::array();
  for (const ShardIndex& s : shards) {
    samples += int64_t(s.samples.size());
    json::Value e = json::Value::object();
    e.set("url", fs::path(s.path).filename().string());
    e.set("nsamples", int64_t(s.samples.size()));
    e.set("filesize", s.tar_bytes);
    list.push_back(std::move(e));
  }
  v.set("num_samples", samples);
  v.set("skipped", files - samples);
  json::Value cls = json::Value::array();
  for (const std::string& c : classes) cls.push_back(c);
  v.set("classes", std::move(cls));
  v.set("shardlist", std::move(list));
  const std::string path = output + ".json", tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << json::dump(v) << '\n';
    RT_CHECK(out.good(), "pack: cannot write '", tmp, "'");
  }
  RT_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "pack: cannot rename '", tmp, "' to '", path, "'");
}

// The options string without its ",files=N" (compared on its own: Note [Resumable pack]).
std::string without_files(const std::string& options, int64_t* files) {
  const size_t at = options.rfind(",files=");
  if (at == std::string::npos) return options;
  if (files) *files = std::atoll(options.c_str() + at + 7);
  return options.substr(0, at);
}

// The options' own limits. cli/pack.cc's flags keep to them; this is where they are checked,
// as usage errors, so any caller gets the same answer.
void check_options(const PackOptions& opt) {
  if (opt.max_side < 0)
    throw UsageError("--max-side " + std::to_string(opt.max_side) + " must be >= 0 (0 = none)");
  if (opt.quality < 1 || opt.quality > 100)
    throw UsageError("--quality " + std::to_string(opt.quality) + " must be in [1, 100]");
  if (opt.shard_bytes < (int64_t(1) << 16))
    throw UsageError("--shard-size of " + std::to_string(opt.shard_bytes) + " bytes is below 64 KiB; shards are "
                     "meant to be hundreds of MB (WebDataset's usual size: 0.1-1 GB)");
  if (opt.max_image_pixels < 0)
    throw UsageError("--max-image-pixels " + std::to_string(opt.max_image_pixels) + " must be >= 0 (0 = none)");
}

// The prefix to write (Note [Pack output prefix]), once the input is known to be a folder
// that may be packed there; its folder is created. Nothing is written before these checks.
std::string prepare_output(const PackOptions& opt) {
  const std::string output = pack_output_prefix(opt.data_path, opt.output);
  std::error_code ec;
  RT_CHECK(fs::is_directory(opt.data_path, ec), "pack: --data-path '", opt.data_path, "' is not a folder; give ",
           "the split folder, e.g. imagenet/train or imagenet/val");
  check_pack_paths(opt.data_path, output);
  const fs::path out_dir = fs::path(output).parent_path();
  if (!out_dir.empty() && !fs::is_directory(out_dir, ec)) {
    fs::create_directories(out_dir, ec);
    RT_CHECK(!ec && fs::is_directory(out_dir), "pack: cannot create the output folder '", out_dir.string(), "': ",
             ec ? ec.message() : std::string("it exists but is not a folder"),
             "; choose an --output in a folder you can write");
  }
  return output;
}

// The folder's files in the seeded shuffled order the shards hold them, and their full paths
// in that order (*paths). ImageNet's val split takes the train split's class indices (and may
// be flat). On resume the listing may come from the cache; it is only as good as directory
// mtimes (Note [index cache]), so every kept shard's inputs are also stat-ed
// (verify_kept_shards).
PackListing shuffled_listing(const PackOptions& opt, std::vector<std::string>* paths) {
  IndexOptions io;
  io.cache_dir = opt.cache_dir;
  io.use_cache = opt.use_cache;
  const fs::path split_dir = fs::path(opt.data_path).lexically_normal();
  const fs::path dir = split_dir.filename().empty() ? split_dir.parent_path() : split_dir;
  std::vector<std::string> classes;
  ImageFolderIndex idx = dir.filename() == "val"
                             ? imagenet_split_index(dir.parent_path().string(), "test", io, &classes)
                             : index_image_folder(dir.string(), io);
  if (dir.filename() != "val") {
    classes = idx.classes;
    report_empty_classes(idx, "pack");  // as training from the folders; the val split's: its own
  }
  const int64_t n = int64_t(idx.files.size());
  RT_CHECK(n > 0, "pack: no images in '", opt.data_path, "'");
  check_unique_keys(idx.files);  // Note [Pack keys]
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  Generator g(derive_seed(opt.seed, kPackStream));
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(g.randint(0, i + 1))]);
  PackListing listing;
  listing.root = idx.root;
  listing.classes = classes;
  paths->assign(static_cast<size_t>(n), std::string());
  for (int64_t p = 0; p < n; ++p) {
    const size_t i = size_t(order[size_t(p)]);
    (*paths)[size_t(p)] = (fs::path(idx.root) / idx.files[i]).string();
    listing.rels.push_back(idx.files[i]);
    listing.labels.push_back(idx.labels[i]);
  }
  return listing;
}

// What every shard's index records as the options it was written with: a resumed pack must
// match it (Note [Resumable pack]).
std::string options_string(const PackOptions& opt, int64_t files) {
  return "max_side=" + std::to_string(opt.max_side) + ",quality=" + std::to_string(opt.quality) +
         ",shard_bytes=" + std::to_string(opt.shard_bytes) + ",seed=" + std::to_string(opt.seed) +
         ",max_image_pixels=" + std::to_string(opt.max_image_pixels) + ",files=" + std::to_string(files);
}

// The finished shards an earlier run left, kept once every input they cover is checked
// (Note [Resumable pack]); *first is the position after the last of them. Throws when they
// were written with other options or do not follow one another.
std::vector<ShardIndex> keep_finished_shards(const std::string& output, const std::string& options,
                                             const PackListing& listing, int64_t* first) {
  std::vector<ShardIndex> done;
  int64_t stored_files = int64_t(listing.rels.size());
  *first = 0;
  for (int64_t k = 0;; ++k) {
    const std::string tar = shard_name(output, k);
    std::error_code ec;
    const auto bytes = fs::file_size(tar, ec);
    ShardIndex x;
    if (ec || !read_shard_index(tar, int64_t(bytes), &x, /*with_inputs=*/true)) break;
    RT_CHECK(without_files(x.options, &stored_files) == without_files(options, nullptr), "pack: '", tar,
             "' was written with other options (", x.options, "; now ", options, "); to resume, run with the same ",
             "flags; to start over, run `", start_over_command(output), "` or choose another --output");
    RT_CHECK(x.source_first == *first && x.source_end > *first, "pack: '", index_path_of(tar),
             "' covers positions [", x.source_first, ", ", x.source_end, ") where [", *first, ", ...) was expected; ",
             "the shards do not belong together: run `", start_over_command(output), "` or choose another --output");
    *first = x.source_end;
    done.push_back(std::move(x));
  }
  verify_kept_shards(done, listing, output, stored_files);
  for (ShardIndex& x : done) x.inputs = {};  // checked: only the sample counts are needed from here
  return done;
}

// After the kept shards (shard numbers from `next` on): only what this pack leaves unfinished
// is removed (a .partial tar, an .idx whose rename did not happen); a .tar there is somebody's
// data, never overwritten.
void remove_unfinished_shards(const std::string& output, int64_t next) {
  std::error_code ec;
  for (int64_t k = next;; ++k) {
    const std::string tar = shard_name(output, k);
    RT_CHECK(!fs::exists(tar, ec), "pack: '", tar, "' exists but is not a finished shard of this pack (no ",
             "matching ", index_path_of(tar), "); move or delete it, or choose another --output");
    const bool partial = fs::exists(tar + ".partial", ec), index = fs::exists(index_path_of(tar), ec);
    if (!partial && !index) break;
    fs::remove(tar + ".partial", ec);
    fs::remove(index_path_of(tar), ec);
    fs::remove(index_path_of(tar) + ".tmp", ec);
  }
}

// One image's three tar members (Note [Pack keys]): KEY.jpg, KEY.cls (the label as text) and
// KEY.json (its path and class); returns the sample as the shard's index records it.
ShardSample write_sample(TarWriter& tar, const std::string& rel, int64_t label, const std::vector<uint8_t>& jpeg,
                         const std::vector<std::string>& classes) {
  ShardSample s;
  s.key = pack_key(rel);
  s.field = "jpg";
  s.size = int64_t(jpeg.size());
  s.label = label;
  tar.add(s.key + ".jpg", jpeg);
  s.offset = tar.bytes_written() - (s.size + 511) / 512 * 512;
  const std::string cls = std::to_string(s.label);
  tar.add(s.key + ".cls", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cls.data()), cls.size()));
  json::Value meta = json::Value::object();
  meta.set("path", rel);
  meta.set("class", classes[size_t(s.label)]);
  meta.set("label", s.label);
  const std::string text = json::dump(meta);
  tar.add(s.key + ".json", std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return s;
}

// The shards being written, in position order. A shard is written as X.tar.partial, synced,
// indexed, then renamed X.tar, so a file X.tar is always a finished shard
// (Note [Resumable pack]). Each shard's index lists every position it covers, unreadable ones
// too.
class ShardWriter {
 public:
  ShardWriter(const std::string& output, const std::string& options, const std::vector<std::string>& classes,
              int64_t shard_bytes, std::vector<ShardIndex> kept, int64_t first)
      : output_(output), options_(options), classes_(classes), shard_bytes_(shard_bytes), done_(std::move(kept)),
        next_first_(first) {}

  // Position p's result (its id's rel and label set); a readable image goes into the open
  // shard, which closes once it holds shard_bytes.
  void add(const Encoded& e, int64_t p) {
    inputs_.push_back(e.id);
    if (!e.ok) return;
    if (!tar_) {
      cur_.path = shard_name(output_, int64_t(done_.size()));
      cur_.source_first = next_first_;
      cur_.options = options_;
      tar_.emplace(cur_.path + ".partial");
    }
    cur_.samples.push_back(write_sample(*tar_, e.id.rel, e.id.label, e.jpeg, classes_));
    if (tar_->bytes_written() >= shard_bytes_) close(p + 1);
  }
  // Closes the open shard, if any, as covering the positions up to `end`.
  void finish(int64_t end) {
    if (tar_) close(end);
  }
  int64_t shards() const { return int64_t(done_.size()) + (tar_ ? 1 : 0); }
  int64_t bytes_out() const { return bytes_out_; }
  const std::vector<ShardIndex>& done() const { return done_; }

 private:
  void close(int64_t end) {
    tar_->finish();
    cur_.tar_bytes = tar_->bytes_written();
    bytes_out_ += cur_.tar_bytes;
    cur_.source_end = end;
    cur_.inputs = std::move(inputs_);
    inputs_.clear();
    cur_.classes = classes_;
    tar_.reset();
    write_shard_index(cur_);
    RT_CHECK(std::rename((cur_.path + ".partial").c_str(), cur_.path.c_str()) == 0, "pack: cannot rename '",
             cur_.path, ".partial' to '", cur_.path, "': ", std::strerror(errno));
    done_.push_back(std::move(cur_));
    cur_ = ShardIndex{};
    next_first_ = end;
  }

  const std::string& output_;
  const std::string& options_;
  const std::vector<std::string>& classes_;
  const int64_t shard_bytes_;
  std::vector<ShardIndex> done_;  // kept and finished, in order
  std::optional<TarWriter> tar_;  // the open shard's
  ShardIndex cur_;
  std::vector<ShardInput> inputs_;  // positions next_first_.. as read: the open shard's
  int64_t next_first_;
  int64_t bytes_out_ = 0;
};

// stderr's progress line: rewritten in place twice a second on a terminal, a line every 30 s
// to a log; unreadable images named there, the first 20 of them.
class ProgressLine {
 public:
  ProgressLine(bool on, Clock::time_point t0, int64_t first, int64_t n)
      : on_(on), tty_(::isatty(2)), t0_(t0), last_print_(Clock::now()), first_(first), n_(n) {}

  void skipped(const std::string& reason) {
    if (++skipped_ <= 20) std::fprintf(stderr, "%sskipping unreadable image %s\n", tty_ ? "\n" : "", reason.c_str());
  }
  // After position p.
  void update(int64_t p, int64_t shards, int64_t skipped) {
    const auto now = Clock::now();
    if (!on_ || (p + 1 != n_ && now - last_print_ <= std::chrono::milliseconds(tty_ ? 500 : 30000))) return;
    last_print_ = now;
    const double secs = std::chrono::duration<double>(now - t0_).count(), rate = double(p + 1 - first_) / secs;
    std::fprintf(stderr, "%spack: %lld/%lld images (%.1f%%), %lld shard(s), %.0f images/s, ETA %s, %lld skipped%s",
                 tty_ ? "\r" : "", (long long)(p + 1), (long long)n_, 100.0 * double(p + 1) / double(n_),
                 (long long)shards, rate, duration(rate > 0 ? double(n_ - p - 1) / rate : 0).c_str(),
                 (long long)skipped, tty_ ? "" : "\n");
  }
  void done() const {
    if (on_ && tty_) std::fprintf(stderr, "\n");
    if (skipped_ > 20) std::fprintf(stderr, "pack: %lld unreadable images skipped in all\n", (long long)skipped_);
  }

 private:
  const bool on_, tty_;
  const Clock::time_point t0_;
  Clock::time_point last_print_;
  const int64_t first_, n_;
  int64_t skipped_ = 0;
};

}  // namespace

PackResult pack_image_folder(const PackOptions& opt) {
  const auto t0 = Clock::now();
  check_options(opt);
  const std::string output = prepare_output(opt);  // Note [Pack output prefix]
  const PackOutputLock lock(output);  // held until pack returns (Note [Pack output lock])
  std::vector<std::string> paths;
  const PackListing listing = shuffled_listing(opt, &paths);
  const int64_t n = int64_t(paths.size());
  const std::string options = options_string(opt, n);

  PackResult r;
  r.output = output;
  r.files = n;
  int64_t first = 0;
  std::vector<ShardIndex> kept = keep_finished_shards(output, options, listing, &first);
  r.resumed_shards = int64_t(kept.size());
  remove_unfinished_shards(output, r.resumed_shards);
  if (r.resumed_shards > 0 && opt.progress)
    std::fprintf(stderr, "pack: resuming after %lld finished shard(s) (%lld of %lld images done)\n",
                 (long long)r.resumed_shards, (long long)first, (long long)n);

  const int workers = opt.workers > 0 ? opt.workers : std::max(1, int(std::thread::hardware_concurrency()));
  ShardWriter shards(output, options, listing.classes, opt.shard_bytes, std::move(kept), first);
  ProgressLine progress(opt.progress, t0, first, n);
  {
    Pipeline pipe(paths, first, opt, workers);
    for (int64_t p = first; p < n; ++p) {
      Encoded e = pipe.take();
      r.bytes_in += e.bytes_in;
      e.id.rel = listing.rels[size_t(p)];
      e.id.label = listing.labels[size_t(p)];
      if (e.ok) {
        r.reencoded += e.reencoded;
      } else {
        ++r.skipped;
        progress.skipped(e.reason);
      }
      shards.add(e, p);
      progress.update(p, shards.shards(), r.skipped);
    }
  }
  shards.finish(n);
  progress.done();
  const std::vector<ShardIndex>& done = shards.done();
  RT_CHECK(!done.empty(), "pack: none of the ", n, " images in '", opt.data_path, "' could be read");
  for (const ShardIndex& s : done) r.packed += int64_t(s.samples.size());
  r.skipped = n - r.packed;
  r.shards = int64_t(done.size());
  r.bytes_out = shards.bytes_out();
  write_summary(output, listing.classes, done, n, options);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace rt::data
