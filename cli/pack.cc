#include "cli/pack.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "base/error.h"
#include "cli/flags.h"
#include "data/pack/pack.h"

namespace rt::cli {

namespace {

const char* kUsage =
    "usage: ringtape pack --data-path FOLDER --output PREFIX [flags]\n\n"
    "Writes an image folder (ImageNet's train or val split, or any ImageFolder tree) as WebDataset tar shards\n"
    "PREFIX-000000.tar, ... (samples KEY.jpg + KEY.cls, in a shuffled order), an index per shard and\n"
    "PREFIX.json; train on them with --dataset webdataset --data-path <PREFIX's folder>. An interrupted pack\n"
    "resumes after its last finished shard when run again with the same flags, once it has checked that every\n"
    "file those shards hold is unchanged (else it refuses and prints the command that starts over).\n\n"
    "PREFIX: training reads DIR/train-*.tar and DIR/val-*.tar, so give DIR/train or DIR/val. An --output that\n"
    "ends in '/' or names an existing folder means that folder plus the split's name (train or val, the last\n"
    "part of --data-path); for any other --data-path the prefix must be given.\n\n"
    "  ringtape pack --data-path imagenet/train --output shards/train --max-side 256\n"
    "  ringtape pack --data-path imagenet/val --output shards/val --max-side 256";

}  // namespace

std::optional<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 18) return std::nullopt;
  const int64_t n = std::stoll(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, int64_t> units[] = {
      {"", 1},           {"b", 1},           {"kb", 1000},          {"mb", 1000'000},       {"gb", 1000'000'000},
      {"kib", 1 << 10},  {"mib", 1 << 20},   {"gib", int64_t(1) << 30},
      {"k", 1000},       {"m", 1000'000},    {"g", 1000'000'000}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      if (n > (int64_t(1) << 62) / scale) return std::nullopt;
      return n * scale;
    }
  return std::nullopt;
}

int pack_command(const std::vector<std::string>& args) {
  Flags flags({
      {"data-path", FlagType::string, "", "the image folder: DIR/train, DIR/val (class folders, or the flat layout "
                                          "with LOC_val_solution.csv), or any ImageFolder tree", {}, Topic::data},
      {"output", FlagType::string, "", "the shards' prefix: shards/train writes shards/train-000000.tar, ...; "
                                       "a folder (shards/) adds the split's name, train or val", {}, Topic::output},
      {"max-side", FlagType::string, "none", "re-encode images whose shorter side is longer than this many pixels "
                                             "at this size (256, 320, ...); none: keep every file's bytes", {},
       Topic::data},
      {"quality", FlagType::integer, "90", "JPEG quality of re-encoded images", {}, Topic::data,
       Range{1, 100, false, "in [1, 100]"}},
      {"shard-size", FlagType::string, "1GB", "a shard closes once it holds this much (e.g. 1GB, 500MB, 256MiB)", {},
       Topic::output},
      {"workers", FlagType::integer, "0", "encoding threads (0 = one per hardware thread)", {}, Topic::data,
       Range{0, 4096, false, "in [0, 4096]"}},
      {"seed", FlagType::integer, "0", "the samples' shuffled order", {}, Topic::data,
       Range{0, 9.007199254740992e15, false, "a non-negative integer"}},
      {"no-progress", FlagType::boolean, "false", "no progress line on stderr", {}, Topic::output},
      {"cache-dir", FlagType::string, "", "where the folder's file list is cached (as for training)", {},
       Topic::data},
      {"max-image-pixels", FlagType::integer, "178956970", "skip (as unreadable) an image whose header claims more "
                                                           "pixels than this, before decoding it (PIL's limit; 0 = "
                                                           "no limit)", {}, Topic::data,
       Range{0, 9.007199254740992e15, false, "a non-negative integer"}},
  });
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::printf("%s\n", flags.help(kUsage).c_str());
    return 0;
  }
  flags.parse(args);
  data::PackOptions o;
  o.data_path = flags.str("data-path");
  o.output = flags.str("output");
  if (o.data_path.empty()) throw UsageError("--data-path is missing: the image folder to pack, e.g. imagenet/train");
  if (o.output.empty()) throw UsageError("--output is missing: the shards' prefix, e.g. shards/train");
  const std::string side = flags.str("max-side");
  if (side != "none") {
    if (side.empty() || side.size() > 5 || side.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(side) < 1 || std::stoi(side) > 65500)
      throw UsageError("--max-side must be a number of pixels in [1, 65500] or none, got '" + side + "'");
    o.max_side = std::stoi(side);
  }
  const auto bytes = parse_byte_size(flags.str("shard-size"));
  if (!bytes) throw UsageError("--shard-size must be a size like 1GB, 500MB or 256MiB, got '" +
                               flags.str("shard-size") + "'");
  o.shard_bytes = *bytes;
  o.quality = int(flags.integer("quality"));
  o.workers = int(flags.integer("workers"));
  o.seed = uint64_t(flags.integer("seed"));
  o.progress = !flags.boolean("no-progress");
  o.cache_dir = flags.str("cache-dir");
  o.max_image_pixels = flags.integer("max-image-pixels");
  // pack_image_folder checks the options' limits (a shard size under 64 KiB, ...) as usage errors.
  const data::PackResult r = data::pack_image_folder(o);
  std::printf("pack: %lld images -> %lld samples in %lld shard(s) %s-*.tar (%lld kept from an earlier run), %lld "
              "skipped as unreadable, %lld re-encoded; %.1f s, %.0f images/s; read %.1f MB, wrote %.1f MB\n",
              (long long)r.files, (long long)r.packed, (long long)r.shards, r.output.c_str(),
              (long long)r.resumed_shards,
              (long long)r.skipped, (long long)r.reencoded, r.seconds,
              double(r.files) / std::max(r.seconds, 1e-9), double(r.bytes_in) / 1e6, double(r.bytes_out) / 1e6);
  return 0;
}

}  // namespace rt::cli
