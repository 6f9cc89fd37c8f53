// The ImageNet training input pipeline on the CPU, end to end: read a JPEG file (page cache
// warm), RandomResizedCrop(224) + horizontal flip via rt::data::train_transform, optionally an
// automatic augmentation policy (rt::data::auto_augment, --policy), into the image's slot of a
// preallocated (B, 224, 224, 3) uint8 batch; with --normalize the complete batch is then
// turned into the normalised f32 (B, 3, 224, 224) model input on the CPU by the engine's
// normalize_pixels (ringtape's trainer does that step on the GPU; timed here to compare with
// torchvision, which normalises per image in its workers). bench/jpeg_pipeline_bench_torch.py
// does the same with torchvision's PIL pipeline; bench/run_jpeg_pipeline_bench.sh runs both
// on the same files and compares (see bench/README.md, "JPEG input pipeline").
//
//   bazel run //bench:jpeg_pipeline_bench -- --files DIR [--threads 1] [--batch 256]
//       [--rounds 5] [--warmup 1] [--mode region|full] [--size 224] [--seed 0]
//       [--policy none|imagenet|ra|ta_wide|augmix] [--normalize] [--breakdown] [--json FILE]
//
// One round = every file of DIR once, in batches of B. T threads (std::thread, no OpenMP)
// take the images of a batch from a shared counter; the batch is complete when all have
// arrived at a barrier, and the next batch reuses the buffer. Image i's randomness comes
// from its own Generator seeded with derive_seed(derive_seed(seed, kAugmentStream), i):
// first the flip (p = 0.5), then the crop's draws inside train_transform, then the policy's
// (auto_augment continues with the same generator, as the ImageFolder dataset does). So the
// output does not depend on T. --normalize: the thread that completes a batch (the barrier's
// completion step, the others waiting) calls normalize_pixels on it, whose OpenMP team
// (OMP_NUM_THREADS; the script sets T) shares the work; its time is part of the round's.
// Reported: images/s of each round (all files / wall time), the median over the rounds after
// `warmup`, and per thread.
//
// Before timing, a sanity pass over the first 16 images, at the output size and at a quarter
// of it (where crops get DCT-scaled): region_scaled against DecodeMode::full (same crop and
// flip) and against an independent block-average reference (mean and max absolute
// difference of the uint8 outputs), and a second run must give the same bytes; these run
// without the policy, whose ops the reference does not model. With a policy, the first 16
// images are also augmented twice (the same bytes wanted) and the images it changed counted.
// Not a test: a guard against timing garbage. --breakdown adds a single-thread pass that
// times reading, header, decoding alone, resize + flip alone and the whole transform per
// image, and the policy and normalize_pixels alone when they are on.
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>  // for LIBJPEG_TURBO_VERSION only

#include "data/transforms/auto_augment.h"
#include "data/transforms/image_transforms.h"
#include "data/codecs/jpeg_decode.h"
#include "data/seed.h"
#include "base/error.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"

