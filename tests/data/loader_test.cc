// Loader: batches identical for any worker count, resume mid-epoch, errors from workers
// rethrown in order, clean shutdown.
#include "data/loader.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

std::unique_ptr<Dataset> synthetic(int64_t n) {
  DatasetOptions o;
  o.synthetic.size = n;
  o.synthetic.image_shape = {3, 6, 5};
  o.synthetic.num_classes = 4;
  o.synthetic.seed = 17;
  return open_dataset("synthetic", "", "train", o);
}

SamplerOptions shuffled(uint64_t seed) {
  SamplerOptions o;
  o.seed = seed;
  return o;
}

LoaderOptions with_workers(int workers, bool augment = false, int prefetch = 0) {
  LoaderOptions o;
  o.workers = workers;
  o.prefetch = prefetch;
  o.augment.enabled = augment;
  o.augment.pad = 2;
  o.augment.seed = 5;
  return o;
}

struct Flat {
  std::vector<float> images;
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
    CHECK(b->images.dtype() == rt::DType::f32);
    CHECK(b->labels.dtype() == rt::DType::i64);
    out.push_back({b->images.to_vector<float>(), b->labels.to_vector<int64_t>(), b->images.shape(), b->index});
  }
  return out;
}

// Throws from get() for one index; optionally slow, so workers are busy when it fails.
class FailingDataset final : public Dataset {
 public:
  explicit FailingDataset(int64_t bad) : bad_(bad) {}
  int64_t size() const override { return 40; }
  rt::Shape image_shape() const override { return {1, 2, 2}; }
  int64_t num_classes() const override { return 2; }
  std::string name() const override { return "failing"; }
  void get(int64_t i, float* chw, int64_t* label) const override {
    RT_CHECK(i != bad_, "cannot read example ", i);
    for (int k = 0; k < 4; ++k) chw[k] = float(i);
    *label = i % 2;
  }

 private:
  int64_t bad_;
};

}  // namespace

TEST_CASE("batches hold the sampler's examples in order; last batch is short") {
  auto ds = synthetic(37);
  SamplerOptions so;
  so.shuffle = false;
  Loader loader(*ds, Sampler(37, 8, so));
  const auto epoch = run_epoch(loader, 0);
  REQUIRE(epoch.size() == 5);
  CHECK(epoch[4].shape == rt::Shape{5, 3, 6, 5});
  std::vector<float> img(90);
  for (int64_t b = 0; b < 5; ++b) {
    CHECK(epoch[size_t(b)].index == b);
    for (int64_t k = 0; k < int64_t(epoch[size_t(b)].labels.size()); ++k) {
      int64_t label;
      ds->get(b * 8 + k, img.data(), &label);
      CHECK(epoch[size_t(b)].labels[size_t(k)] == label);
      CHECK(std::equal(img.begin(), img.end(), epoch[size_t(b)].images.begin() + k * 90));
    }
  }
}

TEST_CASE("identical batches for workers 0, 1 and 3 (with and without augmentation)") {
  auto ds = synthetic(37);
  for (bool augment : {false, true}) {
    Loader sync(*ds, Sampler(37, 8, shuffled(2)), with_workers(0, augment));
    const auto ref = run_epoch(sync, 3);
    REQUIRE(ref.size() == 5);
    CHECK(run_epoch(sync, 4) != ref);  // another epoch, another order (and augmentation)
    for (int workers : {1, 3}) {
      for (int prefetch : {0, 1}) {
        Loader loader(*ds, Sampler(37, 8, shuffled(2)), with_workers(workers, augment, prefetch));
        CHECK_MESSAGE(run_epoch(loader, 3) == ref, "workers ", workers, " prefetch ", prefetch);
        CHECK(run_epoch(loader, 3) == ref);  // the same loader, epoch rerun
      }
    }
  }
}

TEST_CASE("augmentation changes the images, not the labels") {
  auto ds = synthetic(37);
  Loader plain(*ds, Sampler(37, 8, shuffled(2)), with_workers(0, false));
  Loader aug(*ds, Sampler(37, 8, shuffled(2)), with_workers(2, true));
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
  auto ds = synthetic(37);
  for (int workers : {0, 3}) {
    Loader loader(*ds, Sampler(37, 8, shuffled(9)), with_workers(workers, true));
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
  auto ds = synthetic(400);
  for (int i = 0; i < 20; ++i) {
    Loader loader(*ds, Sampler(400, 4, shuffled(1)), with_workers(4, true, 3));
    loader.start_epoch(0);
    if (i % 2) loader.next();
  }  // a hang or crash here fails the test
  Loader never_started(*ds, Sampler(400, 4));
  check_error([&] { never_started.next(); }, {"start_epoch"});
}

TEST_CASE("bad options") {
  auto ds = synthetic(10);
  check_error([&] { Loader(*ds, Sampler(11, 4)); }, {"11 examples", "has 10"});
  check_error([&] { Loader(*ds, Sampler(10, 4), with_workers(-1)); }, {"workers -1"});
  LoaderOptions o = with_workers(0, true);
  o.augment.pad = -1;
  check_error([&] { Loader(*ds, Sampler(10, 4), o); }, {"pad -1"});
}
