// conv2d forward + backward on the CPU backend, timed for every distinct conv shape of
// ResNet50 (bench/conv_shapes.txt). bench/conv_bench_torch.py measures PyTorch the same way
// and prints the same lines and JSON; bench/run_conv_bench.sh runs both and compares.
//
//   bazel run //bench:conv_bench -- [--repeats 3] [--warmup 1] [--channels-last]
//                                   [--json FILE] [--only SUBSTRING] [--shapes FILE]
//
// Per shape: x (N, C, H, W) and w (O, C, KH, KW) from rt::randn, no bias, both requiring
// grad except the stem's input (conv1: the image needs no gradient in training). Each
// repetition times y = conv2d(x, w) and then y.backward(seed) with a fixed random seed
// gradient; the first `warmup` repetitions are dropped and the median of the rest is
// reported. FLOPs: 2*N*O*HO*WO*C*KH*KW for the forward, twice that for the backward (data
// and filter gradients), the data half left out where the input needs no gradient.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"

namespace {

using namespace rt::bench;

struct ConvShape {
  std::string name;
  int64_t n = 0, c = 0, h = 0, w = 0, o = 0, kh = 0, kw = 0;
  int stride = 1, pad = 0;
  int64_t count = 0;
};

// From the command line; the defaults are flag_table()'s.
struct Options {
  std::string shapes_path;
  int repeats = 0;
  int warmup = 0;
  bool channels_last = false;
  std::string json_path;
  std::string only;
};

struct Result {
  ConvShape s;
  int64_t ho = 0, wo = 0;
  bool input_grad = true;
  double flops = 0;  // forward + backward, one occurrence
  double fwd_ms = 0, bwd_ms = 0, ms = 0;
  std::vector<double> ms_all;
  double gflops() const { return flops / (ms * 1e6); }
};

const char* kUsage = "usage: conv_bench [--repeats N] [--warmup N] [--channels-last] [--json FILE] [--only SUBSTRING] "
                     "[--shapes FILE]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::cli::FlagType;
  using rt::cli::Topic;
  return {
      {"repeats", FlagType::integer, "3", "timed repetitions per shape; the median is reported", {}, Topic::output,
       int_at_least(1)},
      {"warmup", FlagType::integer, "1", "untimed repetitions first", {}, Topic::output, int_at_least(0)},
      {"channels-last", FlagType::boolean, "false", "NHWC input, weight and gradients (else NCHW)"},
      {"json", FlagType::string, "", "also write the results as JSON to this file"},
      {"only", FlagType::string, "", "only the shapes whose name contains this substring"},
      {"shapes", FlagType::string, "bench/conv_shapes.txt", "the shape list"},
  };
}

Options parse_args(int argc, char** argv) {
  const rt::cli::Flags f = parse_flags(argc, argv, flag_table(), kUsage);
  Options o;
  o.repeats = int(f.integer("repeats"));
  o.warmup = int(f.integer("warmup"));
  o.channels_last = f.boolean("channels-last");
  o.json_path = user_path(f.str("json"));
  o.only = f.str("only");
  // The default is relative to the workspace root (the runfiles tree under bazel run).
  o.shapes_path = f.given("shapes") ? user_path(f.str("shapes")) : f.str("shapes");
  return o;
}

// Columns: name N C H W O KH KW stride pad count; '#' starts a comment.
std::vector<ConvShape> read_shapes(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open the shape list '" + path +
                             "' (run from the workspace root, use bazel run, or pass --shapes)");
  std::vector<ConvShape> shapes;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream ls(line);
    ConvShape s;
    if (!(ls >> s.name)) continue;  // blank or comment
    std::string extra;
    if (!(ls >> s.n >> s.c >> s.h >> s.w >> s.o >> s.kh >> s.kw >> s.stride >> s.pad >> s.count) || (ls >> extra))
      throw std::runtime_error(path + ":" + std::to_string(lineno) +
                               ": want 'name N C H W O KH KW stride pad count', got '" + line + "'");
    if (s.n < 1 || s.c < 1 || s.h < 1 || s.w < 1 || s.o < 1 || s.kh < 1 || s.kw < 1 || s.stride < 1 || s.pad < 0 ||
        s.count < 1 || s.h + 2 * s.pad < s.kh || s.w + 2 * s.pad < s.kw)
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": impossible conv shape '" + line + "'");
    shapes.push_back(s);
  }
  if (shapes.empty()) throw std::runtime_error("no shapes in '" + path + "'");
  return shapes;
}