namespace {

using namespace rt::bench;

namespace fs = std::filesystem;
using rt::data::AutoAugmentPolicy;
using rt::data::DecodeMode;

// ImageNet's mean and std, torchvision's Normalize in the reference recipe.
const std::vector<double> kMean = {0.485, 0.456, 0.406}, kStd = {0.229, 0.224, 0.225};

#define RT_BENCH_STR2(x) #x
#define RT_BENCH_STR(x) RT_BENCH_STR2(x)
#ifdef LIBJPEG_TURBO_VERSION
const char* kJpegLib = "libjpeg-turbo " RT_BENCH_STR(LIBJPEG_TURBO_VERSION);
#else
const char* kJpegLib = "libjpeg " RT_BENCH_STR(JPEG_LIB_VERSION);
#endif

// From the command line; the defaults are flag_table()'s.
struct Options {
  std::string files_dir;
  int threads = 0;
  int batch = 0;
  int rounds = 0;
  int warmup = 0;
  int size = 0;
  uint64_t seed = 0;
  DecodeMode mode = DecodeMode::region_scaled;
  // torchvision's presets pass bilinear to every policy; so do the recipes and the script.
  rt::data::AutoAugmentOptions augment{.policy = AutoAugmentPolicy::none,
                                       .interpolation = rt::data::Interpolation::bilinear};
  bool normalize = false;
  bool breakdown = false;
  std::string json_path;
};

const char* kUsage =
    "usage: jpeg_pipeline_bench --files DIR [--threads N] [--batch B] [--rounds R] [--warmup W] [--mode region|full] "
    "[--size S] [--seed N] [--policy none|imagenet|ra|ta_wide|augmix] [--normalize] [--breakdown] [--json FILE]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::cli::FlagType;
  using rt::cli::Topic;
  return {
      {"files", FlagType::string, "", "the folder of JPEGs (*.jpg, *.jpeg), in name order; required"},
      {"threads", FlagType::integer, "1", "worker threads", {}, Topic::output, int_at_least(1)},
      {"batch", FlagType::integer, "256", "images per batch buffer", {}, Topic::output, int_at_least(1)},
      {"rounds", FlagType::integer, "5", "timed passes over all files; the median is reported", {}, Topic::output,
       int_at_least(1)},
      {"warmup", FlagType::integer, "1", "untimed passes first", {}, Topic::output, int_at_least(0)},
      {"mode", FlagType::string, "region", "region: decode only the crop, DCT-scaled; full: the whole image",
       {"region", "full"}},
      {"size", FlagType::integer, "224", "output side", {}, Topic::output, int_at_least(1)},
      {"seed", FlagType::integer, "0", "augmentation seed", {}, Topic::output, int_at_least(0)},
      {"policy", FlagType::string, "none", "automatic augmentation after the crop and flip (bilinear)",
       {"none", "imagenet", "ra", "ta_wide", "augmix"}},
      {"normalize", FlagType::boolean, "false",
       "also turn each complete batch into normalised f32 NCHW on the CPU (normalize_pixels)"},
      {"breakdown", FlagType::boolean, "false", "also time read / decode / whole transform per image, one thread"},
      {"json", FlagType::string, "", "also write the results as JSON to this file"},
  };
}

Options parse_args(int argc, char** argv) {
  const rt::cli::Flags f = parse_flags(argc, argv, flag_table(), kUsage);
  Options o;
  o.files_dir = user_path(f.str("files"));
  if (o.files_dir.empty()) throw rt::UsageError("--files DIR is required");
  o.threads = int(f.integer("threads"));
  o.batch = int(f.integer("batch"));
  o.rounds = int(f.integer("rounds"));
  o.warmup = int(f.integer("warmup"));
  o.size = int(f.integer("size"));
  o.seed = uint64_t(f.integer("seed"));
  o.mode = f.str("mode") == "full" ? DecodeMode::full : DecodeMode::region_scaled;
  o.augment.policy = rt::data::parse_auto_augment_policy(f.str("policy"));
  o.normalize = f.boolean("normalize");
  o.breakdown = f.boolean("breakdown");
  o.json_path = user_path(f.str("json"));
  return o;
}

const char* mode_name(DecodeMode m) { return m == DecodeMode::full ? "full" : "region"; }

std::vector<std::string> list_jpegs(const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error("--files: '" + dir + "' is not a directory");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (ext == ".jpg" || ext == ".jpeg") files.push_back(e.path().string());
  }
  if (files.empty()) throw std::runtime_error("no *.jpg or *.jpeg files in '" + dir + "'");
  std::sort(files.begin(), files.end());
  return files;
}

// The whole file into `buf` (resized to fit), as a loader reads it: open, fstat, read.
void read_file(const std::string& path, std::vector<uint8_t>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error("cannot stat '" + path + "': " + std::strerror(e));
  }
  buf.resize(size_t(st.st_size));
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::read(fd, buf.data() + done, buf.size() - done);
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      throw std::runtime_error("cannot read '" + path + "': " + (n == 0 ? "file shrank" : std::strerror(e)));
    }
    done += size_t(n);
  }
  ::close(fd);
}

// Image i's generator and flip; train_transform then draws the crop from the same generator.
struct ImageRng {
  rt::Generator g;
  bool flip;
};
ImageRng image_rng(uint64_t seed, size_t index) {
  ImageRng r{rt::Generator(rt::data::derive_seed(rt::data::derive_seed(seed, rt::data::kAugmentStream), index)),
             false};
  r.flip = r.g.uniform() < 0.5;
  return r;
}

