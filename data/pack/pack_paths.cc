#include "data/pack/pack_paths.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "base/error.h"
#include "base/usage_error.h"

namespace rt::data {

namespace fs = std::filesystem;

std::string pack_key(const std::string& rel) {
  static const char* hex = "0123456789ABCDEF";
  const size_t slash = rel.rfind('/');
  const size_t dot = rel.rfind('.');
  const size_t end = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1) ? dot : rel.size();
  std::string k;
  k.reserve(end);
  for (size_t i = 0; i < end; ++i) {
    const unsigned char c = static_cast<unsigned char>(rel[i]);
    if (std::isalnum(c) || c == '_' || c == '/' || c == '-') k += char(c);
    else {
      k += '%';
      k += hex[c >> 4];
      k += hex[c & 15];
    }
  }
  return k;
}

void check_unique_keys(const std::vector<std::string>& rels) {
  std::map<std::string, const std::string*> seen;
  for (const std::string& r : rels) {
    const auto [it, fresh] = seen.emplace(pack_key(r), &r);
    RT_CHECK(fresh, "pack: '", *it->second, "' and '", r, "' differ only in their extension, so they would be one ",
             "WebDataset sample (key '", it->first, "'; Note [Pack keys]); rename one of them (e.g. give it a '_2' ",
             "before the extension) and run pack again");
  }
}

std::string pack_output_prefix(const std::string& data_path, const std::string& output) {
  std::error_code ec;
  if (output.empty()) throw UsageError("--output is empty; give a prefix like shards/train");
  const bool folder = output.back() == '/' || fs::is_directory(output, ec);
  if (!folder) {
    const std::string name = fs::path(output).filename().string();
    if (name == "." || name == ".." || name[0] == '.')
      throw UsageError("--output '" + output + "': the prefix '" + name + "' would write hidden or odd file names; "
                       "give a prefix like " + (fs::path(output).parent_path() / "train").string());
    return output;
  }
  fs::path split = fs::path(data_path).lexically_normal();
  if (split.filename().empty()) split = split.parent_path();
  const std::string name = split.filename().string();
  const fs::path dir = fs::path(output);
  if (name != "train" && name != "val")
    throw UsageError("--output '" + output + "' names a folder, and --data-path '" + data_path + "' is not a split " +
                     "folder named train or val, so there is no default prefix; give an explicit prefix like " +
                     "--output " + (dir / "train").string() + " (training reads DIR/train-*.tar and DIR/val-*.tar)");
  return (dir / name).string();
}

void check_pack_paths(const std::string& data_path, const std::string& output) {
  std::error_code ec;
  const fs::path data(data_path);
  RT_CHECK(!(fs::is_directory(data / "train", ec) && fs::is_directory(data / "val", ec)), "pack: --data-path '",
           data_path, "' holds train/ and val/: it is a dataset root, and packing it would make train and val two ",
           "classes; pack each split on its own: --data-path ", (data / "train").string(), " --output DIR/train, ",
           "then --data-path ", (data / "val").string(), " --output DIR/val");
  fs::path out_dir = fs::path(output).parent_path();
  if (out_dir.empty()) out_dir = ".";
  auto canonical = [](const fs::path& p) {
    std::error_code e;
    fs::path c = fs::weakly_canonical(p, e);
    if (!c.empty() && c.filename().empty()) c = c.parent_path();  // "a/b/" is "a/b"
    return e ? fs::path() : c;
  };
  const fs::path d = canonical(data), o = canonical(out_dir);
  if (d.empty() || o.empty()) return;  // not resolvable: creating the folder will say why
  const auto [end_d, at_o] = std::mismatch(d.begin(), d.end(), o.begin(), o.end());
  RT_CHECK(end_d != d.end(), "pack: --output '", output, "' lies inside --data-path '", data_path, "' (", o.string(),
           " is in ", d.string(), "): its shards would be listed as one more class of the tree; write them outside ",
           "it, e.g. --output ", (d.parent_path() / "shards" / d.filename()).string());
}

}  // namespace rt::data
