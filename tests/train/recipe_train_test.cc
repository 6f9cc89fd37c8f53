// `ringtape train` with the recipes' pieces on tiny synthetic runs on the CPU: mixup, cutmix,
// random erasing, EMA, gradient clipping, per-group weight decay, LARS with MLPerf's
// schedule and repeated augmentation all resume bit-identically (Note [Exact resume]); the
// EMA's weights are evaluated, checkpointed and saved; --test-only writes nothing.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "cli/train_command.h"
#include "cli/train_flags.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/nn/module.h"
#include "models/registry.h"
#include "train/setup.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string tmpdir(const std::string& name) { return test::fresh_dir("recipe_train_test_", name).string(); }

bool same_bytes(const Tensor& x, const Tensor& t) {
  return x.dtype() == t.dtype() && x.nbytes() == t.nbytes() && std::memcmp(x.raw_data(), t.raw_data(), t.nbytes()) == 0;
}

// 512 synthetic 3x8x8 images, batch 32 (16 steps per epoch), a width-4 ResNet18 with the
// small stem, on the CPU. 512 images: repeated augmentation keeps floor(N / 256) * 256.
std::vector<std::string> tiny(const std::string& out) {
  return {"--dataset", "synthetic", "--synthetic-size", "512x3x8x8", "--num-classes", "4", "--width", "4",
          "--batch-size", "32", "--epochs", "2", "--print-freq", "4", "--workers", "0", "--lr", "0.05",
          "--output-dir", out, "--seed", "5", "--device", "cpu", "--lr-warmup-epochs", "1"};
}

int train(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
  args.insert(args.end(), more.begin(), more.end());
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::run_train(f);
}

// The eval records of metrics.jsonl.
std::vector<json::Value> evals(const fs::path& metrics) {
  std::vector<json::Value> out;
  std::istringstream in(test::read_file(metrics));
  for (std::string line; std::getline(in, line);) {
    json::Value v = json::parse(line);
    if (v.find("type") && v.find("type")->as_string() == "eval") out.push_back(v);
  }
  return out;
}

// Runs `flags` straight through and as 5 steps + resume; both must end with the same files.
// Returns the straight run's directory.
fs::path check_resume(const std::string& name, const std::vector<std::string>& flags) {
  CAPTURE(name);
  const std::string a = tmpdir(name + "_full"), b = tmpdir(name + "_resumed");
  REQUIRE(train(tiny(a), flags) == 0);
  std::vector<std::string> part = flags;
  part.insert(part.end(), {"--steps", "5"});
  REQUIRE(train(tiny(b), part) == 0);
  std::vector<std::string> rest = flags;
  rest.insert(rest.end(), {"--resume", b + "/checkpoint.safetensors"});
  REQUIRE(train(tiny(b), rest) == 0);
  CHECK(test::read_file(fs::path(a) / "model.safetensors") == test::read_file(fs::path(b) / "model.safetensors"));
  // The checkpoints' tensors (the optimizer's and the EMA's state too); their metadata holds
  // the flags as given (--steps, --resume), which differ.
  const auto ca = load_safetensors(a + "/checkpoint.safetensors"), cb = load_safetensors(b + "/checkpoint.safetensors");
  REQUIRE(ca.size() == cb.size());
  for (const auto& [k, t] : ca) {
    CAPTURE(k);
    REQUIRE(cb.count(k));
    CHECK(same_bytes(t, cb.at(k)));
  }
  const auto ea = evals(fs::path(a) / "metrics.jsonl"), eb = evals(fs::path(b) / "metrics.jsonl");
  REQUIRE(ea.size() == 2);
  REQUIRE(eb.size() == 2);
  CHECK(json::dump(ea.back()) == json::dump(eb.back()));
  return a;
}