// train_transform, then the policy when `augment` (the generator continuing after the crop's
// draws). Returns the generator as the crop left it, for timing the policy on its own.
rt::Generator transform_one(const std::vector<uint8_t>& bytes, const std::string& label, size_t index,
                            const Options& opt, DecodeMode mode, uint8_t* out, bool augment = false) {
  ImageRng r = image_rng(opt.seed, index);
  rt::data::train_transform(bytes, label, opt.size, r.g, r.flip, out, mode);
  const rt::Generator after_crop = r.g;
  if (augment && opt.augment.policy != AutoAugmentPolicy::none)
    rt::data::auto_augment(out, opt.size, opt.size, opt.augment, r.g);
  return after_crop;
}

// The DCT scale train_transform picks for a crop: the largest d in {8, 4, 2} with both
// sides >= d * size, else 1.
int dct_denom(const rt::data::Box& box, int size) {
  const int m = std::min(box.w, box.h);
  return m >= 8 * size ? 8 : m >= 4 * size ? 4 : m >= 2 * size ? 2 : 1;
}

// An independent reference for the region path: decode everything, average d x d blocks
// (what libjpeg's scaled IDCT approximates; the image's scaled size is ceil(W/d) x
// ceil(H/d)), then bilinear with half-pixel centres over the crop mapped to that scale,
// clamped to the scaled pixels the crop touches, as train_transform documents. Then flip.
void reference_transform(const std::vector<uint8_t>& bytes, const std::string& label, rt::data::Box box, int d,
                         int size, bool flip, uint8_t* out) {
  const rt::data::DecodedImage full = rt::data::decode_jpeg(bytes, label);
  const int W = full.width, H = full.height, SW = (W + d - 1) / d, SH = (H + d - 1) / d;
  std::vector<float> scaled(size_t(SW) * size_t(SH) * 3);  // (SH, SW, 3)
  for (int y = 0; y < SH; ++y)
    for (int x = 0; x < SW; ++x)
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        int n = 0;
        for (int yy = y * d; yy < std::min(H, (y + 1) * d); ++yy)
          for (int xx = x * d; xx < std::min(W, (x + 1) * d); ++xx, ++n)
            sum += full.rgb[(size_t(yy) * size_t(W) + size_t(xx)) * 3 + size_t(c)];
        scaled[(size_t(y) * size_t(SW) + size_t(x)) * 3 + size_t(c)] = float(sum / n);
      }
  auto taps = [&](int o, int start, int len, int lim, int& i0, int& i1, double& w) {
    const int lo = start / d, hi = std::min(lim, (start + len + d - 1) / d) - 1;
    const double pos = std::clamp(double(start) / d + (o + 0.5) * len / d / size - 0.5, double(lo), double(hi));
    i0 = int(pos);
    i1 = std::min(i0 + 1, hi);
    w = pos - i0;
  };
  for (int oy = 0; oy < size; ++oy) {
    int y0, y1;
    double wy;
    taps(oy, box.y, box.h, SH, y0, y1, wy);
    for (int ox = 0; ox < size; ++ox) {
      int x0, x1;
      double wx;
      taps(ox, box.x, box.w, SW, x0, x1, wx);
      auto at = [&](int y, int x, int c) { return scaled[(size_t(y) * size_t(SW) + size_t(x)) * 3 + size_t(c)]; };
      const int dx = flip ? size - 1 - ox : ox;
      for (int c = 0; c < 3; ++c) {
        const double v = (1 - wy) * ((1 - wx) * at(y0, x0, c) + wx * at(y0, x1, c)) +
                         wy * ((1 - wx) * at(y1, x0, c) + wx * at(y1, x1, c));
        out[(size_t(oy) * size_t(size) + size_t(dx)) * 3 + size_t(c)] = uint8_t(std::clamp(int(v + 0.5), 0, 255));
      }
    }
  }
}

struct Sanity {
  int size = 0, images = 0;
  int dct_scaled = 0;  // images among them whose crop was DCT-scaled
  double mad_full = 0, mad_full_image0 = 0;  // mean |region - full| over the bytes
  int max_full = 0;
  double mad_ref = 0;  // mean |region - reference_transform|
  int max_ref = 0;
  bool deterministic = true;
  double mean_value = 0;  // of the region outputs: a black or constant output would show
  int augmented_changed = -1;  // with a policy: images it changed (-1: no policy)
  double augmented_mean_value = 0;
};