Result run_one(const ConvShape& s, const Options& opt, rt::Generator& gen) {
  const rt::MemoryFormat fmt = opt.channels_last ? rt::MemoryFormat::channels_last : rt::MemoryFormat::contiguous;
  const rt::DType f32 = rt::DType::f32;
  const rt::Device cpu = rt::Device::cpu();

  Result r;
  r.s = s;
  r.ho = (s.h + 2 * s.pad - s.kh) / s.stride + 1;
  r.wo = (s.w + 2 * s.pad - s.kw) / s.stride + 1;
  r.input_grad = s.name != "conv1";  // the stem's input is the image
  const double fwd_flops = 2.0 * double(s.n) * double(s.o) * double(r.ho) * double(r.wo) * double(s.c) *
                           double(s.kh) * double(s.kw);
  r.flops = fwd_flops * (r.input_grad ? 3.0 : 2.0);

  // The weight takes the input's format, as model.to(memory_format) does in PyTorch.
  rt::Tensor x = rt::randn({s.n, s.c, s.h, s.w}, gen, f32, cpu, fmt);
  rt::Tensor w = rt::randn({s.o, s.c, s.kh, s.kw}, gen, f32, cpu, fmt);
  rt::Tensor seed = rt::randn({s.n, s.o, r.ho, r.wo}, gen, f32, cpu, fmt);
  x.set_requires_grad(r.input_grad);
  w.set_requires_grad(true);
  const rt::Conv2dParams p = rt::Conv2dParams::make(s.stride, s.pad);

  std::vector<double> fwd, bwd;
  for (int i = 0; i < opt.warmup + opt.repeats; ++i) {
    if (r.input_grad) x.zero_grad();
    w.zero_grad();
    const auto t0 = Clock::now();
    rt::Tensor y = rt::conv2d(x, w, rt::Tensor(), p);
    const auto t1 = Clock::now();
    y.backward(seed);
    const auto t2 = Clock::now();
    if (i == 0) {
      const rt::Shape want{s.n, s.o, r.ho, r.wo};
      RT_CHECK(y.shape() == want, s.name, ": conv2d returned ", rt::shape_str(y.shape()), ", expected ",
               rt::shape_str(want));
      if (y.format() != fmt)
        std::fprintf(stderr, "note: %s: conv2d of a %s input returned a %s output\n", s.name.c_str(),
                     rt::format_name(fmt), rt::format_name(y.format()));
      RT_CHECK(w.grad().defined() && w.grad().shape() == w.shape(), s.name, ": no weight gradient of shape ",
               rt::shape_str(w.shape()), " after backward");
      RT_CHECK(x.grad().defined() == r.input_grad, s.name, ": input gradient ",
               r.input_grad ? "missing" : "computed although the input does not require grad");
      if (r.input_grad)
        RT_CHECK(x.grad().shape() == x.shape(), s.name, ": input gradient has shape ",
                 rt::shape_str(x.grad().shape()), ", expected ", rt::shape_str(x.shape()));
    }
    if (i >= opt.warmup) {
      fwd.push_back(ms_between(t0, t1));
      bwd.push_back(ms_between(t1, t2));
      r.ms_all.push_back(ms_between(t0, t2));
    }
  }
  r.fwd_ms = median(fwd);
  r.bwd_ms = median(bwd);
  r.ms = median(r.ms_all);
  return r;
}

// The same line format as conv_bench_torch.py.
void print_result(const Result& r) {
  const ConvShape& s = r.s;
  char dims[96];
  std::snprintf(dims, sizeof dims, "%lldx%lldx%lldx%lld->%lld k%lldx%lld s%d p%d", (long long)s.n, (long long)s.c,
                (long long)s.h, (long long)s.w, (long long)s.o, (long long)s.kh, (long long)s.kw, s.stride, s.pad);
  std::printf("%-22s %-32s x%-3lld %s fwd %9.3f ms  bwd %9.3f ms  total %9.3f ms  %7.1f GFLOP/s\n", s.name.c_str(),
              dims, (long long)s.count, r.input_grad ? "   " : "(*)", r.fwd_ms, r.bwd_ms, r.ms, r.gflops());
  std::fflush(stdout);
}


