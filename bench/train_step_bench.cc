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
// profiled steps ("profiled_step_ms") next to the others' ("step_ms", theirs when every
// timed step was profiled). Under --config=cuda-emu with RINGTAPE_EMU_PERF set, the kernel
// lab records the profiled steps only (bench/run_kernel_lab.sh).
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
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <omp.h>

#include "base/error.h"
#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "engine/autograd.h"
#include "engine/cuda_graph.h"
#include "engine/stream.h"
#include "engine/nn/layers.h"
#include "engine/nn/module.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "engine/random.h"
#include "models/registry.h"
#include "kernels/cpu/conv2d_onednn.h"
#include "optim/optimizer.h"
#include "profile/session.h"
#include "train/precision.h"
#include "train/step_graph.h"

namespace {

// From the command line; the defaults are flag_table()'s.
struct Options {
  std::string model;
  int64_t batch = 0, C = 0, H = 0, W = 0, classes = 0, width = 0;
  bool small_stem = false, channels_last = false, cudnn_benchmark = false;
  int stem_stride = 0;
  std::string device, precision;
  int steps = 0, warmup = 0;
  std::string profile_steps, profile_group, profile_dir;
  rt::cpu::ConvAlgo cpu_conv = rt::cpu::ConvAlgo::onednn;
  bool inference = false;  // eval-mode forward passes without autograd instead of training steps
  bool unfused = false;    // the block tails and residual gradient sums as separate ops
  bool cuda_graphs = false;  // the timed steps replay one captured CUDA graph
};

const char* kUsage =
    "usage: train_step_bench [--model NAME] [--batch N] [--size CxHxW] [--classes K] [--width W] [--small-stem] "
    "[--stem-stride S] [--channels-last] [--device D] [--precision fp32|tf32|bf16|fp16|auto] [--cudnn-benchmark] "
    "[--steps N] [--warmup N] [--profile-steps A:B] [--profile-group op|layer|kernel] [--profile-dir DIR] "
    "[--cpu-conv onednn|im2col] [--inference] [--unfused] [--cuda-graphs]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::bench::int_at_least;
  using rt::cli::FlagType;
  using rt::cli::Topic;
  return {
      {"model", FlagType::string, "resnet50", "the model", rt::models::model_names()},
      {"batch", FlagType::integer, "8", "images per step", {}, Topic::output, int_at_least(1)},
      {"size", FlagType::string, "3x224x224", "an image's channels, height and width: CxHxW"},
      {"classes", FlagType::integer, "1000", "output classes", {}, Topic::output, int_at_least(1)},
      {"width", FlagType::integer, "64", "channels of the first stage", {}, Topic::output, int_at_least(1)},
      {"small-stem", FlagType::boolean, "false", "3x3 stem without max-pool, for 28x28 / 32x32 images"},
      {"stem-stride", FlagType::integer, "1", "the small stem's stride; 2 needs --small-stem", {"1", "2"}},
      {"channels-last", FlagType::boolean, "false", "NHWC activations and weights (else NCHW)"},
      {"device", FlagType::string, "cpu", "cpu, cuda or cuda:N"},
      {"precision", FlagType::string, "fp32",
       "the training precision (train/precision.h); auto: bf16 where the device has it, else fp32",
       {"fp32", "tf32", "bf16", "fp16", "auto"}},
      {"cudnn-benchmark", FlagType::boolean, "false", "cuDNN's benchmark mode (CUDA)"},
      {"steps", FlagType::integer, "5", "timed steps; the median is reported", {}, Topic::output, int_at_least(1)},
      {"warmup", FlagType::integer, "2", "untimed steps first", {}, Topic::output, int_at_least(0)},
      {"profile-steps", FlagType::string, "",
       "A:B: record steps A..B-1 (1-based, counting the warm-up steps) with the profiler"},
      {"profile-group", FlagType::string, "op", "the profile table's rows", {"op", "layer", "kernel"}},
      {"profile-dir", FlagType::string, ".", "where profile.json and trace.json go"},
      {"cpu-conv", FlagType::string, "onednn", "the CPU convolutions: oneDNN's, or im2col + GEMM",
       {"onednn", "im2col"}},
      {"inference", FlagType::boolean, "false",
       "eval-mode forward passes without autograd instead of training steps"},
      {"unfused", FlagType::boolean, "false",
       "batch norm's relu and residual add as separate ops, residual gradients summed out of place: what "
       "the fusions are measured against (Note [Fused block tails] in models/resnet.cc)"},
      {"cuda-graphs", FlagType::boolean, "false",
       "CUDA training: the timed steps replay the step captured as one CUDA graph after the warm-up (as "
       "`ringtape train --cuda-graphs`, Note [The training step as a CUDA graph] in train/step.cc)"},
  };
}