// region_scaled vs full and vs reference_transform on the first few images at output side
// `size`; not a test, a guard against timing garbage.
Sanity sanity_check(const std::vector<std::string>& files, Options opt, int size) {
  opt.size = size;
  Sanity s;
  s.size = size;
  s.images = int(std::min<size_t>(16, files.size()));
  const size_t n = size_t(size) * size_t(size) * 3;
  std::vector<uint8_t> bytes, a(n), b(n), c(n), ref(n);
  double sum_full = 0, sum_ref = 0, sum_val = 0;
  for (int i = 0; i < s.images; ++i) {
    const std::string& f = files[size_t(i)];
    read_file(f, bytes);
    transform_one(bytes, f, size_t(i), opt, DecodeMode::region_scaled, a.data());
    transform_one(bytes, f, size_t(i), opt, DecodeMode::full, b.data());
    transform_one(bytes, f, size_t(i), opt, DecodeMode::region_scaled, c.data());
    if (a != c) s.deterministic = false;
    ImageRng r = image_rng(opt.seed, size_t(i));  // the crop and flip train_transform used
    const rt::data::ImageInfo info = rt::data::jpeg_info(bytes, f);
    const rt::data::Box box = rt::data::random_resized_crop_box(info.width, info.height, r.g);
    const int d = dct_denom(box, size);
    s.dct_scaled += d > 1;
    reference_transform(bytes, f, box, d, size, r.flip, ref.data());
    double img_full = 0;
    for (size_t k = 0; k < n; ++k) {
      const int df = std::abs(int(a[k]) - int(b[k])), dr = std::abs(int(a[k]) - int(ref[k]));
      img_full += df;
      sum_ref += dr;
      s.max_full = std::max(s.max_full, df);
      s.max_ref = std::max(s.max_ref, dr);
      sum_val += a[k];
    }
    if (i == 0) s.mad_full_image0 = img_full / double(n);
    sum_full += img_full;
    if (opt.augment.policy != AutoAugmentPolicy::none) {
      // TA-wide's identity op and its magnitude-0 bins leave some images as they were.
      transform_one(bytes, f, size_t(i), opt, DecodeMode::region_scaled, b.data(), true);
      transform_one(bytes, f, size_t(i), opt, DecodeMode::region_scaled, c.data(), true);
      if (b != c) s.deterministic = false;
      s.augmented_changed = std::max(s.augmented_changed, 0) + (b != a);
      double sum = 0;
      for (size_t k = 0; k < n; ++k) sum += b[k];
      s.augmented_mean_value += sum / (double(n) * s.images);
    }
  }
  s.mad_full = sum_full / (double(n) * s.images);
  s.mad_ref = sum_ref / (double(n) * s.images);
  s.mean_value = sum_val / (double(n) * s.images);
  return s;
}

volatile size_t g_sink = 0;

// Single-thread per-image times (us), one pass each over all files.
struct Breakdown {
  double read_us = 0;         // open + read of the file
  double header_us = 0;       // jpeg_info alone
  double decode_region_us = 0, decode_full_us = 0;  // decode_jpeg_region(crop, d) / decode_jpeg alone
  double transform_region_us = 0, transform_full_us = 0;  // train_transform: header, decode, resize, flip
  double resize_flip_us = 0;  // resize_bilinear of the crop of a decoded image + flip_horizontal
  double augment_us = 0;      // auto_augment alone on the transformed image (with a policy)
  double normalize_us = 0;    // normalize_pixels of one batch / B, this process's OpenMP team (--normalize)
  double dct_scaled_share = 0;  // images whose crop is decoded with DCT scaling (d > 1)
  double crop_area_share = 0;   // mean crop area / image area
};

