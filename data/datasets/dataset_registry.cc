#include "data/datasets/dataset_registry.h"

#include "base/name_registry.h"

namespace rt::data {
namespace {

// Function-local static, so a registration from another file's static initialiser finds it
// constructed.
NameRegistry<DatasetEntry>& registry() {
  static NameRegistry<DatasetEntry> r("dataset", "RT_REGISTER_DATASET");
  return r;
}

}  // namespace

DatasetEntry described_dataset(std::string name, const std::function<void(DatasetEntry&)>& describe) {
  DatasetEntry e;
  e.name = std::move(name);
  describe(e);
  return e;
}

bool register_dataset(DatasetEntry entry) {
  if (entry.name.empty() || !entry.open)
    return registry().refuse("a dataset was registered with an empty name or no open function (RT_REGISTER_DATASET)");
  // After every entry of its order or a lower one: the registration order breaks ties.
  return registry().add(std::move(entry),
                        [](const DatasetEntry& a, const DatasetEntry& b) { return a.order < b.order; });
}

const std::vector<DatasetEntry>& dataset_registry() { return registry().entries(); }

std::vector<std::string> dataset_names() { return registry().names(); }

const DatasetEntry& find_dataset(const std::string& name) {
  if (const DatasetEntry* e = registry().find(name)) return *e;
  RT_FAIL("unknown dataset '", name, "': expected one of ", registry().joined_names());
}

}  // namespace rt::data
