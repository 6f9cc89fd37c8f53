// Loader: batches identical for any worker count, resume mid-epoch, errors from workers
// rethrown in order, unreadable examples replaced (Note [Unreadable examples]), clean
// shutdown.
#include "data/loading/loader.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "data/datasets/u8_dataset.h"
#include "engine/random.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

// n random u8 images of 3x6x5, labels i % 4; augmented (pad 2, flip) when asked.
std::unique_ptr<Dataset> images(int64_t n, bool augment = false) {
  rt::Generator g(17);
  std::vector<uint8_t> px(size_t(n * 90));
  for (auto& v : px) v = uint8_t(g.randint(0, 256));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i % 4;
  AugmentOptions a;
  a.enabled = augment;
  a.pad = 2;
  a.seed = 5;
  return std::make_unique<U8Dataset>("images", rt::Shape{3, 6, 5}, 4, px, labels, Normalization{}, a);
}

SamplerOptions shuffled(uint64_t seed) {
  SamplerOptions o;
  o.seed = seed;
  return o;
}

LoaderOptions with_workers(int workers, int prefetch = 0) {
  LoaderOptions o;
  o.workers = workers;
  o.prefetch = prefetch;
  o.log_skipped = false;
  return o;
}

struct Flat {
  std::vector<uint8_t> images;
  std::vector<int64_t> labels;
  rt::Shape shape;
  int64_t index;
  bool operator==(const Flat&) const = default;
};

std::vector<Flat> run_epoch(Loader& loader, int64_t epoch, int64_t first = 0) {
  loader.start_epoch(epoch, first);
  std::vector<Flat> out;
  while (auto b = loader.next()) {
    CHECK(b->epoch == epoch);
    CHECK(b->images.dtype() == rt::DType::u8);
    CHECK(b->labels.dtype() == rt::DType::i64);
    out.push_back({b->images.to_vector<uint8_t>(), b->labels.to_vector<int64_t>(), b->images.shape(), b->index});
  }
  return out;
}

// Throws rt::Error from get() for one index (a real failure), BadExample for the
// `unreadable` ones (a damaged file). Pixels are the example's index.
class FailingDataset final : public Dataset {
 public:
  explicit FailingDataset(int64_t bad, std::set<int64_t> unreadable = {}) : bad_(bad), unreadable_(unreadable) {}
  int64_t size() const override { return 40; }
  rt::Shape image_shape() const override { return {1, 2, 2}; }
  int64_t num_classes() const override { return 2; }
  std::string name() const override { return "failing"; }
  void get(int64_t i, int64_t, void* px, int64_t* label) const override {
    RT_CHECK(i != bad_, "cannot read example ", i);
    if (unreadable_.count(i))
      throw BadExample("f" + std::to_string(i) + ".JPEG", "f" + std::to_string(i) + ".JPEG: truncated");
    for (int k = 0; k < 4; ++k) static_cast<uint8_t*>(px)[k] = uint8_t(i);
    *label = i % 2;
  }
  int64_t label(int64_t i) const override { return i % 2; }

 private:
  int64_t bad_;
  std::set<int64_t> unreadable_;
};

}  // namespace

TEST_CASE("batches hold the sampler's examples in order; last batch is short") {
  auto ds = images(37);
  SamplerOptions so;
  so.shuffle = false;
  Loader loader(*ds, Sampler(37, 8, so));
  const auto epoch = run_epoch(loader, 0);
  REQUIRE(epoch.size() == 5);
  CHECK(epoch[4].shape == rt::Shape{5, 6, 5, 3});  // N, H, W, C
  std::vector<uint8_t> img(90);
  for (int64_t b = 0; b < 5; ++b) {
    CHECK(epoch[size_t(b)].index == b);
    for (int64_t k = 0; k < int64_t(epoch[size_t(b)].labels.size()); ++k) {
      int64_t label;
      ds->get(b * 8 + k, 0, img.data(), &label);
      CHECK(epoch[size_t(b)].labels[size_t(k)] == label);
      CHECK(std::equal(img.begin(), img.end(), epoch[size_t(b)].images.begin() + k * 90));
    }
  }
}