Breakdown breakdown(const std::vector<std::string>& files, const Options& opt) {
  Breakdown b;
  const size_t nimg = files.size();
  std::vector<std::vector<uint8_t>> all(nimg);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < nimg; ++i) read_file(files[i], all[i]);
  b.read_us = s_between(t0, Clock::now()) * 1e6 / double(nimg);

  std::vector<rt::data::Box> boxes(nimg);
  std::vector<int> denoms(nimg);
  auto t = Clock::now();
  for (size_t i = 0; i < nimg; ++i) {
    const rt::data::ImageInfo info = rt::data::jpeg_info(all[i], files[i]);
    ImageRng r = image_rng(opt.seed, i);  // the crop train_transform will draw
    boxes[i] = rt::data::random_resized_crop_box(info.width, info.height, r.g);
    denoms[i] = dct_denom(boxes[i], opt.size);
    b.dct_scaled_share += denoms[i] > 1 ? 1.0 / double(nimg) : 0.0;
    b.crop_area_share += double(boxes[i].w) * boxes[i].h / (double(info.width) * info.height) / double(nimg);
  }
  b.header_us = s_between(t, Clock::now()) * 1e6 / double(nimg);

  size_t sink = 0;  // a byte of every result, so that no decode is optimised away
  t = Clock::now();
  for (size_t i = 0; i < nimg; ++i) sink += rt::data::decode_jpeg_region(all[i], files[i], boxes[i], denoms[i]).rgb[0];
  b.decode_region_us = s_between(t, Clock::now()) * 1e6 / double(nimg);
  std::vector<uint8_t> out(size_t(opt.size) * size_t(opt.size) * 3);
  double resize_s = 0;
  t = Clock::now();
  for (size_t i = 0; i < nimg; ++i) {
    const rt::data::DecodedImage img = rt::data::decode_jpeg(all[i], files[i]);
    const auto r0 = Clock::now();
    rt::data::resize_bilinear(img.rgb.data(), img.width, img.height, boxes[i], opt.size, opt.size, out.data());
    rt::data::flip_horizontal(out.data(), opt.size, opt.size);
    resize_s += s_between(r0, Clock::now());
    sink += img.rgb[0] + out[0];
  }
  b.decode_full_us = (s_between(t, Clock::now()) - resize_s) * 1e6 / double(nimg);
  b.resize_flip_us = resize_s * 1e6 / double(nimg);

  for (DecodeMode mode : {DecodeMode::region_scaled, DecodeMode::full}) {
    t = Clock::now();
    for (size_t i = 0; i < nimg; ++i) {
      transform_one(all[i], files[i], i, opt, mode, out.data());
      sink += out[0];
    }
    (mode == DecodeMode::full ? b.transform_full_us : b.transform_region_us) =
        s_between(t, Clock::now()) * 1e6 / double(nimg);
  }
  if (opt.augment.policy != AutoAugmentPolicy::none) {
    double augment_s = 0;
    for (size_t i = 0; i < nimg; ++i) {
      rt::Generator g = transform_one(all[i], files[i], i, opt, opt.mode, out.data());
      const auto a0 = Clock::now();
      rt::data::auto_augment(out.data(), opt.size, opt.size, opt.augment, g);
      augment_s += s_between(a0, Clock::now());
      sink += out[0];
    }
    b.augment_us = augment_s * 1e6 / double(nimg);
  }
  if (opt.normalize) {
    const rt::Tensor px = rt::Tensor::zeros({opt.batch, opt.size, opt.size, 3}, rt::DType::u8);
    rt::normalize_pixels(px, kMean, kStd, rt::MemoryFormat::contiguous);  // first touch of the allocator
    const int reps = 3;
    t = Clock::now();
    for (int k = 0; k < reps; ++k)
      sink += size_t(rt::normalize_pixels(px, kMean, kStd, rt::MemoryFormat::contiguous).data<float>()[0] != 0);
    b.normalize_us = s_between(t, Clock::now()) * 1e6 / double(reps * opt.batch);
  }
  g_sink = sink;
  return b;
}

// The uint8 batches a round writes into: (B, size, size, 3), and (nimg % B, ...) for a last,
// shorter batch, so that --normalize converts only the images of the batch.
struct BatchBuffers {
  rt::Tensor full, tail;
  rt::Tensor normalized;  // the last batch's model input, kept so that the work is observable
  double normalize_s = 0;  // normalize_pixels time in the last round
};

BatchBuffers make_batch_buffers(size_t nimg, const Options& opt) {
  BatchBuffers b;
  const int64_t S = opt.size;
  b.full = rt::Tensor::empty({opt.batch, S, S, 3}, rt::DType::u8);
  if (const size_t rest = nimg % size_t(opt.batch); rest != 0 && nimg > size_t(opt.batch))
    b.tail = rt::Tensor::empty({int64_t(rest), S, S, 3}, rt::DType::u8);
  else if (rest != 0)
    b.full = rt::Tensor::empty({int64_t(rest), S, S, 3}, rt::DType::u8);  // a single, short batch
  return b;
}