// The --json file's text: the run's settings, each shape's result, the count-weighted total.
std::string results_json(const Options& opt, int threads, const std::vector<Result>& results, double total_ms,
                         double total_flops, int64_t convs, double others_cpu) {
  std::ostringstream out;
  out << "{\n  \"impl\": \"ringtape\",\n  \"version\": \"ringtape cpu (Eigen)\",\n  \"threads\": " << threads
      << ",\n  \"format\": \"" << (opt.channels_last ? "nhwc" : "nchw") << "\",\n  \"dtype\": \"f32\",\n"
      << "  \"warmup\": " << opt.warmup << ",\n  \"repeats\": " << opt.repeats << ",\n  \"shapes\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const ConvShape& s = r.s;
    out << "    {\"name\": " << json_str(s.name) << ", \"N\": " << s.n << ", \"C\": " << s.c << ", \"H\": " << s.h
        << ", \"W\": " << s.w << ", \"O\": " << s.o << ", \"KH\": " << s.kh << ", \"KW\": " << s.kw
        << ", \"stride\": " << s.stride << ", \"pad\": " << s.pad << ", \"count\": " << s.count
        << ", \"HO\": " << r.ho << ", \"WO\": " << r.wo << ", \"input_grad\": " << (r.input_grad ? "true" : "false")
        << ", \"flops\": " << num(r.flops) << ", \"fwd_ms\": " << num(r.fwd_ms) << ", \"bwd_ms\": " << num(r.bwd_ms)
        << ", \"ms\": " << num(r.ms) << ", \"gflops\": " << num(r.gflops()) << ", \"ms_all\": " << num_list(r.ms_all)
        << "}" << (i + 1 < results.size() ? "," : "") << "\n";
  }
  out << "  ],\n  \"others_cpu\": " << num(others_cpu) << ",\n  \"total\": {\"convs\": " << convs
      << ", \"ms\": " << num(total_ms) << ", \"flops\": " << num(total_flops)
      << ", \"gflops\": " << num(total_flops / (total_ms * 1e6)) << "}\n}\n";
  return out.str();
}

int run(const Options& opt) {
  std::vector<ConvShape> shapes = read_shapes(opt.shapes_path);
  if (!opt.only.empty()) {
    std::erase_if(shapes, [&](const ConvShape& s) { return s.name.find(opt.only) == std::string::npos; });
    if (shapes.empty()) throw rt::UsageError("no shape name contains '" + opt.only + "'");
  }
  int threads = 1;
#ifdef _OPENMP
  threads = omp_get_max_threads();
#endif
  std::printf("ringtape conv2d f32 cpu | threads %d | %s | warmup %d | median of %d | %s\n", threads,
              opt.channels_last ? "nhwc" : "nchw", opt.warmup, opt.repeats, opt.shapes_path.c_str());
  std::fflush(stdout);

  const CpuSample start = sample_cpu();
  rt::Generator gen(1234);
  std::vector<Result> results;
  double total_ms = 0, total_flops = 0;
  int64_t convs = 0;
  for (const ConvShape& s : shapes) {
    results.push_back(run_one(s, opt, gen));
    print_result(results.back());
    total_ms += double(s.count) * results.back().ms;
    total_flops += double(s.count) * results.back().flops;
    convs += s.count;
  }
  const double others = others_cpu_share(start, sample_cpu());
  std::printf("TOTAL %lld convs, count-weighted: %.3f ms  %.1f GFLOP/s   ((*) = no input gradient)\n",
              (long long)convs, total_ms, total_flops / (total_ms * 1e6));
  if (others >= 0)
    std::printf("other processes used %.1f%% of the machine's CPU time during the run%s\n", 100 * others,
                others > kBusyShare ? ": the timings are distorted, rerun when the machine is idle" : "");
  if (!opt.json_path.empty())
    write_json_file(opt.json_path, results_json(opt, threads, results, total_ms, total_flops, convs, others));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return rt::bench::bench_main("conv_bench", argc, argv, parse_args, run, flag_table, kUsage);
}
