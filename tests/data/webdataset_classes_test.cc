// The class lists of WebDataset shards (data/datasets/webdataset.cc): the evaluation split's summary
// (val.json, written by `ringtape pack`) must list the training split's classes in the same
// order, and a label the summary has no class for is refused with advice that works (it is
// followed here).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"
#include "data/codecs/jpeg_encode.h"
#include "data/pack/pack.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using rt::data::test::check_error;
using rt::data::test::error_of;
using rt::data::test::fresh_dir;
using rt::data::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// `root`/<class>/img<k>.jpg: two tiny photos per class.
void write_classes(const std::string& root, const std::vector<std::string>& classes) {
  for (const std::string& c : classes) {
    fs::create_directories(root + "/" + c);
    for (int k = 0; k < 2; ++k) {
      std::vector<uint8_t> px(24 * 20 * 3, uint8_t(40 * k + c.size()));
      write_bytes(root + "/" + c + "/img" + std::to_string(k) + ".jpg", encode_jpeg(px.data(), 24, 20, 90, c));
    }
  }
}

void pack(const std::string& folder, const std::string& output, const std::string& cache) {
  PackOptions o;
  o.data_path = folder;
  o.output = output;
  o.workers = 1;
  o.progress = false;
  o.cache_dir = cache;
  pack_image_folder(o);
}

DatasetOptions options(const std::string& cache) {
  DatasetOptions o;
  o.image_folder.train_crop_size = 16;
  o.image_folder.val_resize_size = 18;
  o.image_folder.val_crop_size = 16;
  o.image_folder.cache_dir = cache;
  return o;
}

}  // namespace

TEST_CASE("evaluation shards packed with other classes than the training shards are refused") {
  const std::string tree = fresh_dir("wdscls_tree"), out = fresh_dir("wdscls_out"), cache = fresh_dir("wdscls_c");
  write_classes(tree + "/train", {"n0", "n1", "n2", "n3", "n4"});
  // Not named "val": pack takes its own class folders (n1..n4 and n9), not train's.
  write_classes(tree + "/other", {"n1", "n2", "n3", "n4", "n9"});
  pack(tree + "/train", out + "/train", cache);
  pack(tree + "/other", out + "/val", cache);
  check_error([&] { open_dataset("webdataset", out, "test", options(cache)); },
              {"class 0", "'n0'", "'n1'", out + "/train.json", out + "/val.json", "ringtape pack --data-path",
               "--val-data-path"});
  // The fix: val packed from a folder named val beside train takes the train split's classes
  // (pack refuses a class folder train does not have, n9).
  fs::remove_all(tree + "/other/n9");
  fs::rename(tree + "/other", tree + "/val");
  const std::string fixed = fresh_dir("wdscls_fixed");
  pack(tree + "/train", fixed + "/train", cache);
  pack(tree + "/val", fixed + "/val", cache);
  int64_t classes = 0;
  const std::string err = error_of([&] {
    classes = open_dataset("webdataset", fixed, "test", options(cache))->num_classes();
  });
  CHECK(classes == 5);
  CHECK_MESSAGE(err == "<no error>", err);
}

TEST_CASE("a label outside the summary's classes: the advice names the summary, and following it works") {
  const std::string tree = fresh_dir("wdslab_tree"), out = fresh_dir("wdslab_out"), cache = fresh_dir("wdslab_c");
  write_classes(tree + "/train", {"n0", "n1", "n2", "n3", "n4"});
  pack(tree + "/train", out + "/train", cache);
  // A summary that lists fewer classes than the shards' labels use (edited, or from another pack).
  write_bytes(out + "/train.json", {'{', '"', 'c', 'l', 'a', 's', 's', 'e', 's', '"', ':', '[', '"', 'n', '0', '"',
                                    ',', '"', 'n', '1', '"', ']', '}'});
  const std::string msg = error_of([&] { open_dataset("webdataset", out, "train", options(cache)); });
  CHECK_MESSAGE(msg.find(out + "/train.json") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("--num-classes") == std::string::npos, msg);  // it does not change the check
  CHECK_MESSAGE(msg.find("delete") != std::string::npos, msg);
  // The advice: delete the summary, and the class count comes from the labels.
  fs::remove(out + "/train.json");
  int64_t classes = 0;
  const std::string err = error_of([&] {
    classes = open_dataset("webdataset", out, "train", options(cache))->num_classes();
  });
  CHECK(classes == 5);
  CHECK_MESSAGE(err == "<no error>", err);
}
