// Checkpoints used with other settings than they were trained with, as processes on the tiny
// ImageNet tree (tests/data/imagenet_tree.h): --resume names the settings that differ (not
// the tensors' shapes that follow from them), `ringtape eval` of a checkpoint trained at 32 px
// names the small stem and the flag it follows from (and that flag then works), and resuming
// on a smaller training set says what that does to the schedule.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/data/imagenet_tree.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using test::Run;

fs::path tmpdir(const std::string& name) { return test::fresh_dir("resume_config_test_", name); }

const data::test::ImagenetTree& tree() {
  static const data::test::ImagenetTree t = data::test::write_imagenet_tree(tmpdir("tree").string());
  return t;
}

// The model follows --train-crop-size: 32 px gives the small stem and width 16 (auto).
std::vector<std::string> data_args(const std::string& root, const fs::path& cache) {
  return {"--dataset", "imagenet", "--data-path", root, "--model", "resnet18", "--batch-size", "4", "--workers",
          "1", "--val-resize-size", "36", "--val-crop-size", "32", "--cache-dir", cache.string(), "--device", "cpu"};
}

std::vector<std::string> train_args(const std::string& root, const fs::path& dir, std::vector<std::string> more) {
  std::vector<std::string> a = {"train"};
  for (const std::string& x : data_args(root, dir / "cache")) a.push_back(x);
  a.insert(a.end(), {"--train-crop-size", "32", "--epochs", "2", "--no-shuffle", "--print-freq", "1", "--lr",
                     "0.05", "--output-dir", (dir / "run").string()});
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// One step at 32 px, checkpointed: the checkpoint of the cases below.
fs::path checkpoint(const fs::path& dir) {
  const Run r = test::ringtape(train_args(tree().root, dir, {"--steps", "2"}), dir / "first.txt");
  INFO(r.output);
  REQUIRE(r.status == 0);
  return dir / "run" / "checkpoint.safetensors";
}

TEST_CASE("--resume with another crop size names the flag, not 102 tensors of another shape") {
  const fs::path dir = tmpdir("crop");
  const fs::path ckpt = checkpoint(dir);
  const Run r = test::ringtape(train_args(tree().root, dir, {"--resume", ckpt.string(), "--train-crop-size", "80"}),
                               dir / "resume.txt");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("--train-crop-size 32") != std::string::npos);
  CHECK(r.output.find("--train-crop-size 80") != std::string::npos);
  CHECK(r.output.find("of another shape") == std::string::npos);
  // Every setting that differs, not only the first.
  const Run two = test::ringtape(
      train_args(tree().root, dir, {"--resume", ckpt.string(), "--train-crop-size", "80", "--width", "8"}),
      dir / "resume2.txt");
  INFO(two.output);
  CHECK(two.status == 2);
  CHECK(two.output.find("--train-crop-size 32") != std::string::npos);
  CHECK(two.output.find("--width auto") != std::string::npos);
}

TEST_CASE("eval of a checkpoint trained at 32 px names the small stem and --train-crop-size; passing it works") {
  const fs::path dir = tmpdir("eval");
  const fs::path ckpt = checkpoint(dir);
  std::vector<std::string> eval = {"eval"};
  for (const std::string& x : data_args(tree().root, dir / "cache")) eval.push_back(x);
  eval.insert(eval.end(), {"--checkpoint", ckpt.string()});
  const Run bad = test::ringtape(eval, dir / "eval_bad.txt");
  INFO(bad.output);
  CHECK(bad.status == 2);
  CHECK(bad.output.find("small stem") != std::string::npos);
  CHECK(bad.output.find("--train-crop-size 32") != std::string::npos);
  eval.insert(eval.end(), {"--train-crop-size", "32"});
  const Run good = test::ringtape(eval, dir / "eval_good.txt");
  INFO(good.output);
  CHECK(good.status == 0);
  CHECK(good.output.find("top-1") != std::string::npos);
}

TEST_CASE("resuming on a smaller training set says how the schedule shrinks") {
  const fs::path dir = tmpdir("smaller");
  const fs::path ckpt = checkpoint(dir);  // 24 images, batch 4: 6 steps per epoch
  // The same classes with half of the training images.
  const fs::path small = dir / "small";
  fs::copy(tree().root, small, fs::copy_options::recursive);
  for (size_t i = 0; i < tree().train.size(); i += 2) fs::remove(small / tree().train[i].rel);
  const Run r = test::ringtape(train_args(small.string(), dir, {"--resume", ckpt.string(), "--steps", "3"}),
                               dir / "resume.txt");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("3 steps per epoch, the checkpoint's run had 6") != std::string::npos);
  CHECK(r.output.find("2 epochs x 3 = 6 steps instead of 12") != std::string::npos);
}

}  // namespace
}  // namespace rt
