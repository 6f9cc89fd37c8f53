// open_dataset: name and split dispatch, default paths.
#include "data/dataset.h"

#include "data/datasets.h"
#include "base/error.h"

namespace rt::data {

const char* dataset_names() { return "fashion-mnist, cifar10, imagenet, webdataset, synthetic, tensors"; }

std::string default_data_path(const std::string& name) {
  if (name == "fashion-mnist") return kFashionMnistDefaultPath;
  return "";
}

void check_labels(const Dataset& d, int64_t num_classes) {
  RT_CHECK(num_classes > 0, "check_labels: the class count ", num_classes, " must be positive");
  // Labels are below d.num_classes() (Note [Label range]): nothing to scan, also for a
  // synthetic dataset of 2^40 examples.
  if (d.num_classes() <= num_classes) return;
  const std::string where = d.location().empty() ? "" : " ('" + d.location() + "')";
  for (int64_t i = 0; i < d.size(); ++i) {
    const int64_t y = d.label(i);
    RT_CHECK(y >= 0 && y < num_classes, "dataset ", d.name(), where, ": label ", y, " of example ", i,
             " is outside [0, ", num_classes, "), the model's classes (the dataset has ", d.num_classes(),
             "); raise the number of classes or fix the labels");
  }
}

std::unique_ptr<Dataset> open_dataset(const std::string& name, const std::string& data_path, const std::string& split,
                                      const DatasetOptions& opt) {
  RT_CHECK(split == "train" || split == "test", "dataset split '", split, "': expected \"train\" or \"test\"");
  const std::string path = data_path.empty() ? default_data_path(name) : data_path;
  AugmentOptions augment = opt.augment;
  augment.enabled = augment.enabled && split == "train";
  if (name == "fashion-mnist") return open_fashion_mnist(path, split, augment);
  if (name == "synthetic") return make_synthetic(opt.synthetic, split, augment);
  if (name == "cifar10") {
    RT_CHECK(!path.empty(), "dataset cifar10 has no default location: download the binary version ",
             "(cifar-10-binary.tar.gz), unpack it and give the path <folder>/cifar-10-batches-bin");
    return open_cifar10(path, split, augment);
  }
  if (name == "imagenet") {
    RT_CHECK(!path.empty(), "dataset imagenet needs a path DIR: ImageNet-1k in the ImageFolder layout, ",
             "DIR/train/<wnid>/*.JPEG and DIR/val/<wnid>/*.JPEG (or DIR/val/*.JPEG with DIR/LOC_val_solution.csv)");
    return open_image_folder(path, split, opt.image_folder);
  }
  if (name == "webdataset") {
    RT_CHECK(!path.empty(), "dataset webdataset needs a path: the folder `ringtape pack` wrote (train-*.tar for ",
             "training, val-*.tar for evaluation), or a brace pattern like 'shards/train-{000000..000146}.tar'");
    return open_webdataset(path, split, opt.image_folder, opt.webdataset);
  }
  if (name == "tensors") {
    RT_CHECK(!path.empty(), "dataset tensors needs a path: a .safetensors file with \"images\" (N,C,H,W) ",
             "and \"labels\" (N), or a folder holding train.safetensors and test.safetensors");
    return open_tensors(path, split, opt);
  }
  RT_FAIL("unknown dataset '", name, "': expected one of ", dataset_names());
}

}  // namespace rt::data
