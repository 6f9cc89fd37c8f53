// ringtape's whole training input path on the CPU, as `ringtape train` runs it: open_dataset
// ("imagenet": a folder of JPEGs; "webdataset": `ringtape pack`'s tar shards), a shuffling
// Sampler (for shards, a shard permutation + a 5000-example shuffle buffer, Note [Shard order]),
// a Loader with T worker threads building (B, 224, 224, 3) uint8 batches (read, decode,
// RandomResizedCrop(224) with region/DCT-scaled decoding, flip: imagenet_example), consumed
// by the main thread; with --normalize the consumer turns each batch into the normalised f32
// (B, 3, 224, 224) model input on the CPU with the engine's normalize_pixels (what ringtape's
// trainer does on the GPU; timed here to compare with torchvision, which normalises in its
// workers). bench/dataset_bench_torch.py is torchvision's ImageFolder + DataLoader;
// bench/run_shard_bench.sh runs both on the same corpus and prints the table (see
// bench/README.md, "Folders vs shards").
//
//   bazel-bin/bench/dataset_bench --dataset imagenet|webdataset --data-path P [--workers 1]
//       [--batch 256] [--epochs 3] [--warmup 1] [--normalize] [--seed 0] [--shuffle-buffer 5000]
//       [--no-pin] [--json FILE]
//
// Cores: unless --no-pin, the process (the workers, the consumer and the OpenMP team of
// normalize_pixels, all created afterwards) is pinned to the first max(1, T) CPUs it may run
// on, so that at T = 1 everything it does, normalisation included, shares one core: the
// per-core rate. The script sets OMP_NUM_THREADS=T (OMP_WAIT_POLICY=passive).
//
// One measured pass = one whole epoch (every example once, the last batch short), after
// --warmup untimed epochs (page cache warm, workers started); each epoch has its own order
// and augmentation draws. Prints progress on stderr and one JSON line on stdout: the median
// epoch's images/s, every epoch's, the CPU seconds per image (all threads, from getrusage:
// independent of the pinning) and how busy the rest of the machine was.
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "data/datasets/dataset.h"
#include "data/loading/loader.h"
#include "data/loading/sampler.h"
#include "engine/ops.h"
#include "engine/tensor.h"

namespace {

using namespace rt::bench;

struct Options {
  std::string dataset;
  std::string data_path;
  int workers = 0;
  int batch = 0;
  int epochs = 0;
  int warmup = 0;
  bool normalize = false;
  uint64_t seed = 0;
  int64_t shuffle_buffer = 0;
  bool pin = true;
  std::string json_path;
};

const char* kUsage =
    "usage: dataset_bench --dataset imagenet|webdataset --data-path P [--workers T] [--batch B] [--epochs N] "
    "[--warmup W] [--normalize] [--seed S] [--shuffle-buffer N] [--no-pin] [--json FILE]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::cli::FlagType;
  using rt::cli::Topic;
  return {
      {"dataset", FlagType::string, "imagenet", "imagenet: DIR/train/<class>/*.jpg; webdataset: DIR/train-*.tar",
       {"imagenet", "webdataset"}},
      {"data-path", FlagType::string, "", "the dataset's folder, as for `ringtape train --data-path`; required"},
      {"workers", FlagType::integer, "1", "loader worker threads (0: batches built in the consumer)", {},
       Topic::output, int_at_least(0)},
      {"batch", FlagType::integer, "256", "images per batch", {}, Topic::output, int_at_least(1)},
      {"epochs", FlagType::integer, "3", "timed epochs; the median is reported", {}, Topic::output, int_at_least(1)},
      {"warmup", FlagType::integer, "1", "untimed epochs first", {}, Topic::output, int_at_least(0)},
      {"normalize", FlagType::boolean, "false",
       "the consumer turns each batch into normalised f32 NCHW on the CPU (normalize_pixels)"},
      {"seed", FlagType::integer, "0", "shuffling and augmentation seed", {}, Topic::output, int_at_least(0)},
      {"shuffle-buffer", FlagType::integer, "5000", "webdataset: the shuffle buffer (Note [Shard order])", {},
       Topic::output, int_at_least(0)},
      {"no-pin", FlagType::boolean, "false", "do not pin the process to max(1, workers) CPUs"},
      {"json", FlagType::string, "", "also write the JSON line to this file"},
  };
}

