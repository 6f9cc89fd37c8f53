// NaN and Inf never reach a checkpoint, a weights file or an accuracy
// (Note [Non-finite steps], train/nonfinite.h): detection, the save-time refusal,
// --skip-nonfinite restoring the state exactly, and messages that name the real cause.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/nonfinite.h"
#include "cli/train_command.h"
#include "cli/train_flags.h"
#include "train/trainer.h"
#include "tests/models/tiny_resnet.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::string tmpdir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("nonfinite_test_" + name);
  fs::remove_all(p);
  return p.string();
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 64 f32 images 1x8x8 with labels 0..3 (a "tensors" dataset); the images of `bad_batches`
// (batches of 8 in file order) hold `bad`.
std::string tensors_dataset(const std::string& name, const std::vector<int>& bad_batches, float bad = kNaN) {
  std::vector<float> px(64 * 64);
  for (size_t i = 0; i < px.size(); ++i) px[i] = float(std::sin(double(i) * 0.37));
  for (int b : bad_batches)
    for (int i = b * 8; i < b * 8 + 8; ++i) px[size_t(i) * 64 + 5] = bad;
  std::vector<int64_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[size_t(i)] = i % 4;
  const std::string dir = tmpdir(name);
  fs::create_directories(dir);
  const std::string path = dir + "/data.safetensors";
  save_safetensors(path, {{"images", Tensor::from_vector(px, {64, 1, 8, 8})},
                          {"labels", Tensor::from_vector(labels, {64})}}, {});
  return path;
}

// One epoch of 8 steps (batch 8, in file order) of a width-4 ResNet18 on the CPU.
std::vector<std::string> tiny(const std::string& data, const std::string& out) {
  return {"--dataset", "tensors", "--data-path", data, "--no-shuffle", "--num-classes", "4", "--width", "4",
          "--batch-size", "8", "--epochs", "1", "--print-freq", "1", "--workers", "0", "--lr", "0.05",
          "--output-dir", out, "--device", "cpu"};
}

int train(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
  args.insert(args.end(), more.begin(), more.end());
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::run_train(f);
}

