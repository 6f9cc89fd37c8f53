// What a resumed `ringtape pack` checks before it keeps finished shards
// (Note [Resumable pack] in data/pack/pack.h): every input of every kept shard, as the .idx
// recorded it (Note [Shard index files] in data/formats/shard_index.h), against the folder now.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/formats/shard_index.h"

namespace rt::data {

// Reads the whole file at `path`, filling id->size, mtime_ns (from the open file) and crc32
// (zlib's, of the bytes read). id->size is -1 when the file cannot be opened. Throws
// rt::Error naming the file when it cannot be opened or read.
std::vector<uint8_t> read_input(const std::string& path, ShardInput* id);

// The folder as this run lists it, in pack's shuffled order: rels[p] and labels[p] for
// position p, relative to root; classes: the class names labels index.
struct PackListing {
  std::string root;
  std::vector<std::string> rels;
  std::vector<int64_t> labels;
  std::vector<std::string> classes;
};

// Throws rt::Error when a kept shard cannot be trusted: an index without inputs (version 1),
// other classes, or an input that is missing, moved in the order, relabelled, or whose bytes
// changed (a changed size or mtime makes it re-read: its crc32 decides). The message names
// the first few changes, the first shard affected and the command that starts over.
// `stored_files`: the file count the shards were written from, `files` the current one.
void verify_kept_shards(const std::vector<ShardIndex>& kept, const PackListing& now, const std::string& output,
                        int64_t stored_files);

// The shell command that removes a pack's output so that it starts over.
std::string start_over_command(const std::string& output);

}  // namespace rt::data