Options parse(int argc, char** argv) {
  const rt::cli::Flags f = rt::bench::parse_flags(argc, argv, flag_table(), kUsage);
  Options o;
  o.model = f.str("model");
  o.batch = f.integer("batch");
  const std::string size = f.str("size");
  int used = 0;
  if (std::sscanf(size.c_str(), "%ldx%ldx%ld%n", &o.C, &o.H, &o.W, &used) != 3 || size_t(used) != size.size() ||
      o.C < 1 || o.H < 1 || o.W < 1)
    throw rt::UsageError("--size takes CxHxW (three positive integers), got '" + size + "'");
  o.classes = f.integer("classes");
  o.width = f.integer("width");
  o.small_stem = f.boolean("small-stem");
  o.stem_stride = int(f.integer("stem-stride"));
  o.channels_last = f.boolean("channels-last");
  o.unfused = f.boolean("unfused");
  o.cuda_graphs = f.boolean("cuda-graphs");
  o.device = f.str("device");
  o.precision = f.str("precision");
  o.cudnn_benchmark = f.boolean("cudnn-benchmark");
  o.steps = int(f.integer("steps"));
  o.warmup = int(f.integer("warmup"));
  o.profile_steps = f.str("profile-steps");
  o.profile_group = f.str("profile-group");
  o.profile_dir = f.str("profile-dir");
  o.cpu_conv = f.str("cpu-conv") == "im2col" ? rt::cpu::ConvAlgo::im2col : rt::cpu::ConvAlgo::onednn;
  o.inference = f.boolean("inference");
  if (o.cuda_graphs && (o.inference || o.warmup < 1 || o.device.rfind("cuda", 0) != 0))
    throw rt::UsageError("--cuda-graphs needs --device cuda, training (not --inference) and --warmup 1 or more (the "
                         "graph is captured after an eager step)");
  // Values whose form the rows cannot check: refused here, before the model is built.
  try {
    rt::Device::parse(o.device);
  } catch (const rt::Error& e) {
    throw rt::UsageError(std::string("--device: ") + e.what());
  }
  try {
    rt::prof::parse_profile_steps(o.profile_steps, o.profile_group);
  } catch (const rt::Error& e) {
    throw rt::UsageError(e.what());
  }
  return o;
}

}  // namespace

int run(const Options& o);

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const rt::UsageError& e) {
    return rt::bench::usage_failure("train_step_bench", e, flag_table(), kUsage);
  } catch (const rt::Error& e) {
    std::fprintf(stderr, "train_step_bench: %s\n", e.what());
    return 1;
  }
}

namespace {

// The model the flags describe, on `dev` in `fmt`, in train or eval mode (--inference).
// --unfused turns off what the engine fuses by default (batch norm's ReLU, gradients
// accumulated in place), process-wide, to time the step without it.
std::shared_ptr<rt::nn::Module> bench_model(const Options& o, const rt::Device& dev, rt::MemoryFormat fmt) {
  rt::models::ModelOptions mo;
  mo.num_classes = o.classes;
  mo.in_channels = o.C;
  mo.width = o.width;
  mo.small_stem = o.small_stem;
  mo.stem_stride = o.stem_stride;
  auto model = rt::models::make_model(o.model, mo);
  if (o.unfused) {
    for (auto& [name, m] : model->named_modules())
      if (auto* bn = dynamic_cast<rt::nn::BatchNorm2d*>(m)) bn->fuse_relu = false;
    rt::set_accumulate_in_place(false);
  }
  rt::nn::name_modules_for_profiling(*model);
  model->to(dev, fmt);
  if (o.inference) model->eval();
  else model->train();
  return model;
}

}  // namespace

