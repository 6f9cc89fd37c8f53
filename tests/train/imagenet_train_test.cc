// `ringtape train` and `ringtape eval` on a tiny ImageNet tree (tests/data/imagenet_tree.h):
// a run over the ImageFolder layout with damaged files finishes, counts what it skipped in
// metrics.jsonl, leaves weights that `eval` reads back, and --strict-images stops at the
// first damaged file, naming it.
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
#include "tests/data/imagenet_tree.h"
#include "cli/train_command.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string tmpdir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("imagenet_train_test_" + name);
  fs::remove_all(p);
  return p.string();
}

// The tree: 24 train files (3 damaged) and 10 val files (1 damaged). Batch 4 divides 24,
// so with drop_last and no shuffling every train file is read once per epoch and each
// damaged one is replaced by its (readable) successor: exactly 3 skipped.
const data::test::ImagenetTree& tree() {
  static const data::test::ImagenetTree t = data::test::write_imagenet_tree(tmpdir("tree"));
  return t;
}

std::vector<std::string> data_flags() {
  static const std::string cache = tmpdir("cache");
  return {"--dataset", "imagenet", "--data-path", tree().root, "--model", "resnet18", "--width", "4",
          "--batch-size", "4", "--workers", "2", "--val-resize-size", "36", "--val-crop-size", "32",
          "--cache-dir", cache, "--train-crop-size", "32",  // eval builds the model from it too
          "--device", "cpu"};  // a CPU test also where a GPU is present
}

std::vector<std::string> train_args(const std::string& out) {
  std::vector<std::string> a = data_flags();
  const std::vector<std::string> more = {"--epochs", "1", "--train-crop-size", "32", "--output-dir", out,
                                         "--print-freq", "1", "--no-shuffle", "--lr", "0.05"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

int train(const std::vector<std::string>& args) {
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::run_train(f);
}

std::vector<json::Value> records(const fs::path& metrics, const std::string& type) {
  std::ifstream in(metrics);
  std::vector<json::Value> out;
  for (std::string line; std::getline(in, line);) {
    json::Value v = json::parse(line);
    if (v.find("type") && v.find("type")->as_string() == type) out.push_back(v);
  }
  return out;
}

TEST_CASE("imagenet: train counts the damaged files it skipped, eval reads the weights back") {
  REQUIRE(tree().bad_train.size() == 3);
  REQUIRE(tree().bad_val.size() == 1);
  const std::string out = tmpdir("run");
  REQUIRE(train(train_args(out)) == 0);
  REQUIRE(fs::exists(fs::path(out) / "model.safetensors"));
  const auto w = load_safetensors(out + "/model.safetensors");
  CHECK(w.at("fc.weight").shape() == Shape{4, 32});  // 4 classes: the empty one too

  const std::vector<json::Value> steps = records(fs::path(out) / "metrics.jsonl", "train");
  CHECK(steps.size() == 6);  // 24 images / batch 4, every step logged
  const std::vector<json::Value> evals = records(fs::path(out) / "metrics.jsonl", "eval");
  REQUIRE(evals.size() == 1);
  CHECK(evals[0].find("skipped_train_images")->as_int() == 3);
  CHECK(evals[0].find("skipped_eval_images")->as_int() == 1);
  CHECK(evals[0].find("step")->as_int() == 6);

  cli::Flags e(cli::eval_flags());
  std::vector<std::string> eval_args = data_flags();
  eval_args.insert(eval_args.end(), {"--init-weights", out + "/model.safetensors"});
  e.parse(eval_args);
  CHECK(cli::run_eval(e) == 0);

  // The same weights on the flat validation layout (val/*.JPEG + LOC_val_solution.csv).
  const data::test::ImagenetTree flat = data::test::write_imagenet_tree_flat(tmpdir("flat"));
  cli::Flags ef(cli::eval_flags());
  eval_args[3] = flat.root;  // --data-path
  ef.parse(eval_args);
  CHECK(cli::run_eval(ef) == 0);
}

TEST_CASE("imagenet: --strict-images stops at the first damaged file, naming it") {
  std::vector<std::string> args = train_args(tmpdir("strict"));
  args.push_back("--strict-images");
  // File order: n01440764_7.JPEG (index 6, in the second batch) is the first damaged one.
  const std::string first = tree().path(tree().bad_train[0]);
  std::string msg = "<no error>";
  try {
    train(args);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find(first) != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("strict_images is set") != std::string::npos, msg);
}

}  // namespace
}  // namespace rt