// One pass over all files with T threads; returns the wall seconds. Errors in a worker are
// kept and rethrown here after every thread has finished.
double run_round(const std::vector<std::string>& files, const Options& opt, BatchBuffers& bufs) {
  const size_t nimg = files.size(), B = size_t(opt.batch);
  const size_t img_bytes = size_t(opt.size) * size_t(opt.size) * 3;
  const size_t nbatches = (nimg + B - 1) / B;
  auto batch_tensor = [&](size_t b) -> const rt::Tensor& {
    return b + 1 == nbatches && bufs.tail.defined() ? bufs.tail : bufs.full;
  };
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::atomic_flag error_taken = ATOMIC_FLAG_INIT;
  size_t completed = 0;  // batches through the barrier; touched only in its completion step
  bufs.normalize_s = 0;
  // The last thread to arrive is the consumer: it normalises the batch when asked (the others
  // wait; normalize_pixels' OpenMP team does the work), then resets the counter for the next
  // batch before any thread is released.
  std::barrier sync(opt.threads, [&]() noexcept {
    const size_t b = completed++;
    if (opt.normalize && !failed.load()) {
      try {
        const auto t0 = Clock::now();
        bufs.normalized = rt::normalize_pixels(batch_tensor(b), kMean, kStd, rt::MemoryFormat::contiguous);
        bufs.normalize_s += s_between(t0, Clock::now());
      } catch (...) {
        if (!error_taken.test_and_set()) error = std::current_exception();
        failed.store(true);
      }
    }
    next.store(0, std::memory_order_relaxed);
  });

  auto worker = [&]() {
    std::vector<uint8_t> bytes;
    for (size_t b = 0; b < nbatches; ++b) {
      const size_t first = b * B, count = std::min(B, nimg - first);
      while (!failed.load(std::memory_order_relaxed)) {
        const size_t k = next.fetch_add(1);
        if (k >= count) break;
        const size_t i = first + k;
        try {
          read_file(files[i], bytes);
          transform_one(bytes, files[i], i, opt, opt.mode, batch_tensor(b).data<uint8_t>() + k * img_bytes, true);
        } catch (...) {
          if (!error_taken.test_and_set()) error = std::current_exception();
          failed.store(true);
        }
      }
      sync.arrive_and_wait();  // the batch is complete; a consumer would take it here
    }
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 1; t < opt.threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& th : pool) th.join();
  const double s = s_between(t0, Clock::now());
  if (error) std::rethrow_exception(error);
  return s;
}


// The outputs checked at the timed size, and at a quarter of it: on ImageNet-sized files a
// 224 crop is rarely >= 448 pixels on both sides, so only the smaller size exercises the
// DCT-scaled decode. Against the full decode the difference then grows with the content's
// fine detail (the scaled IDCT averages it, bilinear point-samples it); against
// reference_transform, which averages too, it should stay small. Printed, with a warning when
// they look wrong.
std::array<Sanity, 2> check_outputs(const std::vector<std::string>& files, const Options& opt, const char* policy) {
  std::array<Sanity, 2> sanity;
  for (int k = 0; k < 2; ++k) {
    const Sanity& s = sanity[size_t(k)] = sanity_check(files, opt, k == 0 ? opt.size : std::max(1, opt.size / 4));
    std::printf("sanity at %d (%d of %d images DCT-scaled): region vs full decode: mean |diff| %.3f (image 0: "
                "%.3f), max %d; region vs block-average reference: mean |diff| %.3f, max %d; mean value %.1f; %s\n",
                s.size, s.dct_scaled, s.images, s.mad_full, s.mad_full_image0, s.max_full, s.mad_ref, s.max_ref,
                s.mean_value, s.deterministic ? "deterministic" : "NOT deterministic");
    if (s.augmented_changed >= 0)
      std::printf("sanity at %d, policy %s: %d of %d images changed by it; mean value %.1f\n", s.size, policy,
                  s.augmented_changed, s.images, s.augmented_mean_value);
    if (!s.deterministic || s.mad_ref > 4.0 || s.mean_value < 5.0 || s.mean_value > 250.0 ||
        s.augmented_changed == 0)
      std::printf("WARNING: the outputs look wrong (want deterministic, mean |diff| vs the reference <= 4, a "
                  "plausible mean value, some images changed by the policy)\n");
  }
  return sanity;
}