TEST_CASE("torchvision v2's pieces resume bit-identically; the EMA is evaluated and saved") {
  const std::vector<std::string> v2 = {"--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--random-erase", "0.5",
                                       "--label-smoothing", "0.1", "--model-ema", "--model-ema-steps", "2",
                                       "--clip-grad-norm", "1.0", "--norm-weight-decay", "0", "--bias-weight-decay",
                                       "0", "--ra-sampler", "--ra-reps", "2"};
  const fs::path dir = check_resume("v2", v2);
  const auto model = load_safetensors((dir / "model.safetensors").string());
  const auto ema = load_safetensors((dir / "model_ema.safetensors").string());
  REQUIRE(ema.size() == model.size());
  int differ = 0;
  for (const auto& [k, t] : model) {
    CAPTURE(k);
    REQUIRE(ema.count(k));
    CHECK(ema.at(k).shape() == t.shape());
    differ += same_bytes(ema.at(k), t) ? 0 : 1;
  }
  CHECK(differ > 0);  // an average of the weights, not a copy
  const auto e = evals(dir / "metrics.jsonl");
  REQUIRE(e.size() == 2);
  CHECK(e.back().find("ema_top1"));
  // The checkpoint carries the EMA in torchvision's AveragedModel keys.
  const auto ckpt = load_safetensors((dir / "checkpoint.safetensors").string());
  CHECK(ckpt.count("model_ema.n_averaged"));
  CHECK(ckpt.count("model_ema.module.conv1.weight"));

  // --test-only evaluates the checkpoint's model and its EMA, and writes nothing.
  const std::string before = test::read_file(dir / "metrics.jsonl");
  const std::string ckpt_path = (dir / "checkpoint.safetensors").string();
  CHECK(train(tiny(dir.string()), {"--test-only", "--model-ema", "--resume", ckpt_path}) == 0);
  CHECK(test::read_file(dir / "metrics.jsonl") == before);
  // model_ema.safetensors loads as --init-weights (the model's keys).
  const std::string c = tmpdir("from_ema");
  CHECK(train(tiny(c), {"--steps", "1", "--init-weights", (dir / "model_ema.safetensors").string()}) == 0);
}

TEST_CASE("LARS with MLPerf's warmup and poly decay resumes bit-identically") {
  check_resume("lars", {"--optimizer", "lars", "--lr", "2.0", "--weight-decay", "5e-5", "--lr-scheduler", "poly",
                        "--lr-power", "2", "--lr-min", "1e-4", "--lr-warmup-method", "mlperf", "--label-smoothing",
                        "0.1"});
}

// torchvision's set_weight_decay: a parameter named bias takes --bias-weight-decay (a batch
// norm's bias too), a batch norm's weight --norm-weight-decay, the rest --weight-decay. With
// momentum 0 and zero gradients one SGD step at lr 1 scales each parameter by 1 - decay.
TEST_CASE("--norm-weight-decay and --bias-weight-decay: torchvision's weight-decay groups") {
  cli::Flags f(cli::train_flags());
  f.parse({"--momentum", "0", "--lr", "1", "--weight-decay", "0.1", "--norm-weight-decay", "0.25",
           "--bias-weight-decay", "0.5"});
  const train::TrainConfig cfg = cli::parse_train_config(f);
  models::ModelOptions mo;
  mo.num_classes = 4;
  mo.width = 4;
  mo.small_stem = true;
  const std::shared_ptr<nn::Module> model = models::make_model("resnet18", mo);
  const auto opt = train::make_optimizer(cfg.optimizer, *model);
  std::map<std::string, std::vector<double>> before;
  for (auto& [name, p] : model->named_parameters()) {
    before[name] = p.to(DType::f64).to_vector<double>();
    p.set_grad(Tensor::zeros(p.shape(), p.dtype(), p.device(), p.format()));
  }
  opt->step();
  std::map<double, int> seen;  // decay -> parameters that had it
  for (const auto& [name, p] : model->named_parameters()) {
    CAPTURE(name);
    const bool bias = name.size() >= 5 && name.substr(name.size() - 5) == ".bias";
    const bool norm_weight = name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos;
    const double decay = bias ? 0.5 : norm_weight ? 0.25 : 0.1;
    ++seen[decay];
    const std::vector<double> now = p.to(DType::f64).to_vector<double>(), was = before.at(name);
    for (size_t i = 0; i < now.size(); ++i) CHECK(now[i] == doctest::Approx(was[i] * (1 - decay)).epsilon(1e-6));
  }
  CHECK(seen[0.5] > 0);   // batch norms' biases and fc.bias
  CHECK(seen[0.25] > 0);  // batch norms' weights
  CHECK(seen[0.1] > 0);   // convolutions, fc.weight
}

}  // namespace
}  // namespace rt
