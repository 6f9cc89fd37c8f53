// `ringtape pack` then `ringtape train --dataset webdataset` on the tiny ImageNet tree
// (tests/data/imagenet_tree.h), as processes: the damaged files are left out at pack time,
// one process trains on every readable sample, and evaluation over 1, 2 and 3 Gloo ranks
// (Note [Shard order]'s contiguous ranges) counts each validation sample exactly once.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "distributed/net_util.h"
#include "tests/data/imagenet_tree.h"
#include "tests/train/process_util.h"

namespace rt {
namespace {

namespace fs = std::filesystem;
using test::Run;

fs::path tmpdir(const std::string& name) { return test::fresh_dir("webdataset_train_test_", name); }

int free_port() { return dist::net::local_port(dist::net::listen_tcp("127.0.0.1", 0).get()); }

// The tree packed once: 21 readable train images (3 damaged ones skipped), 9 val images.
const fs::path& shards() {
  static const fs::path dir = [] {
    const fs::path d = tmpdir("shards");
    const data::test::ImagenetTree t = data::test::write_imagenet_tree((d / "tree").string());
    for (const std::string split : {"train", "val"}) {
      const Run r = test::ringtape({"pack", "--data-path", t.root + "/" + split, "--output", (d / split).string(),
                                    "--shard-size", "64KiB", "--no-progress", "--cache-dir", (d / "cache").string()},
                                   d / ("pack_" + split + ".txt"));
      INFO(r.output);
      REQUIRE(r.status == 0);
    }
    return d;
  }();
  return dir;
}

std::vector<std::string> run_args(const fs::path& out, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"train", "--dataset", "webdataset", "--data-path", shards().string(), "--model",
                                "resnet18", "--width", "4", "--batch-size", "4", "--train-crop-size", "32",
                                "--val-resize-size", "36", "--val-crop-size", "32", "--epochs", "1", "--workers", "1",
                                "--device", "cpu", "--print-freq", "1", "--shuffle-buffer", "5", "--output-dir",
                                out.string()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST_CASE("pack skips the damaged files; one process trains on every readable sample") {
  const std::string pack = test::read_file(shards() / "pack_train.txt");
  CHECK_MESSAGE(pack.find("24 images -> 21 samples") != std::string::npos, pack);
  CHECK_MESSAGE(pack.find("3 skipped as unreadable") != std::string::npos, pack);
  const fs::path dir = tmpdir("one");
  const Run r = test::ringtape(run_args(dir / "run"), dir / "out.txt", std::chrono::seconds(120));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("21 images, 5 steps per epoch") != std::string::npos);
  CHECK(r.output.find("(9 images)") != std::string::npos);
  CHECK(fs::exists(dir / "run" / "model.safetensors"));
}

// torchvision-v2 sets --ra-sampler true and 5 warmup epochs: on shards and with --epochs 1
// both are usage errors (status 2) that name the recipe and the flag value that overrides it;
// with those values the recipe trains.
TEST_CASE("a recipe's --ra-sampler and warmup on shards: usage errors naming the recipe, whose advice works") {
  const fs::path dir = tmpdir("recipe");
  const std::vector<std::string> recipe = {"--recipe", "torchvision-v2"};
  auto with = [&](const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> a = run_args(dir / name, recipe);
    a.insert(a.end(), more.begin(), more.end());
    return test::ringtape(a, dir / (name + ".txt"), std::chrono::seconds(120));
  };
  const Run warmup = with("warmup", {"--ra-sampler", "false"});
  INFO(warmup.output);
  CHECK(warmup.status == 2);
  CHECK(warmup.output.find("the recipe torchvision-v2 sets --lr-warmup-epochs 5; pass --lr-warmup-epochs N") !=
        std::string::npos);
  const Run ra = with("ra", {"--lr-warmup-epochs", "0"});
  INFO(ra.output);
  CHECK(ra.status == 2);
  CHECK(ra.output.find("the recipe torchvision-v2 sets --ra-sampler true") != std::string::npos);
  CHECK(ra.output.find("--ra-sampler false") != std::string::npos);
  const Run ok = with("ok", {"--ra-sampler", "false", "--lr-warmup-epochs", "0"});
  INFO(ok.output);
  CHECK(ok.status == 0);
}

TEST_CASE("2 and 3 ranks: each reads its part of the shards; evaluation counts every sample once") {
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const fs::path dir = tmpdir("ranks" + std::to_string(world));
    const Run r = test::ringtape(run_args(dir / "run", {"--nproc-per-node", std::to_string(world), "--master-port",
                                                        std::to_string(free_port()), "--timeout", "30"}),
                                 dir / "out.txt", std::chrono::seconds(180));
    INFO(r.output);
    REQUIRE(r.status == 0);
    // ceil(21 / world) samples per rank: one or two steps of 4.
    CHECK(r.output.find(world == 2 ? "2 steps per epoch" : "1 steps per epoch") != std::string::npos);
    CHECK(r.output.find("(9 images)") != std::string::npos);
  }
}

}  // namespace
}  // namespace rt
