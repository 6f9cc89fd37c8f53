#include "train/train_config.h"

namespace rt::train {

const char* dataset_name(DatasetKind d) {
  for (const auto& [name, value] : kDatasetNames)
    if (value == d) return name;
  return "?";
}

}  // namespace rt::train