// The message of the rt::Error a training run throws ("" when it does not throw).
std::string train_error(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
  try {
    train(std::move(args), more);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The training and evaluation records (not the per-epoch memory records).
std::vector<json::Value> metrics(const std::string& dir) {
  std::vector<json::Value> out;
  std::istringstream in(read(fs::path(dir) / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    json::Value v = json::parse(line);
    if (v.find("type")->as_string() != "memory") out.push_back(std::move(v));
  }
  return out;
}

int64_t skipped_steps(const std::string& dir) {
  int64_t n = 0;
  for (const json::Value& v : metrics(dir))
    if (v.find("type")->as_string() == "train") n += v.find("skipped_steps")->as_int();
  return n;
}

// The first non-finite tensor of a saved file.
std::optional<std::string> nonfinite_in(const std::string& path) {
  nn::NamedTensors all;
  for (const auto& kv : load_safetensors(path)) all.push_back(kv);
  return train::first_nonfinite(all);
}

TEST_CASE("first_nonfinite names the first tensor with a NaN or Inf, of every floating dtype") {
  const Tensor ok = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  const Tensor nan = Tensor::from_vector(std::vector<float>{1, kNaN, 3}, {3});
  const Tensor inf = Tensor::from_vector(std::vector<double>{-double(kInf), 0}, {2});
  CHECK_FALSE(train::first_nonfinite({{"a", ok}, {"n", Tensor::zeros({2}, DType::i64)}}));
  CHECK(train::first_nonfinite({{"a", ok}, {"b", nan}, {"c", inf}}) == "b");
  CHECK(train::first_nonfinite({{"a", ok}, {"c", inf}}) == "c");
  CHECK(train::first_nonfinite({{"h", nan.to(DType::f16)}}) == "h");
  CHECK(train::first_nonfinite({{"h", nan.to(DType::bf16)}}) == "h");
  CHECK(train::is_finite(ok));
  CHECK_FALSE(train::is_finite(inf));
}

TEST_CASE("topk_hits: NaN/Inf logits are wrong predictions, counted") {
  // Row 0: NaN everywhere (it used to rank the label first); row 1: an Inf beside the
  // label; row 2: a clean hit.
  const std::vector<float> logits = {kNaN, kNaN, kNaN, 0, kInf, 1, 0, 0, 5};
  const std::vector<int64_t> labels = {0, 1, 2};
  int64_t top1 = 0, top5 = 0, nonfinite = 0;
  train::topk_hits(logits.data(), labels.data(), 3, 3, &top1, &top5, &nonfinite);
  CHECK(top1 == 1);
  CHECK(top5 == 1);
  CHECK(nonfinite == 2);
}

TEST_CASE("save_checkpoint and save_weights refuse NaN/Inf, naming tensor and step, and write nothing") {
  const std::string data = tensors_dataset("save_data", {}), a = tmpdir("save");
  REQUIRE(train(tiny(data, a), {"--steps", "2"}) == 0);
  const std::string ckpt = a + "/checkpoint.safetensors", weights = a + "/model.safetensors";
  const std::string ckpt_before = read(ckpt), weights_before = read(weights);
  auto model = test::tiny_resnet18({.stem_stride = 2});
  auto opt = optim::make_sgd(model->named_parameters(), optim::SgdOptions{});
  for (auto& [k, t] : model->state_dict())
    if (k == "layer2.0.bn1.running_var") t.fill_(std::numeric_limits<double>::infinity());
  CHECK_THROWS_WITH_AS(train::save_checkpoint(ckpt, *model, *opt, train::Progress{0, 3, 3, 24}, {}),
                       doctest::Contains("'model.layer2.0.bn1.running_var' holds NaN or Inf after step 3"), Error);
  CHECK_THROWS_WITH_AS(train::save_weights(weights, *model), doctest::Contains("layer2.0.bn1.running_var"), Error);
  CHECK(read(ckpt) == ckpt_before);
  CHECK(read(weights) == weights_before);
  for (const auto& e : fs::directory_iterator(a)) CHECK_MESSAGE(e.path().string().find(".tmp.") == std::string::npos,
                                                                e.path());
}

TEST_CASE("a diverged run stops with the cause and keeps only finite checkpoints") {
  const std::string data = tensors_dataset("clean", {}), a = tmpdir("diverge");
  const std::string msg = train_error(tiny(data, a), {"--lr", "1e30", "--lr-scheduler", "constant",
                                                      "--checkpoint-every", "1"});
  CHECK_MESSAGE((msg.find("holds NaN or Inf after step") != std::string::npos ||
                 msg.find("training diverged") != std::string::npos), msg);
  if (fs::exists(fs::path(a) / "checkpoint.safetensors")) CHECK_FALSE(nonfinite_in(a + "/checkpoint.safetensors"));
  CHECK_FALSE(fs::exists(fs::path(a) / "model.safetensors"));
}

TEST_CASE("NaN weights from --init-weights: blamed, never saved, evaluated as wrong") {
  const std::string data = tensors_dataset("init_data", {}), a = tmpdir("init");
  REQUIRE(train(tiny(data, a), {"--steps", "1"}) == 0);
  auto w = load_safetensors(a + "/model.safetensors");
  w["conv1.weight"] = Tensor::full(w["conv1.weight"].shape(), std::nan(""));
  const std::string bad = a + "/bad.safetensors";
  save_safetensors(bad, w, {});
  const std::string msg = train_error(tiny(data, tmpdir("nan_init")), {"--init-weights", bad});
  CHECK(msg.find("the weights hold NaN or Inf before the first step ('conv1.weight')") != std::string::npos);
  // save_weights refuses them and leaves the file there as it was.
  const std::string before = read(fs::path(a) / "model.safetensors");
  cli::Flags e(cli::eval_flags());
  e.parse({"--dataset", "tensors", "--data-path", data, "--num-classes", "4", "--width", "4", "--batch-size", "8",
           "--workers", "0", "--device", "cpu", "--init-weights", bad});
  CHECK(cli::run_eval(e) == 0);  // honest: 0%, the NaN logits counted (the CLI test reads the line)
  CHECK(read(fs::path(a) / "model.safetensors") == before);
}

TEST_CASE("NaN in the data: the message blames the data, not --lr") {
  const std::string data = tensors_dataset("nan_data", {0});
  const std::string msg = train_error(tiny(data, tmpdir("nan_data_run")));
  CHECK(msg.find("loss is nan at step 1") != std::string::npos);
  CHECK(msg.find("the input batch holds NaN or Inf") != std::string::npos);
  CHECK(msg.find("--lr") == std::string::npos);
}

TEST_CASE("--skip-nonfinite: a skipped step leaves weights and optimizer state exactly as they were") {
  // Batch 2 (the third step) holds NaN, batch 4 an Inf.
  const std::string data = tensors_dataset("skip_data", {2}), x = tmpdir("skip_x"), y = tmpdir("skip_y");
  REQUIRE(train(tiny(data, x), {"--skip-nonfinite", "--steps", "3"}) == 0);  // steps 1, 2 stand, 3 is skipped
  REQUIRE(train(tiny(data, y), {"--steps", "2"}) == 0);
  std::map<std::string, std::string> mx, my;
  const auto cx = load_safetensors(x + "/checkpoint.safetensors", &mx);
  const auto cy = load_safetensors(y + "/checkpoint.safetensors", &my);
  CHECK(mx.at("step") == "3");
  CHECK(my.at("step") == "2");
  REQUIRE(cx.size() == cy.size());
  for (const auto& [k, t] : cy) {
    REQUIRE_MESSAGE(cx.count(k), k);
    CHECK_MESSAGE(t.to(DType::f64).to_vector<double>() == cx.at(k).to(DType::f64).to_vector<double>(), k);
  }
  // The log line of the skipped step says so; its loss is not a made-up 0.
  const std::vector<json::Value> m = metrics(x);
  REQUIRE(m.size() == 3);
  CHECK(m[2].find("skipped_steps")->as_int() == 1);
  CHECK(m[2].find("loss")->is_null());
  CHECK(m[1].find("skipped_steps")->as_int() == 0);
  CHECK(m[1].find("loss")->as_double() > 0);

  // A whole epoch with a NaN batch and an Inf batch: finite files, both steps counted.
  const std::string data2 = tensors_dataset("skip_data2", {2, 4}, kInf), z = tmpdir("skip_z");
  REQUIRE(train(tiny(data2, z), {"--skip-nonfinite"}) == 0);
  CHECK_FALSE(nonfinite_in(z + "/checkpoint.safetensors"));
  CHECK_FALSE(nonfinite_in(z + "/model.safetensors"));
  CHECK(skipped_steps(z) == 2);
  // The evaluation runs over those images too: wrong, and counted.
  CHECK(metrics(z).back().find("nonfinite_logits")->as_int() == 16);
}

TEST_CASE("--skip-nonfinite: a step whose update makes the weights non-finite is skipped, the state restored") {
  // lr 1e300: the first loss and gradients are finite, the update overflows f32.
  const std::string data = tensors_dataset("huge_lr", {}), a = tmpdir("huge_lr_run"), z = tmpdir("zero_lr_run");
  REQUIRE(train(tiny(data, a), {"--skip-nonfinite", "--lr", "1e300", "--lr-scheduler", "constant", "--steps", "1"}) ==
          0);
  REQUIRE(train(tiny(data, z), {"--lr", "0", "--lr-scheduler", "constant", "--steps", "1"}) == 0);
  CHECK(skipped_steps(a) == 1);
  CHECK(metrics(z)[0].find("loss")->as_double() > 0);  // the step's loss itself was finite
  const auto ca = load_safetensors(a + "/checkpoint.safetensors");
  const auto cz = load_safetensors(z + "/checkpoint.safetensors");
  for (const auto& [k, t] : ca) {
    CAPTURE(k);
    CHECK(k.rfind("optimizer.", 0) != 0);  // no momentum buffer: the optimizer never stepped
    const std::vector<double> v = t.to(DType::f64).to_vector<double>();
    if (k.ends_with("running_mean") || k.ends_with("num_batches_tracked"))
      CHECK(v == std::vector<double>(v.size(), 0.0));  // the forward's statistics were rolled back
    else if (k.ends_with("running_var"))
      CHECK(v == std::vector<double>(v.size(), 1.0));
    else  // the parameters are the initial ones (lr 0 leaves them so)
      CHECK(v == cz.at(k).to(DType::f64).to_vector<double>());
  }
}

TEST_CASE("gradients() names a non-finite gradient for --skip-nonfinite") {
  Tensor w = Tensor::zeros({2});
  w.set_requires_grad(true);
  Tensor v = Tensor::zeros({3});
  v.set_requires_grad(true);
  auto opt = optim::make_sgd({{"w", w}, {"v", v}}, optim::SgdOptions{});
  w.set_grad(Tensor::from_vector(std::vector<float>{1, 2}, {2}));
  CHECK_FALSE(train::first_nonfinite(train::gradients(*opt)));
  v.set_grad(Tensor::from_vector(std::vector<float>{1, kNaN, 2}, {3}));
  CHECK(train::first_nonfinite(train::gradients(*opt)) == "v");
}

TEST_CASE("--skip-nonfinite: a whole run at an absurd learning rate leaves only finite files") {
  const std::string data = tensors_dataset("huge_lr2", {}), a = tmpdir("huge_lr_run2");
  REQUIRE(train(tiny(data, a), {"--skip-nonfinite", "--lr", "1e30", "--lr-scheduler", "constant"}) == 0);
  CHECK_FALSE(nonfinite_in(a + "/checkpoint.safetensors"));
  CHECK_FALSE(nonfinite_in(a + "/model.safetensors"));
  CHECK(skipped_steps(a) >= 1);
}

}  // namespace
}  // namespace rt
