// WebDataset shards: which tar files, and which samples each holds.
//
// A shard is a tar file of samples, each a run of consecutive members sharing a key: the
// member's path up to the first '.' of its file name (WebDataset's rule), e.g.
// "n01440764/n01440764_10026.jpg" and "n01440764/n01440764_10026.cls" are the sample
// "n01440764/n01440764_10026" with the fields "jpg" and "cls". ringtape reads the image
// field (jpg, jpeg or png) and the label ("cls": a decimal class index as text).
//
// Note [Shard index files]
// `ringtape pack` writes, beside each shard X.tar, X.idx: where each sample's image lies in
// the tar, so that opening 1.28M samples reads 147 small files, not every tar header. The
// index is written after the tar is complete and synced, and records the tar's size: an .idx
// that exists and matches its tar's size marks a finished shard (pack resumes after it),
// and a tar without a matching .idx (written by another tool, or changed since) is scanned
// instead. Format, text:
//   ringtape-shard-index 1
//   tar_bytes <size of X.tar>
//   source <first> <end>       (positions in pack's shuffled file list; for resuming)
//   options <string>           (pack's options; a resumed pack must use the same)
//   samples <n>
//   <key> <field> <offset> <size> <label>      n lines: the image member's data
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

struct ShardSample {
  std::string key;
  std::string field;   // "jpg", "jpeg" or "png": the image member's extension
  int64_t offset = 0;  // of the image member's data in the tar
  int64_t size = 0;
  int64_t label = 0;
};

struct ShardIndex {
  std::string path;  // the tar file
  int64_t tar_bytes = 0;
  int64_t source_first = 0, source_end = 0;  // pack's list positions [first, end)
  std::string options;
  std::vector<ShardSample> samples;
  int64_t skipped = 0;  // samples without an image or a label, left out by scan_shard
};

// The shard files a data path names, in order:
//   - a folder: its <prefix>-*.tar files, sorted by name (what `ringtape pack --output
//     DIR/<prefix>` wrote);
//   - a pattern with braces: {000000..000146} (a zero-padded numeric range: every number
//     with the first bound's width) and {a,b,c} (alternatives), expanded in order, several
//     braces allowed; each named file must exist;
//   - one .tar file.
// Throws rt::Error naming the path or the first missing shard and how to fix it.
std::vector<std::string> list_shards(const std::string& data_path, const std::string& prefix);
// The brace expansion alone (no file checks). Throws on unbalanced braces or a bad range.
std::vector<std::string> expand_braces(const std::string& pattern);

// X.idx for X.tar.
std::string index_path_of(const std::string& tar_path);
// Reads X.idx. Returns false when it does not exist or does not describe the tar as it is
// now (size differs); throws rt::Error naming the file and line when it is malformed.
bool read_shard_index(const std::string& tar_path, int64_t tar_bytes, ShardIndex* out);
// Writes X.idx atomically (a temporary file, fsync, rename). Throws rt::Error on I/O errors.
void write_shard_index(const ShardIndex& index);
// Lists the tar's members and groups them into samples (the key rule above), reading each
// "cls" member. A sample without an image field or a valid label is left out and counted in
// `skipped`, named on stderr. Throws rt::Error for a damaged tar (data/tar.h).
ShardIndex scan_shard(const std::string& tar_path);
// The shard's samples: its .idx when that matches the tar, else scan_shard.
ShardIndex load_shard(const std::string& tar_path);

// WebDataset's key and field of a member path: "a/b.c.d" -> {"a/b", "c.d"}; no '.' in the
// file name: field "".
std::pair<std::string, std::string> split_member_name(const std::string& name);

}  // namespace rt::data
