// `ringtape train` end to end on tiny synthetic runs: exact resume (Note [Exact resume]),
// the files a run leaves, and the errors bad input gets.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "cli/train_command.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string tmpdir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("train_test_" + name);
  fs::remove_all(p);
  return p.string();
}

// A run small enough for a unit test: 64 synthetic 1x8x8 images, batch 8 (8 steps per
// epoch), a width-4 ResNet18 with the small stem, on the CPU (also where a GPU is present).
std::vector<std::string> tiny(const std::string& out) {
  return {"--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4", "--width", "4",
          "--batch-size", "8", "--epochs", "2", "--print-freq", "1", "--workers", "0", "--lr", "0.05",
          "--output-dir", out, "--seed", "3", "--augment", "--lr-warmup-epochs", "1", "--device", "cpu"};
}

int train(std::vector<std::string> args, const std::vector<std::string>& more = {}) {
  args.insert(args.end(), more.begin(), more.end());
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::run_train(f);
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The metrics that must replay exactly: everything but timings, and but the memory records
// (an allocator's peaks depend on what the process allocated before, which a resumed run
// did not do).
std::vector<std::string> replayable(const fs::path& metrics) {
  std::vector<std::string> out;
  std::istringstream in(read(metrics));
  for (std::string line; std::getline(in, line);) {
    json::Value v = json::parse(line);
    if (v.find("type") && v.find("type")->as_string() == "memory") continue;
    json::Object kept;
    for (auto& [k, x] : v.as_object())
      if (k != "img_per_s" && k != "eta_s") kept.emplace_back(k, x);
    out.push_back(json::dump(json::Value(kept)));
  }
  return out;
}

TEST_CASE("an interrupted and resumed run is bit-identical to an uninterrupted one") {
  const std::string a = tmpdir("full"), b = tmpdir("resumed");
  REQUIRE(train(tiny(a)) == 0);
  // Stop mid-epoch 0 (step 5 of 8), then resume to the end.
  REQUIRE(train(tiny(b), {"--steps", "5"}) == 0);
  REQUIRE(train(tiny(b), {"--resume", b + "/checkpoint.safetensors"}) == 0);

  CHECK(read(fs::path(a) / "model.safetensors") == read(fs::path(b) / "model.safetensors"));
  const std::vector<std::string> ma = replayable(fs::path(a) / "metrics.jsonl");
  const std::vector<std::string> mb = replayable(fs::path(b) / "metrics.jsonl");
  CHECK(ma.size() == 16 + 2);  // 16 logged steps, 2 evaluations
  CHECK(ma == mb);
  // Resuming a finished run trains nothing more and changes nothing.
  REQUIRE(train(tiny(b), {"--resume", b + "/checkpoint.safetensors"}) == 0);
  CHECK(read(fs::path(a) / "model.safetensors") == read(fs::path(b) / "model.safetensors"));
}

TEST_CASE("model.safetensors holds the full state under torchvision's keys") {
  const std::string a = tmpdir("keys");
  REQUIRE(train(tiny(a), {"--steps", "2"}) == 0);
  const auto w = load_safetensors(a + "/model.safetensors");
  CHECK(w.count("conv1.weight"));
  CHECK(w.count("bn1.running_var"));
  CHECK(w.count("layer2.0.downsample.0.weight"));
  CHECK(w.at("bn1.num_batches_tracked").dtype() == DType::i64);
  CHECK(w.at("bn1.num_batches_tracked").item() == 2);
  CHECK(w.at("fc.weight").shape() == Shape{4, 32});
  // --init-weights takes it back.
  const std::string c = tmpdir("init");
  CHECK(train(tiny(c), {"--steps", "1", "--init-weights", a + "/model.safetensors"}) == 0);
}

TEST_CASE("eval reproduces the last evaluation; accumulation counts micro-batches") {
  const std::string a = tmpdir("eval");
  REQUIRE(train(tiny(a), {"--epochs", "1"}) == 0);
  cli::Flags e(cli::eval_flags());
  e.parse({"--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4", "--width", "4",
           "--batch-size", "8", "--workers", "0", "--checkpoint", a + "/checkpoint.safetensors"});
  CHECK(cli::run_eval(e) == 0);
  cli::Flags w(cli::eval_flags());
  w.parse({"--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4", "--width", "4",
           "--batch-size", "8", "--workers", "0"});
  CHECK_THROWS_WITH_AS(cli::run_eval(w), doctest::Contains("needs weights"), UsageError);

  // 8 batches per epoch, 2 per step: 4 optimizer steps, each logged.
  const std::string b = tmpdir("accum");
  REQUIRE(train(tiny(b), {"--epochs", "1", "--accum-steps", "2"}) == 0);
  const std::vector<std::string> m = replayable(fs::path(b) / "metrics.jsonl");
  REQUIRE(m.size() == 4 + 1);
  CHECK(m[3].find("\"step\":4") != std::string::npos);
  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("accum_big")), {"--accum-steps", "9"}),
                       doctest::Contains("smaller than one step"), UsageError);
}

