// Datasets: random-access image classification examples, already normalised.
//
// A Dataset holds (or computes) its examples and hands out one at a time as float32 CHW
// plus a label. Reads are const and thread-safe, so the Loader's worker threads share a
// single instance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace rt::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape image_shape() const = 0;  // {C, H, W}
  virtual int64_t num_classes() const = 0;
  virtual std::string name() const = 0;
  // Writes example i (0 <= i < size()) as float32 CHW, normalised with the dataset's
  // mean/std, and its label in [0, num_classes()).
  virtual void get(int64_t i, float* chw, int64_t* label) const = 0;
};

// The "synthetic" dataset: random examples computed on demand (nothing is stored).
struct SyntheticOptions {
  int64_t size = 1024;                // examples per split
  Shape image_shape = {3, 32, 32};    // {C, H, W}
  int64_t num_classes = 10;
  uint64_t seed = 0;
};

struct DatasetOptions {
  SyntheticOptions synthetic;
  // "tensors" with uint8 images: per-channel mean and std applied after /255. Empty: no
  // normalisation; one value: the same for every channel; else one per channel.
  std::vector<double> mean;
  std::vector<double> std;
  // "tensors": number of classes; 0 = the largest label + 1.
  int64_t num_classes = 0;
};

// The dataset names open_dataset accepts, for help texts: "fashion-mnist, cifar10, ...".
const char* dataset_names();
// Where `name` looks when no data path is given ("" when it needs one).
std::string default_data_path(const std::string& name);

// name: fashion-mnist | cifar10 | synthetic | tensors; split: "train" | "test".
// data_path: a folder (fashion-mnist, cifar10), a .safetensors file or a folder holding
// <split>.safetensors (tensors), ignored by synthetic; "" = default_data_path(name).
// Throws rt::Error naming the path, what was expected there and how to fix it.
std::unique_ptr<Dataset> open_dataset(const std::string& name, const std::string& data_path, const std::string& split,
                                      const DatasetOptions& opt = {});

}  // namespace rt::data
