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
// instead. Format, text (version 2; training still reads version 1, the same without the
// "classes" and "inputs" sections, which pack no longer resumes from):
//   ringtape-shard-index 2
//   tar_bytes <size of X.tar>
//   source <first> <end>       (positions in pack's shuffled file list; for resuming)
//   options <string>           (pack's options; a resumed pack must use the same)
//   samples <n>
//   <key> <field> <offset> <size> <label>      n lines: the image member's data
//   classes <c>
//   <class name>                               c lines: the class list that gave the labels
//   inputs <end - first>
//   <path> <size> <mtime_ns> <label> <crc32>   one line per position first..end-1: the file
//                                              pack read there (relative to --data-path), its
//                                              size, modification time (ns), label and zlib
//                                              crc32 of its bytes (8 hex digits)
// Class names and input paths are written percent-escaped (escape_token) so that no line
// holds a space or a newline of a name; keys are written as they are (pack's keys hold
// neither: Note [Pack keys]). What the inputs are for: Note [Resumable pack]
// (data/pack/pack.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rt::data {

struct ShardSample {
  std::string key;
  std::string field;   // "jpg", "jpeg" or "png": the image member's extension
  int64_t offset = 0;  // of the image member's data in the tar
  int64_t size = 0;
  int64_t label = 0;
};

// One position of pack's shuffled file list, as pack read it (Note [Resumable pack]).
struct ShardInput {
  std::string rel;         // relative to --data-path: "n01440764/n01440764_10026.JPEG"
  int64_t size = -1;       // bytes; -1: the file could not be opened
  int64_t mtime_ns = 0;    // st_mtim
  int64_t label = 0;
  uint32_t crc32 = 0;      // zlib's crc32 of the bytes read
};

struct ShardIndex {
  int version = 2;   // of the .idx read: 1 has no classes or inputs
  std::string path;  // the tar file
  int64_t tar_bytes = 0;
  int64_t source_first = 0, source_end = 0;  // pack's list positions [first, end)
  std::string options;
  std::vector<ShardSample> samples;
  std::vector<std::string> classes;  // version 2, read with with_inputs: the class names labels index
  std::vector<ShardInput> inputs;    // version 2, read with with_inputs: positions [source_first, source_end)
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
// Reads X.idx (version 1 or 2); the classes and inputs only with `with_inputs` (training
// needs the samples alone). Returns false when it does not exist or does not describe the tar
// as it is now (size differs); throws rt::Error naming the file and line when it is malformed.
bool read_shard_index(const std::string& tar_path, int64_t tar_bytes, ShardIndex* out, bool with_inputs = false);
// Writes X.idx (version 2) atomically (a temporary file, fsync, rename). Throws rt::Error on I/O errors.
void write_shard_index(const ShardIndex& index);
// Lists the tar's members and groups them into samples (the key rule above), reading each
// "cls" member. A sample without an image field or a valid label is left out and counted in
// `skipped`, named on stderr. Throws rt::Error for a damaged tar (data/formats/tar.h).
ShardIndex scan_shard(const std::string& tar_path);
// The shard's samples: its .idx when that matches the tar, else scan_shard.
ShardIndex load_shard(const std::string& tar_path);

// A name as one space-free token of an .idx line: every byte outside [A-Za-z0-9_/.-] as %XX
// (so '%' itself too); unescape_token reverses it (false for a malformed escape).
std::string escape_token(const std::string& s);
bool unescape_token(const std::string& t, std::string* out);

// WebDataset's key and field of a member path: "a/b.c.d" -> {"a/b", "c.d"}; no '.' in the
// file name: field "".
std::pair<std::string, std::string> split_member_name(const std::string& name);

}  // namespace rt::data
