// One training step of a ResNet: forward, cross-entropy, backward and the SGD update
// (momentum 0.9, weight decay), timed over repeated steps on a fixed random batch, on the
// CPU or a GPU, in a training precision (train/precision.h: fp32, tf32, bf16 or fp16 with
// f32 master weights; the step goes through train::MixedPrecision exactly as `ringtape
// train` does). bench/train_step_bench_torch.py does the same in PyTorch;
// bench/run_train_step_bench.sh runs both side by side: on the CPU the two configurations of
// the CPU milestone (resnet50, batch 8, 3x224x224; the default Fashion-MNIST model: resnet18,
// width 16, small stem, batch 128, 1x28x28), with --gpu ResNet50 at batch 256 on CUDA.
//
//   bazel run //bench:train_step_bench -- --model resnet50 --batch 8 --size 3x224x224
//       --classes 1000 [--width 64] [--small-stem] [--steps 5] [--warmup 2] [--channels-last]
//       [--device cuda] [--precision fp32|tf32|bf16|fp16|auto] [--cudnn-benchmark]
//       [--profile-steps A:B [--profile-group op|layer|kernel] [--profile-dir DIR]]
//
// --profile-steps records steps A..B-1 (counting the warm-up steps, 1-based) with the
// profiler (profile/session.h): the table goes to stderr, profile.json and trace.json to
// --profile-dir (default "."). The JSON line then also gives the median time of the
// profiled steps ("profiled_step_ms") next to the others' ("step_ms").
//
// Each step's time ends with loss.item(), which waits for the device, so a step's time is
// complete (the next step's host work does not overlap it: a slight underestimate of what
// a training loop that reads the loss less often reaches). Output: one JSON line; on CUDA
// "peak_bytes" is the device allocator's peak of bytes handed out (tensors; like
// torch.cuda.max_memory_allocated) and "reserved_bytes" what its cache holds at the end
// (like torch.cuda.memory_reserved).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <omp.h>

#include "engine/autograd.h"
#include "engine/nn/module.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "models/registry.h"
#include "kernels/cpu/conv2d_onednn.h"
#include "optim/optimizer.h"
#include "profile/session.h"
#include "train/precision.h"

namespace {

struct Options {
  std::string model = "resnet50";
  int64_t batch = 8, C = 3, H = 224, W = 224, classes = 1000, width = 64;
  bool small_stem = false, channels_last = false, cudnn_benchmark = false;
  int stem_stride = 1;
  std::string device = "cpu", precision = "fp32";
  int steps = 5, warmup = 2;
  std::string profile_steps, profile_group = "op", profile_dir = ".";
  rt::cpu::ConvAlgo cpu_conv = rt::cpu::ConvAlgo::onednn;
  bool inference = false;  // eval-mode forward passes without autograd instead of training steps
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "train_step_bench: %s\nusage: train_step_bench [--model NAME] [--batch N] [--size CxHxW] "
               "[--classes K] [--width W] [--small-stem] [--stem-stride S] [--channels-last] [--device D] "
               "[--precision fp32|tf32|bf16|fp16|auto] [--cudnn-benchmark] [--steps N] [--warmup N] "
               "[--profile-steps A:B] [--profile-group op|layer|kernel] [--profile-dir DIR] [--cpu-conv onednn|im2col] [--inference]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--batch") o.batch = std::atol(next().c_str());
    else if (a == "--size") {
      const std::string s = next();
      if (std::sscanf(s.c_str(), "%ldx%ldx%ld", &o.C, &o.H, &o.W) != 3) usage("--size takes CxHxW");
    } else if (a == "--classes") o.classes = std::atol(next().c_str());
    else if (a == "--width") o.width = std::atol(next().c_str());
    else if (a == "--small-stem") o.small_stem = true;
    else if (a == "--stem-stride") o.stem_stride = std::atoi(next().c_str());
    else if (a == "--device") o.device = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--cudnn-benchmark") o.cudnn_benchmark = true;
    else if (a == "--channels-last") o.channels_last = true;
    else if (a == "--steps") o.steps = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--profile-steps") o.profile_steps = next();
    else if (a == "--profile-group") o.profile_group = next();
    else if (a == "--profile-dir") o.profile_dir = next();
    else if (a == "--inference") o.inference = true;
    else if (a == "--cpu-conv") {
      const std::string v = next();
      if (v == "onednn") o.cpu_conv = rt::cpu::ConvAlgo::onednn;
      else if (v == "im2col") o.cpu_conv = rt::cpu::ConvAlgo::im2col;
      else usage("--cpu-conv takes onednn or im2col");
    } else usage(("unknown argument " + a).c_str());
  }
  if (o.batch < 1 || o.steps < 1 || o.warmup < 0) usage("--batch and --steps must be positive");
  return o;
}

}  // namespace