TEST_CASE("identical batches for workers 0, 1 and 3 (with and without augmentation)") {
  for (bool augment : {false, true}) {
    auto ds = images(37, augment);
    Loader sync(*ds, Sampler(37, 8, shuffled(2)), with_workers(0));
    const auto ref = run_epoch(sync, 3);
    REQUIRE(ref.size() == 5);
    CHECK(run_epoch(sync, 4) != ref);  // another epoch, another order (and augmentation)
    for (int workers : {1, 3}) {
      for (int prefetch : {0, 1}) {
        Loader loader(*ds, Sampler(37, 8, shuffled(2)), with_workers(workers, prefetch));
        CHECK_MESSAGE(run_epoch(loader, 3) == ref, "workers ", workers, " prefetch ", prefetch);
        CHECK(run_epoch(loader, 3) == ref);  // the same loader, epoch rerun
      }
    }
  }
}

TEST_CASE("augmentation changes the images, not the labels") {
  auto ds = images(37), ds_aug = images(37, true);
  Loader plain(*ds, Sampler(37, 8, shuffled(2)), with_workers(0));
  Loader aug(*ds_aug, Sampler(37, 8, shuffled(2)), with_workers(2));
  const auto a = run_epoch(plain, 0), b = run_epoch(aug, 0);
  REQUIRE(a.size() == b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].labels == b[i].labels);
    differ += a[i].images != b[i].images;
  }
  CHECK(differ > 0);
}

TEST_CASE("starting at batch k equals the tail of the full epoch") {
  auto ds = images(37, true);
  for (int workers : {0, 3}) {
    Loader loader(*ds, Sampler(37, 8, shuffled(9)), with_workers(workers));
    const auto full = run_epoch(loader, 2);
    for (int64_t k : {1, 3, 4}) {
      const auto tail = run_epoch(loader, 2, k);
      CHECK(tail == std::vector<Flat>(full.begin() + k, full.end()));
    }
    CHECK(run_epoch(loader, 2, 5).empty());
    check_error([&] { loader.start_epoch(2, 6); }, {"first batch 6", "[0, 5]"});
  }
}

TEST_CASE("an exception in a worker is rethrown when its batch is due, and again after") {
  FailingDataset ds(20);  // batch 2 of 8-example batches, file order
  SamplerOptions so;
  so.shuffle = false;
  for (int workers : {0, 1, 3}) {
    INFO("workers ", workers);
    Loader loader(ds, Sampler(40, 8, so), with_workers(workers));
    loader.start_epoch(0);
    REQUIRE(loader.next().has_value());
    REQUIRE(loader.next().has_value());
    check_error([&] { loader.next(); }, {"cannot read example 20"});
    check_error([&] { loader.next(); }, {"cannot read example 20"});
    // A new epoch starting after the bad batch works.
    loader.start_epoch(1, 3);
    int n = 0;
    while (loader.next()) ++n;
    CHECK(n == 2);
  }
}

TEST_CASE("destroying a loader mid-epoch joins its workers") {
  auto ds = images(400, true);
  for (int i = 0; i < 20; ++i) {
    Loader loader(*ds, Sampler(400, 4, shuffled(1)), with_workers(4, 3));
    loader.start_epoch(0);
    if (i % 2) loader.next();
  }  // a hang or crash here fails the test
  Loader never_started(*ds, Sampler(400, 4));
  check_error([&] { never_started.next(); }, {"start_epoch"});
}

