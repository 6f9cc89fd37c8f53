// The dataset registry: the built-in datasets register from their own files in a fixed order
// with their properties (Note [Dataset properties]); a dataset registered from another file
// opens by name; an unknown name lists the registered ones; a name registered twice is
// refused at the next lookup.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "data/datasets/dataset.h"
#include "data/datasets/dataset_registry.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using namespace rt::data::test;

namespace {

// What the factory below was called with.
std::string opened_path, opened_split;
bool opened_augment = false;

// A dataset registered from this file, listed between fashion-mnist (10) and cifar10 (20):
// the synthetic examples under another name.
RT_REGISTER_DATASET("registry-test", [](::rt::data::DatasetEntry& e) {
  e.order = 15;
  e.default_path = "/nowhere";
  e.generated = true;
  e.open = [](const std::string& path, const std::string& split, const DatasetOptions& o) {
    opened_path = path;
    opened_split = split;
    opened_augment = o.augment.enabled;
    return open_dataset("synthetic", "", split, o);
  };
});

}  // namespace

TEST_CASE("the built-in datasets, in their order, with their properties") {
  CHECK(dataset_names() == std::vector<std::string>{"fashion-mnist", "registry-test", "cifar10", "imagenet",
                                                    "webdataset", "synthetic", "tensors"});
  CHECK(find_dataset("fashion-mnist").augment_pad == 2);
  CHECK(find_dataset("cifar10").augment_pad == 4);
  for (const DatasetEntry& e : dataset_registry()) {
    CAPTURE(e.name);
    CHECK(e.image_pipeline == (e.name == "imagenet" || e.name == "webdataset"));
    CHECK(e.sharded == (e.name == "webdataset"));
    CHECK(e.generated == (e.name == "synthetic" || e.name == "registry-test"));
  }
  CHECK(default_data_path("fashion-mnist") == "/usr/share/datasets/fashion-mnist");
  CHECK(default_data_path("cifar10").empty());
}

TEST_CASE("a dataset registered from another file opens by name, with its default path") {
  DatasetOptions o;
  o.synthetic.size = 8;
  o.synthetic.image_shape = {1, 4, 4};
  o.augment.enabled = true;
  CHECK(open_dataset("registry-test", "", "train", o)->size() == 8);
  CHECK(opened_path == "/nowhere");
  CHECK(opened_augment);
  open_dataset("registry-test", "elsewhere", "test", o);
  CHECK(opened_path == "elsewhere");
  CHECK(opened_split == "test");
  CHECK_FALSE(opened_augment);  // the test split is not augmented
}

TEST_CASE("an unknown name lists the registered ones") {
  check_error([] { open_dataset("mnist", "", "train"); },
              {"unknown dataset 'mnist': expected one of fashion-mnist, registry-test, cifar10, imagenet, webdataset, "
               "synthetic, tensors"});
  check_error([] { default_data_path("mnist"); }, {"unknown dataset 'mnist'"});
}

// Last in the file (doctest runs a file's cases in order): the registry refuses every lookup after it.
TEST_CASE("a name registered twice is refused at the next lookup") {
  DatasetEntry twice;
  twice.name = "cifar10";
  twice.open = [](const std::string&, const std::string&, const DatasetOptions&) -> std::unique_ptr<Dataset> {
    return nullptr;
  };
  CHECK_FALSE(register_dataset(twice));
  check_error([] { dataset_names(); }, {"dataset 'cifar10' is registered twice (RT_REGISTER_DATASET): rename one"});
  check_error([] { open_dataset("synthetic", "", "train"); }, {"registered twice"});
}