Options parse_args(int argc, char** argv) {
  const rt::cli::Flags f = parse_flags(argc, argv, flag_table(), kUsage);
  Options o;
  o.dataset = f.str("dataset");
  o.data_path = user_path(f.str("data-path"));
  if (o.data_path.empty()) throw rt::UsageError("--data-path is required");
  o.workers = int(f.integer("workers"));
  o.batch = int(f.integer("batch"));
  o.epochs = int(f.integer("epochs"));
  o.warmup = int(f.integer("warmup"));
  o.normalize = f.boolean("normalize");
  o.seed = uint64_t(f.integer("seed"));
  o.shuffle_buffer = f.integer("shuffle-buffer");
  o.pin = !f.boolean("no-pin");
  o.json_path = user_path(f.str("json"));
  return o;
}

// Pins the calling thread (and so every thread it creates later) to the first `n` CPUs of
// its current mask. Returns the CPUs chosen, "" when there are fewer than n (then unpinned).
std::string pin_to_cpus(int n) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return "";
  cpu_set_t mine;
  CPU_ZERO(&mine);
  std::string list;
  int taken = 0;
  for (int c = 0; c < CPU_SETSIZE && taken < n; ++c)
    if (CPU_ISSET(c, &allowed)) {
      CPU_SET(c, &mine);
      list += (taken++ ? "," : "") + std::to_string(c);
    }
  if (taken < n) return "";
  if (sched_setaffinity(0, sizeof mine, &mine) != 0) return "";
  return list;
}

double process_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// What a sanity check of the first batch found.
struct FirstBatch {
  bool checked = false;
  double mean_value = 0;  // of its uint8 pixels: black or constant output would show
};

struct Epoch {
  int64_t images = 0;
  double seconds = 0;
  double normalize_s = 0;  // consumer time in normalize_pixels
  double cpu_s = 0;        // the process's CPU time, all threads
  double others = -1;      // the rest of the machine's CPU share
  int64_t skipped = 0;     // unreadable examples replaced
};

Epoch run_epoch(rt::data::Loader& loader, int64_t epoch, const Options& opt, FirstBatch& first, double& sink) {
  Epoch e;
  const double cpu0 = process_cpu_s();
  const CpuSample a = sample_cpu();
  const auto t0 = Clock::now();
  loader.start_epoch(epoch);
  while (std::optional<rt::data::Batch> b = loader.next()) {
    const rt::Tensor& px = b->images;
    if (!first.checked) {
      const rt::Shape& s = px.shape();
      if (px.dtype() != rt::DType::u8 || s.size() != 4 || s[1] != 224 || s[2] != 224 || s[3] != 3)
        throw std::runtime_error("the loader's batch is not (N, 224, 224, 3) uint8");
      const uint8_t* p = px.data<uint8_t>();
      double sum = 0;
      for (int64_t k = 0; k < px.numel(); ++k) sum += p[k];
      first.mean_value = sum / double(px.numel());
      first.checked = true;
    }
    e.images += px.size(0);
    if (opt.normalize) {
      const auto n0 = Clock::now();
      const rt::Tensor x = rt::normalize_pixels(px, b->norm.mean, b->norm.std, rt::MemoryFormat::contiguous);
      e.normalize_s += s_between(n0, Clock::now());
      sink += double(x.data<float>()[x.numel() - 1]);
    } else {
      sink += double(px.data<uint8_t>()[px.numel() - 1]);
    }
  }
  e.seconds = s_between(t0, Clock::now());
  e.others = others_cpu_share(a, sample_cpu());
  e.cpu_s = process_cpu_s() - cpu0;
  e.skipped = loader.skipped_in_epoch();
  return e;
}

