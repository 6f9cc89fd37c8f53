// Every dataset selectable by name (--dataset). Each registers itself from its own source file
// with RT_REGISTER_DATASET (the built-in ones in data/, a program's own anywhere: examples/
// shows one), with its factory and what the command line checks about it, so adding a
// dataset edits no list: the choices, the help and the checks come from here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"

namespace rt::data {

struct DatasetEntry {
  std::string name;
  // Its position among the names (lower first; equal: registration order), so that the
  // choices and messages list the datasets in one order whatever the files' link order.
  int order = 1000;
  std::string default_path;  // used when no data path is given; "" = none
  // The form of its data path, for the help ("" = default_path, else not listed).
  std::string path_help;
  // What the command line checks a run's options against; its messages name the datasets
  // that have the property (Note [Dataset properties]).
  bool image_pipeline = false;  // JPEG/PNG images through ImageFolderOptions: crops, interpolation, policies
  bool sharded = false;         // read shard by shard: a shuffle buffer and test shards of its own apply,
                                // and it has no permutation of every example (repeated augmentation)
  bool generated = false;       // computed from SyntheticOptions (count, shape, seed), not read from a path
  int64_t augment_pad = 4;      // AugmentOptions::pad for its images (the in-memory u8 ones)
  // Opens split "train" or "test" (checked) at `path` (the data path, else default_path;
  // maybe ""), with opt.augment already disabled for "test". Throws rt::Error naming the path,
  // what was expected there and how to fix it.
  std::function<std::unique_ptr<Dataset>(const std::string& path, const std::string& split, const DatasetOptions& opt)>
      open;
};

// Note [Dataset properties]
// The command line refuses an option that a dataset would ignore (--shuffle-buffer without
// shards, --auto-augment without the JPEG pipeline, repeated augmentation of shards read in
// sequence), naming the datasets it applies to. It learns which from the entries' properties,
// never from names, so a new dataset states its properties where it registers and every
// check, message and help text includes it.

// The datasets in `order`. A registration error (below) is thrown here, as rt::Error.
const std::vector<DatasetEntry>& dataset_registry();
// The entry named `name` with what `describe` sets (RT_REGISTER_DATASET's argument).
DatasetEntry described_dataset(std::string name, const std::function<void(DatasetEntry&)>& describe);
// Adds a dataset (usually through RT_REGISTER_DATASET, at static initialisation). A name already
// taken, or empty, or no factory, is remembered and reported by every later lookup as an
// rt::Error naming it (Note [Deferred registration errors] in base/name_registry.h).
bool register_dataset(DatasetEntry entry);
std::vector<std::string> dataset_names();
// Throws rt::Error listing the registered names when `name` is not one.
const DatasetEntry& find_dataset(const std::string& name);

}  // namespace rt::data

// Registers a dataset from a source file of its own, at static initialisation: its name, then
// a function setting the rest of its DatasetEntry (the fields it does not set keep their defaults):
//   RT_REGISTER_DATASET("levels", [](rt::data::DatasetEntry& e) {
//     e.generated = true;
//     e.open = [](const std::string& path, const std::string& split, const rt::data::DatasetOptions& o) {
//       return open_levels(o.synthetic, split);
//     };
//   });
// The file must be linked into the binary (list it in the cc_binary's srcs, or mark its
// cc_library alwayslink = True): nothing else refers to it.
#define RT_REGISTER_DATASET_CAT2(a, b) a##b
#define RT_REGISTER_DATASET_CAT(a, b) RT_REGISTER_DATASET_CAT2(a, b)
#define RT_REGISTER_DATASET(name, ...)                                                              \
  [[maybe_unused]] static const bool RT_REGISTER_DATASET_CAT(rt_registered_dataset_, __COUNTER__) = \
      ::rt::data::register_dataset(::rt::data::described_dataset(name, __VA_ARGS__))
