// `ringtape pack`'s names: the samples' keys (Note [Pack keys]) and the checks of --data-path
// and --output made before anything is written.
#pragma once

#include <string>
#include <vector>

namespace rt::data {

// Note [Pack keys]
// WebDataset groups a tar's members into samples by key: the member's path up to the first
// '.' of its file name (data/formats/shard_index.h); ringtape's .idx lines are space-separated. So a
// key must hold no '.' and no whitespace, and distinct files must get distinct keys: mapping
// '.' and ' ' to '_' made c0/img.1.JPEG, c0/img_1.JPEG and "c0/img 1.JPEG" one key, and a
// reader saw one sample where there were three. The key is the file's path relative to
// --data-path without its extension, with every byte outside [A-Za-z0-9_/-] written as %XX
// (uppercase hex; so '%' itself too): "c0/img.1.JPEG" -> "c0/img%2E1", "c0/img 1.JPEG" ->
// "c0/img%201". Escaping is one-to-one, so only dropping the extension can merge two files
// (c0/x.jpg and c0/x.png): pack refuses such a tree, naming both, rather than invent a
// suffix a reader could not map back. ImageNet's names ("n01440764/n01440764_10026") are
// their own keys. Each sample also holds "<key>.json", {"path", "class", "label"}: the
// original relative path, for tools that want the file name back.
std::string pack_key(const std::string& rel);
// Throws rt::Error naming the first two files (relative paths) whose keys are equal.
void check_unique_keys(const std::vector<std::string>& rels);

// Note [Pack output prefix]
// --output is a prefix: DIR/train writes DIR/train-000000.tar ... and DIR/train.json, what
// training looks for (DIR/train-*.tar and DIR/val-*.tar). An --output that ends in '/' or
// names an existing folder means that folder plus the default prefix: the split folder's
// name when --data-path's last component is "train" or "val"; for any other name there is
// no default and the prefix must be given (a UsageError). A prefix is never empty and never
// starts with '.', so no shard is named "-000000.tar" and no summary is hidden.
// Returns the prefix to write; throws rt::UsageError.
std::string pack_output_prefix(const std::string& data_path, const std::string& output);

// Throws rt::Error, before anything is created, when --data-path is a dataset root (it holds
// train/ and val/: those are the splits to pack) or the output's folder lies inside
// --data-path (the shards would be listed as one more class of the tree).
void check_pack_paths(const std::string& data_path, const std::string& output);

}  // namespace rt::data