int run(const Options& opt) {
  const std::string cpus = opt.pin ? pin_to_cpus(std::max(1, opt.workers)) : "";
  if (opt.pin && cpus.empty())
    std::fprintf(stderr, "WARNING: cannot pin to %d CPUs; running unpinned\n", std::max(1, opt.workers));

  rt::data::DatasetOptions dopt;
  dopt.image_folder.seed = opt.seed;  // train_crop_size 224, bilinear, no policy: the defaults
  const auto t_open = Clock::now();
  std::unique_ptr<rt::data::Dataset> ds = rt::data::open_dataset(opt.dataset, opt.data_path, "train", dopt);
  const double open_s = s_between(t_open, Clock::now());
  rt::data::SamplerOptions so;
  so.shuffle = true;
  so.seed = opt.seed;
  so.shard_sizes = ds->shard_sizes();
  if (!so.shard_sizes.empty()) so.shuffle_buffer = opt.shuffle_buffer;
  rt::data::Loader loader(*ds, rt::data::Sampler(ds->size(), opt.batch, so), {.workers = opt.workers});

  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::fprintf(stderr,
               "ringtape %s | %s | %lld examples%s | workers %d | batch %d | normalize %s | cpus %s | opened in "
               "%.2f s | warmup %d | median of %d epochs\n",
               opt.dataset.c_str(), opt.data_path.c_str(), (long long)ds->size(),
               so.shard_sizes.empty() ? "" : (" in " + std::to_string(so.shard_sizes.size()) + " shard(s)").c_str(),
               opt.workers, opt.batch,
               opt.normalize ? (std::string("f32 NCHW on the CPU, OMP_NUM_THREADS=") + (omp ? omp : "unset")).c_str()
                             : "no (uint8 batch)",
               cpus.empty() ? "unpinned" : cpus.c_str(), open_s, opt.warmup, opt.epochs);

  FirstBatch first;
  double sink = 0;
  for (int w = 0; w < opt.warmup; ++w) {
    const Epoch e = run_epoch(loader, w, opt, first, sink);
    std::fprintf(stderr, "warm-up epoch %d: %.3f s, %.1f images/s\n", w + 1, e.seconds, double(e.images) / e.seconds);
  }
  std::vector<double> rates, others, cpu_per_img, norm_share;
  int64_t skipped = 0, images = 0;
  for (int k = 0; k < opt.epochs; ++k) {
    const Epoch e = run_epoch(loader, opt.warmup + k, opt, first, sink);
    rates.push_back(double(e.images) / e.seconds);
    others.push_back(e.others);
    cpu_per_img.push_back(e.cpu_s / double(e.images));
    norm_share.push_back(e.normalize_s / e.seconds);
    skipped += e.skipped;
    images = e.images;
    std::fprintf(stderr, "epoch %d: %.3f s, %.1f images/s, %.2f ms CPU/image, others %.1f%%", k + 1, e.seconds,
                 rates.back(), 1e3 * cpu_per_img.back(), 100.0 * e.others);
    if (opt.normalize) std::fprintf(stderr, ", normalize_pixels %.1f%% of the time", 100.0 * norm_share.back());
    std::fprintf(stderr, "\n");
  }
  const double rate = median(rates), others_med = median(others);
  if (others_med > kBusyShare)
    std::fprintf(stderr, "WARNING: other processes used %.1f%% of the machine's CPU time: the timings are distorted, "
                         "rerun when idle\n", 100.0 * others_med);
  if (skipped > 0) std::fprintf(stderr, "WARNING: %lld unreadable examples were replaced\n", (long long)skipped);
  if (first.mean_value < 5.0 || first.mean_value > 250.0)
    std::fprintf(stderr, "WARNING: the first batch's mean pixel value %.1f looks wrong\n", first.mean_value);

  const std::string line =
      "{\"impl\": \"ringtape\", \"dataset\": " + json_str(opt.dataset) + ", \"data_path\": " +
      json_str(opt.data_path) + ", \"examples\": " + std::to_string(ds->size()) +
      ", \"shards\": " + std::to_string(so.shard_sizes.size()) + ", \"workers\": " + std::to_string(opt.workers) +
      ", \"cpus\": " + json_str(cpus) + ", \"omp_num_threads\": " + json_str(omp ? omp : "") +
      ", \"batch\": " + std::to_string(opt.batch) + ", \"normalize\": " + (opt.normalize ? "true" : "false") +
      ", \"warmup\": " + std::to_string(opt.warmup) + ", \"epochs\": " + std::to_string(opt.epochs) +
      ", \"images_per_epoch\": " + std::to_string(images) + ", \"img_per_s\": " + num(rate) +
      ", \"img_per_s_per_worker\": " + num(rate / std::max(1, opt.workers)) +
      ", \"epoch_img_per_s\": " + num_list(rates) + ", \"cpu_s_per_img\": " + num(median(cpu_per_img)) +
      ", \"normalize_share\": " + num(median(norm_share)) + ", \"others_cpu\": " + num(others_med) +
      ", \"epoch_others_cpu\": " + num_list(others) + ", \"skipped\": " + std::to_string(skipped) +
      ", \"first_batch_mean\": " + num(first.mean_value) + ", \"open_s\": " + num(open_s) +
      ", \"sink\": " + num(sink) + "}";
  std::printf("%s\n", line.c_str());
  if (!opt.json_path.empty()) write_json_file(opt.json_path, line + "\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return rt::bench::bench_main("dataset_bench", argc, argv, parse_args, run, flag_table, kUsage);
}