int run(const Options& o);

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
}

int run(const Options& o) {
  rt::cpu::set_conv_algo(o.cpu_conv);
  rt::models::ModelOptions mo;
  mo.num_classes = o.classes;
  mo.in_channels = o.C;
  mo.width = o.width;
  mo.small_stem = o.small_stem;
  mo.stem_stride = o.stem_stride;
  auto model = rt::models::make_model(o.model, mo);
  rt::nn::name_modules_for_profiling(*model);
  const rt::MemoryFormat fmt = o.channels_last ? rt::MemoryFormat::channels_last : rt::MemoryFormat::contiguous;
  const rt::Device dev = rt::Device::parse(o.device);
  const rt::train::Precision prec = rt::train::resolve_precision(o.precision, dev);
  if (dev.is_cuda()) rt::train::set_cuda_math(prec, o.cudnn_benchmark);
  model->to(dev, fmt);
  if (o.inference) model->eval();
  else model->train();
  rt::optim::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.weight_decay = 1e-4;
  auto opt = rt::optim::make_sgd(model->named_parameters(), so);
  // fp32/tf32: plain training (no copies); bf16/fp16: compute copies over f32 masters.
  rt::train::MixedPrecision mp(*model, rt::train::mixed_precision_options(prec));
  rt::Generator g(1);
  const rt::Tensor x = rt::randn({o.batch, o.C, o.H, o.W}, g, rt::DType::f32, dev, fmt).to(mp.input_dtype());
  const rt::Tensor y = rt::randint({o.batch}, g, 0, o.classes, dev);

  const rt::prof::ProfileConfig pc = rt::prof::parse_profile_steps(o.profile_steps, o.profile_group);
  rt::prof::ProfileSession session(pc, dev, prec == rt::train::Precision::tf32, o.profile_dir);
  session.set_table_stream(stderr);  // stdout carries the one JSON line
  std::vector<double> ms, profiled_ms;
  double loss = 0;
  using rt::prof::EventKind;
  using rt::prof::RangeScope;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    session.begin_step(s);
    const bool profiled = session.recording();
    const auto t0 = std::chrono::steady_clock::now();
    {
      const RangeScope step(EventKind::step, "step " + std::to_string(s + 1));
      rt::prof::set_step(s);
      if (o.inference) {
        const rt::NoGradGuard no_grad;
        const RangeScope phase(EventKind::phase, "forward");
        loss = rt::sum(mp.forward(x)).item();  // waits for the device
      } else {
        opt->zero_grad();
        rt::Tensor l;
        {
          const RangeScope phase(EventKind::phase, "forward");
          l = rt::cross_entropy(mp.forward(x), y);
        }
        {
          const RangeScope phase(EventKind::phase, "backward");
          mp.backward(l);
        }
        {
          const RangeScope phase(EventKind::phase, "optimizer");
          mp.step(*opt);
        }
        loss = l.item();  // also waits for the device, so the step's time is complete
      }
    }
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    session.end_step(s);
    if (profiled) profiled_ms.push_back(t);
    else if (s >= o.warmup) ms.push_back(t);
  }
  RT_CHECK(!ms.empty(), "train_step_bench: every timed step was profiled; add --steps");
  std::sort(ms.begin(), ms.end());
  std::sort(profiled_ms.begin(), profiled_ms.end());
  const double med = ms[ms.size() / 2];
  const double pmed = profiled_ms.empty() ? 0.0 : profiled_ms[profiled_ms.size() / 2];
  const rt::AllocatorStats st = rt::allocator_for(dev).stats();
  std::printf("{\"impl\": \"ringtape\", \"model\": \"%s\", \"batch\": %ld, \"size\": \"%ldx%ldx%ld\", \"width\": %ld, "
              "\"device\": \"%s\", \"precision\": \"%s\", \"channels_last\": %s, \"cudnn_benchmark\": %s, \"cpu_conv\": \"%s\", \"inference\": %s, \"threads\": %d, "
              "\"steps\": %d, \"step_ms\": %.3f, \"img_per_s\": %.1f, \"loss\": %.4f, \"peak_bytes\": %ld, "
              "\"reserved_bytes\": %ld, \"profiled_step_ms\": %.3f}\n",
              o.model.c_str(), o.batch, o.C, o.H, o.W, o.width, dev.str().c_str(), rt::train::precision_name(prec),
              o.channels_last ? "true" : "false", o.cudnn_benchmark ? "true" : "false", rt::cpu::conv_algo_name(o.cpu_conv), o.inference ? "true" : "false", omp_get_max_threads(), o.steps,
              med, 1000.0 * double(o.batch) / med, loss, st.peak_bytes, st.reserved_bytes, pmed);
  return 0;
}
