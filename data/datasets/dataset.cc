// open_dataset: the split's check, the registry's lookup, the default path.
#include "data/datasets/dataset.h"

#include "base/error.h"
#include "data/datasets/dataset_registry.h"

namespace rt::data {

std::string default_data_path(const std::string& name) { return find_dataset(name).default_path; }

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
  const DatasetEntry& entry = find_dataset(name);
  DatasetOptions o = opt;
  o.augment.enabled = o.augment.enabled && split == "train";
  return entry.open(data_path.empty() ? entry.default_path : data_path, split, o);
}

}  // namespace rt::data