// --breakdown's one-thread costs per stage, printed.
Breakdown print_breakdown(const std::vector<std::string>& files, const Options& opt, const char* policy) {
  const Breakdown bd = breakdown(files, opt);
  const double tr = opt.mode == DecodeMode::full ? bd.transform_full_us : bd.transform_region_us;
  std::printf("breakdown, 1 thread, us/image: read %.0f | header %.0f | decode region %.0f, full %.0f | "
              "resize+flip %.0f | train_transform region %.0f, full %.0f | read share of read+transform(%s) "
              "%.1f%%\n",
              bd.read_us, bd.header_us, bd.decode_region_us, bd.decode_full_us, bd.resize_flip_us,
              bd.transform_region_us, bd.transform_full_us, mode_name(opt.mode),
              100.0 * bd.read_us / (bd.read_us + tr));
  std::printf("crops: mean area %.1f%% of the image; %.1f%% of the images DCT-scaled (crop >= 2x%d on both sides)\n",
              100.0 * bd.crop_area_share, 100.0 * bd.dct_scaled_share, opt.size);
  if (opt.augment.policy != AutoAugmentPolicy::none || opt.normalize)
    std::printf("breakdown, us/image: auto_augment(%s) %.0f (1 thread) | normalize_pixels %.0f (batch of %d / %d, "
                "OpenMP team)\n",
                policy, bd.augment_us, bd.normalize_us, opt.batch, opt.batch);
  return bd;
}

// The timed rounds' measurements, each round's and the run's.
struct Rounds {
  std::vector<double> rates, others, normalize_shares;  // per round: images/s, others' CPU share, normalize's
  double others_all = -1;                               // others' CPU share over all timed rounds
};

// The --json file's text (compare_jpeg_pipeline_bench.py reads it beside the PyTorch script's).
std::string results_json(const Options& opt, const char* policy, size_t files, double mean_kb, const Rounds& r,
                         const std::array<Sanity, 2>& sanity, const Breakdown& bd) {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const double rate = median(r.rates);
  std::ostringstream out;
  out << "{\n  \"impl\": \"ringtape\",\n  \"version\": " << json_str(kJpegLib) << ",\n  \"mode\": \""
      << mode_name(opt.mode) << "\",\n  \"policy\": \"" << policy << "\",\n  \"normalize\": "
      << (opt.normalize ? "true" : "false") << ",\n  \"omp_num_threads\": " << json_str(omp ? omp : "")
      << ",\n  \"threads\": " << opt.threads << ",\n  \"batch\": " << opt.batch
      << ",\n  \"size\": " << opt.size << ",\n  \"files\": " << files << ",\n  \"mean_kb\": " << num(mean_kb)
      << ",\n  \"warmup\": " << opt.warmup << ",\n  \"rounds\": " << opt.rounds << ",\n  \"img_per_s\": " << num(rate)
      << ",\n  \"img_per_s_per_thread\": " << num(rate / opt.threads) << ",\n  \"round_img_per_s\": "
      << num_list(r.rates) << ",\n  \"round_others_cpu\": " << num_list(r.others)
      << ",\n  \"round_normalize_share\": " << num_list(r.normalize_shares) << ",\n  \"others_cpu\": "
      << num(r.others_all) << ",\n  \"sanity\": [";
  for (int k = 0; k < 2; ++k) {
    const Sanity& s = sanity[size_t(k)];
    out << (k ? ",\n    " : "\n    ") << "{\"size\": " << s.size << ", \"images\": " << s.images
        << ", \"dct_scaled\": " << s.dct_scaled << ", \"mean_abs_diff_full_vs_region\": " << num(s.mad_full)
        << ", \"mean_abs_diff_image0\": " << num(s.mad_full_image0) << ", \"max_abs_diff\": " << s.max_full
        << ", \"mean_abs_diff_vs_reference\": " << num(s.mad_ref) << ", \"max_abs_diff_vs_reference\": "
        << s.max_ref << ", \"mean_value\": " << num(s.mean_value)
        << ", \"deterministic\": " << (s.deterministic ? "true" : "false")
        << ", \"augmented_changed\": " << s.augmented_changed
        << ", \"augmented_mean_value\": " << num(s.augmented_mean_value) << "}";
  }
  out << "]";
  if (opt.breakdown)
    out << ",\n  \"breakdown_us\": {\"read\": " << num(bd.read_us) << ", \"header\": " << num(bd.header_us)
        << ", \"decode_region\": " << num(bd.decode_region_us) << ", \"decode_full\": " << num(bd.decode_full_us)
        << ", \"resize_flip\": " << num(bd.resize_flip_us)
        << ", \"transform_region\": " << num(bd.transform_region_us)
        << ", \"transform_full\": " << num(bd.transform_full_us)
        << ", \"dct_scaled_share\": " << num(bd.dct_scaled_share)
        << ", \"crop_area_share\": " << num(bd.crop_area_share) << ", \"augment\": " << num(bd.augment_us)
        << ", \"normalize\": " << num(bd.normalize_us) << "}";
  out << "\n}\n";
  return out.str();
}

