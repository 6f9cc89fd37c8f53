#include "data/datasets/dataset_registry.h"

#include <algorithm>

#include "base/error.h"

namespace rt::data {
namespace {

// Function-local statics, so a registration from another file's static initialiser finds
// them constructed.
std::vector<DatasetEntry>& entries() {
  static std::vector<DatasetEntry> r;
  return r;
}

std::string& registration_error() {
  static std::string e;
  return e;
}

}  // namespace

DatasetEntry described_dataset(std::string name, const std::function<void(DatasetEntry&)>& describe) {
  DatasetEntry e;
  e.name = std::move(name);
  describe(e);
  return e;
}

bool register_dataset(DatasetEntry entry) {
  std::string& err = registration_error();
  if (entry.name.empty() || !entry.open) {
    if (err.empty()) err = "a dataset was registered with an empty name or no open function (RT_REGISTER_DATASET)";
    return false;
  }
  for (const DatasetEntry& e : entries())
    if (e.name == entry.name) {
      if (err.empty()) err = "dataset '" + entry.name + "' is registered twice (RT_REGISTER_DATASET): rename one";
      return false;
    }
  // After every entry of its order or a lower one: the registration order breaks ties.
  const auto at = std::upper_bound(entries().begin(), entries().end(), entry.order,
                                   [](int order, const DatasetEntry& e) { return order < e.order; });
  entries().insert(at, std::move(entry));
  return true;
}

const std::vector<DatasetEntry>& dataset_registry() {
  RT_CHECK(registration_error().empty(), registration_error());
  return entries();
}

std::vector<std::string> dataset_names() {
  std::vector<std::string> n;
  for (const DatasetEntry& e : dataset_registry()) n.push_back(e.name);
  return n;
}

const DatasetEntry& find_dataset(const std::string& name) {
  std::string known;
  for (const DatasetEntry& e : dataset_registry()) {
    if (e.name == name) return e;
    known += (known.empty() ? "" : ", ") + e.name;
  }
  RT_FAIL("unknown dataset '", name, "': expected one of ", known);
}

}  // namespace rt::data