TEST_CASE("bad input gets clear errors and loses nothing") {
  const std::string a = tmpdir("errors");
  REQUIRE(train(tiny(a), {"--steps", "1"}) == 0);
  const std::string before = read(fs::path(a) / "checkpoint.safetensors");

  CHECK_THROWS_WITH_AS(train(tiny(a)), doctest::Contains("already holds a checkpoint"), UsageError);
  CHECK_THROWS_WITH_AS(train(tiny(a), {"--resume", a + "/checkpoint.safetensors", "--lr", "0.2"}),
                       doctest::Contains("--lr 0.05 but this run has --lr 0.2"), UsageError);
  CHECK(read(fs::path(a) / "checkpoint.safetensors") == before);

  // A truncated checkpoint.
  const std::string t = tmpdir("truncated");
  fs::create_directories(t);
  { std::ofstream(fs::path(t) / "checkpoint.safetensors", std::ios::binary) << before.substr(0, before.size() / 2); }
  CHECK_THROWS_WITH_AS(train(tiny(t), {"--resume", t + "/checkpoint.safetensors"}),
                       doctest::Contains("checkpoint.safetensors"), Error);

  // Weights of another shape.
  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("shape")), {"--width", "8", "--init-weights", a + "/model.safetensors"}),
                       doctest::Contains("conv1.weight"), UsageError);

  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("path")), {"--dataset", "fashion-mnist", "--data-path", "/nonexistent/fm"}),
                       doctest::Contains("/nonexistent/fm"), Error);
  CHECK_THROWS_WITH_AS(train(tiny("/dev/null/out")), doctest::Contains("/dev/null/out"), Error);
  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("nan")), {"--lr", "1e30", "--lr-warmup-epochs", "0"}),
                       doctest::Contains("at step"), Error);
  CHECK(train(tiny(tmpdir("skip")), {"--lr", "1e30", "--lr-warmup-epochs", "0", "--skip-nonfinite", "--steps", "4"}) ==
        0);
}

TEST_CASE("--precision: fp32 on the CPU, recorded in the checkpoint; bf16/fp16 need a GPU") {
  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("bf16")), {"--precision", "bf16"}), doctest::Contains("--precision fp32"),
                       Error);
  CHECK_THROWS_WITH_AS(train(tiny(tmpdir("fp16")), {"--precision", "fp16"}), doctest::Contains("needs a GPU"), Error);
  // auto resolves to fp32 here; the checkpoint records what it chose. --cudnn-benchmark is
  // ignored on the CPU.
  const std::string a = tmpdir("precision");
  REQUIRE(train(tiny(a), {"--steps", "2", "--cudnn-benchmark"}) == 0);
  std::map<std::string, std::string> meta;
  const auto ckpt = load_safetensors(a + "/checkpoint.safetensors", &meta);
  std::string precision;
  for (const auto& [k, v] : json::parse(meta.at("flags")).as_object())
    if (k == "precision") precision = v.as_string();
  CHECK(precision == "fp32");
  for (const auto& [k, t] : ckpt) CHECK_MESSAGE(k.rfind("grad_scaler.", 0) != 0, k);  // no loss scaling in fp32
  // Resuming with another precision changes the trajectory: refused. fp32 given
  // explicitly is what auto chose: accepted.
  CHECK_THROWS_WITH_AS(train(tiny(a), {"--resume", a + "/checkpoint.safetensors", "--precision", "tf32"}),
                       doctest::Contains("--precision fp32 but this run has --precision tf32"), UsageError);
  CHECK(train(tiny(a), {"--resume", a + "/checkpoint.safetensors", "--precision", "fp32", "--steps", "3"}) == 0);
  // eval takes --precision and --device too.
  cli::Flags e(cli::eval_flags());
  e.parse({"--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4", "--width", "4",
           "--batch-size", "8", "--workers", "0", "--device", "cpu", "--precision", "fp16", "--checkpoint",
           a + "/checkpoint.safetensors"});
  CHECK_THROWS_WITH_AS(cli::run_eval(e), doctest::Contains("needs a GPU"), Error);
}

TEST_CASE("flags: unknown names and bad values name the flag and what it accepts") {
  cli::Flags f(cli::train_flags());
  CHECK_THROWS_WITH_AS(f.parse({"--bogus", "1"}), doctest::Contains("unknown flag --bogus"), UsageError);
  CHECK_THROWS_WITH_AS(f.parse({"--lr", "fast"}), doctest::Contains("--lr takes a number, got 'fast'"),
                       UsageError);
  CHECK_THROWS_WITH_AS(f.parse({"--optimizer", "lamb"}), doctest::Contains("not one of: sgd, adamw"), UsageError);
  CHECK_THROWS_WITH_AS(f.parse({"--model", "vgg"}), doctest::Contains("resnet50"), UsageError);
  CHECK_THROWS_WITH_AS(f.parse({"--epochs"}), doctest::Contains("needs an integer"), UsageError);
  f.parse({"--lr=0.3", "--nesterov", "--epochs", "7"});
  CHECK(f.number("lr") == 0.3);
  CHECK(f.boolean("nesterov"));
  CHECK(f.integer("epochs") == 7);
  CHECK(f.str("optimizer") == "sgd");
  const std::string help = f.help("usage");
  CHECK(help.find("--batch-size N") != std::string::npos);
  CHECK(help.find("[default: 128]") != std::string::npos);
}

}  // namespace
}  // namespace rt