TEST_CASE("unreadable examples are replaced by the next ones in the order, the same for any worker count") {
  FailingDataset ds(-1, {3, 4, 17, 39});
  SamplerOptions so;
  so.shuffle = false;
  // File order, batches of 8: batch 0 holds 0 1 2 5 5 5 6 7 (positions 3 and 4 both fall
  // through to example 5), batch 2 holds 18 twice, and batch 4 ends with 0 (position 39
  // wraps around to the start of the order).
  Loader ref(ds, Sampler(40, 8, so), with_workers(0));
  ref.start_epoch(0);
  std::vector<Flat> want;
  std::vector<std::vector<SkippedExample>> skipped;
  while (auto b = ref.next()) {
    want.push_back({b->images.to_vector<uint8_t>(), b->labels.to_vector<int64_t>(), b->images.shape(), b->index});
    skipped.push_back(b->skipped);
  }
  REQUIRE(want.size() == 5);
  std::vector<uint8_t> first;
  for (int v : {0, 1, 2, 5, 5, 5, 6, 7}) first.insert(first.end(), 4, uint8_t(v));
  CHECK(want[0].images == first);
  CHECK(want[0].labels == std::vector<int64_t>{0, 1, 0, 1, 1, 1, 0, 1});
  REQUIRE(skipped[0].size() == 3);  // position 3: 3 and 4; position 4: 4
  CHECK(skipped[0][0].source == "f3.JPEG");
  CHECK(skipped[0][1].source == "f4.JPEG");
  CHECK(skipped[0][2].source == "f4.JPEG");
  CHECK(skipped[0][0].reason.find("truncated") != std::string::npos);
  CHECK(want[2].images[1 * 4] == 18);
  CHECK(want[2].images[2 * 4] == 18);
  CHECK(want[4].images[7 * 4] == 0);
  CHECK(ref.skipped_in_epoch() == 5);
  for (int workers : {1, 3}) {
    Loader loader(ds, Sampler(40, 8, so), with_workers(workers));
    CHECK_MESSAGE(run_epoch(loader, 0) == want, "workers ", workers);
    CHECK(loader.skipped_in_epoch() == 5);
  }
  // --strict-images: the first unreadable file is an error naming it.
  LoaderOptions strict = with_workers(2);
  strict.strict = true;
  Loader loader(ds, Sampler(40, 8, so), strict);
  loader.start_epoch(0);
  check_error([&] { loader.next(); }, {"f3.JPEG", "truncated", "strict_images"});
}

TEST_CASE("a run of unreadable examples is an error, not an endless search") {
  std::set<int64_t> all;
  for (int64_t i = 0; i < 40; ++i) all.insert(i);
  FailingDataset ds(-1, all);
  Loader loader(ds, Sampler(40, 8), with_workers(0));
  loader.start_epoch(0);
  check_error([&] { loader.next(); }, {"unreadable examples in a row", "check its path"});
}

TEST_CASE("bad options") {
  auto ds = images(10);
  check_error([&] { Loader(*ds, Sampler(11, 4)); }, {"11 examples", "has 10"});
  check_error([&] { Loader(*ds, Sampler(10, 4), with_workers(-1)); }, {"workers -1"});
  AugmentOptions a;
  a.enabled = true;
  a.pad = -1;
  check_error([&] { U8Dataset("x", rt::Shape{1, 1, 1}, 1, {0}, {0}, Normalization{}, a); }, {"pad -1"});
}

TEST_CASE("a batch that cannot be allocated says what it was for") {
  DatasetOptions o;
  o.synthetic.size = 4;
  // 3 x 2^46 bytes per example, 3 x 2^47 per batch of two: beyond x86-64's 2^47-byte user
  // address space, so the allocation fails on every machine (and under ASan).
  o.synthetic.image_shape = {3, int64_t(1) << 23, int64_t(1) << 23};
  auto ds = open_dataset("synthetic", "", "train", o);
  const std::vector<int64_t> order = {0, 1, 2, 3};
  try {
    assemble_batch(*ds, order, 0, 2, 0, 0);
    FAIL("expected rt::OutOfMemory");
  } catch (const rt::OutOfMemory& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("out of host memory: tried to allocate 422212465065984 bytes (") != std::string::npos);
    CHECK(m.find(" reserved); it was for a batch") != std::string::npos);
    CHECK(m.find("for a batch of 2 examples of dataset synthetic, each u8[3, 8388608, 8388608] (211106232532992 "
                 "bytes). Use a smaller batch size.") != std::string::npos);
  }
  check_error([&] { assemble_batch(*ds, order, 0, 1, 0, 0); },
              {"a batch of 1 example of", "Even one example does not fit: use smaller images."});
  // A U8Dataset checks its labels against its own class count (Note [Label range]).
  check_error([&] { U8Dataset("x", rt::Shape{1, 1, 1}, 2, {0, 0}, {0, 2}, Normalization{}, AugmentOptions{}); },
              {"dataset x: label 2 of example 1 is outside [0, 2)"});
}