int run(const Options& o) {
  rt::cpu::set_conv_algo(o.cpu_conv);
  const rt::MemoryFormat fmt = o.channels_last ? rt::MemoryFormat::channels_last : rt::MemoryFormat::contiguous;
  const rt::Device dev = rt::Device::parse(o.device);
  const rt::train::Precision prec = rt::train::resolve_precision(o.precision, dev);
  if (dev.is_cuda()) rt::train::set_cuda_math(prec, o.cudnn_benchmark);
  const auto model = bench_model(o, dev, fmt);
  rt::optim::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.weight_decay = 1e-4;
  auto opt = rt::optim::make_sgd(model->named_parameters(), so);
  // The session first: with profiled steps ahead it closes the kernel lab's window, so the
  // set-up below (fp16's loss-scaler state, the inputs) is not recorded with the steps.
  const rt::prof::ProfileConfig pc = rt::prof::parse_profile_steps(o.profile_steps, o.profile_group);
  rt::prof::ProfileSession session(pc, dev, prec == rt::train::Precision::tf32, o.profile_dir);
  session.set_table_stream(stderr);  // stdout carries the one JSON line
  // fp32/tf32: plain training (no copies); bf16/fp16: compute copies over f32 masters.
  rt::train::MixedPrecision mp(*model, rt::train::mixed_precision_options(prec));
  rt::Generator g(1);
  const rt::Tensor x = rt::randn({o.batch, o.C, o.H, o.W}, g, rt::DType::f32, dev, fmt).to(mp.input_dtype());
  const rt::Tensor y = rt::randint({o.batch}, g, 0, o.classes, dev);
  std::vector<double> ms, profiled_ms;
  double loss = 0;
  // --cuda-graphs, as TrainStep does it (Note [The training step as a CUDA graph] in
  // train/step.cc): at the end of the warm-up, the step on a stream of its own is rehearsed in
  // the graph's pool until it takes no new segment, then captured; each timed step is one
  // replay. All of it before the timed steps, so the kernel lab's window sees replays only.
  bool stepped = false;  // the last core()'s update stood (fp16: its gradients were finite)
  auto core = [&] {
    opt->zero_grad();
    const rt::Tensor l = rt::cross_entropy(mp.forward(x), y);
    mp.backward(l);
    stepped = mp.step(*opt);
    return l;
  };
  std::optional<rt::Stream> gs;
  rt::CudaGraph graph;
  rt::Tensor graph_loss;  // the graph's output, in its pool
  auto join = [&](const rt::Stream& from, const rt::Stream& to) {
    rt::Event e(dev);
    e.record(from);
    e.block(to);
  };
  auto prepare_graph = [&] {
    gs.emplace(rt::Stream::create(dev));
    join(rt::Stream::current(dev), *gs);
    // fp16: until a rehearsal's update stood too (the optimizer then has its state: TrainStep's rule).
    for (int r = 0; !(rt::train::rehearse_step(graph, *gs, [&] { (void)core(); }) && stepped); ++r)
      RT_CHECK(r < 16, "train_step_bench --cuda-graphs: after 16 rehearsals the step still takes new memory, uploads "
               "a multi-tensor table or overflows (fp16)");
    rt::train::capture_step(graph, *gs, *model, [&] { graph_loss = core(); });
    join(*gs, rt::Stream::current(dev));
  };
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
      } else if (o.cuda_graphs && s >= o.warmup) {
        join(rt::Stream::current(dev), *gs);
        graph.replay(*gs);
        join(*gs, rt::Stream::current(dev));
        rt::train::count_replayed_step(*model);
        loss = graph_loss.item();  // waits for the device
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
    if (o.cuda_graphs && s + 1 == o.warmup) prepare_graph();
  }
  std::sort(ms.begin(), ms.end());
  std::sort(profiled_ms.begin(), profiled_ms.end());
  // Every timed step profiled (the kernel lab's runs: bench/run_kernel_lab.sh): the profiled
  // steps' median stands for the step time.
  const double med = ms.empty() ? profiled_ms[profiled_ms.size() / 2] : ms[ms.size() / 2];
  const double pmed = profiled_ms.empty() ? 0.0 : profiled_ms[profiled_ms.size() / 2];
  const rt::AllocatorStats st = rt::allocator_for(dev).stats();
  auto flag = [](bool b) { return b ? "true" : "false"; };
  std::printf("{\"impl\": \"ringtape\", \"model\": \"%s\", \"batch\": %ld, \"size\": \"%ldx%ldx%ld\", \"width\": %ld, "
              "\"device\": \"%s\", \"precision\": \"%s\", \"channels_last\": %s, \"cudnn_benchmark\": %s, "
              "\"cpu_conv\": \"%s\", \"inference\": %s, \"fused\": %s, \"cuda_graphs\": %s, \"threads\": %d, "
              "\"steps\": %d, \"step_ms\": %.3f, \"img_per_s\": %.1f, \"loss\": %.4f, \"peak_bytes\": %ld, "
              "\"reserved_bytes\": %ld, \"profiled_step_ms\": %.3f}\n",
              o.model.c_str(), o.batch, o.C, o.H, o.W, o.width, dev.str().c_str(), rt::train::precision_name(prec),
              flag(o.channels_last), flag(o.cudnn_benchmark), rt::cpu::conv_algo_name(o.cpu_conv), flag(o.inference),
              flag(!o.unfused), flag(o.cuda_graphs), omp_get_max_threads(), o.steps, med,
              1000.0 * double(o.batch) / med, loss, st.peak_bytes, st.reserved_bytes, pmed);
  return 0;
}