int run(const Options& opt) {
  const std::vector<std::string> files = list_jpegs(opt.files_dir);
  uint64_t total_bytes = 0;
  for (const std::string& f : files) total_bytes += fs::file_size(f);
  const double mean_kb = double(total_bytes) / double(files.size()) / 1000.0;
  const char* policy = rt::data::auto_augment_policy_name(opt.augment.policy);
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf("ringtape train_transform | %s | %zu files (mean %.1f KB) in %s | threads %d | batch %d | mode %s | "
              "size %d | policy %s | normalize %s | warmup %d | median of %d\n",
              kJpegLib, files.size(), mean_kb, opt.files_dir.c_str(), opt.threads, opt.batch, mode_name(opt.mode),
              opt.size, policy,
              opt.normalize ? (std::string("f32 NCHW on the CPU, normalize_pixels, OMP_NUM_THREADS=") +
                               (omp ? omp : "unset")).c_str()
                            : "no (uint8 batch)",
              opt.warmup, opt.rounds);
  std::fflush(stdout);
  const std::array<Sanity, 2> sanity = check_outputs(files, opt, policy);
  const Breakdown bd = opt.breakdown ? print_breakdown(files, opt, policy) : Breakdown{};

  // (B, size, size, 3) uint8, the batch every round writes into.
  BatchBuffers bufs = make_batch_buffers(files.size(), opt);
  for (int w = 0; w < opt.warmup; ++w) run_round(files, opt, bufs);
  Rounds rounds;
  const CpuSample start = sample_cpu();
  for (int r = 0; r < opt.rounds; ++r) {
    const CpuSample a = sample_cpu();
    const double sec = run_round(files, opt, bufs);
    rounds.others.push_back(others_cpu_share(a, sample_cpu()));
    rounds.rates.push_back(double(files.size()) / sec);
    rounds.normalize_shares.push_back(bufs.normalize_s / sec);
    std::printf("round %d: %.3f s, %.1f images/s (%.1f per thread), others %.1f%%", r + 1, sec, rounds.rates.back(),
                rounds.rates.back() / opt.threads, 100.0 * rounds.others.back());
    if (opt.normalize) std::printf(", normalize_pixels %.1f%% of the time", 100.0 * rounds.normalize_shares.back());
    std::printf("\n");
    std::fflush(stdout);
  }
  rounds.others_all = others_cpu_share(start, sample_cpu());
  const double rate = median(rounds.rates);
  std::printf("RESULT ringtape threads %d mode %s policy %s%s: %.1f images/s, %.1f per thread (median of %d "
              "rounds)\n",
              opt.threads, mode_name(opt.mode), policy, opt.normalize ? " normalize" : "", rate, rate / opt.threads,
              opt.rounds);
  if (rounds.others_all >= 0)
    std::printf("other processes used %.1f%% of the machine's CPU time during the timed rounds%s\n",
                100 * rounds.others_all,
                rounds.others_all > kBusyShare ? ": WARNING: the timings are distorted, rerun when idle" : "");
  if (!opt.json_path.empty())
    write_json_file(opt.json_path, results_json(opt, policy, files.size(), mean_kb, rounds, sanity, bd));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return rt::bench::bench_main("jpeg_pipeline_bench", argc, argv, parse_args, run, flag_table, kUsage);
}
