#include "data/formats/image_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"

namespace rt::data {

// Note [index cache]
// The cache file (index-<hash of the canonical split path>.txt in the cache folder) keeps,
// per class, the directories that were walked with their st_mtim (ns) and st_ino, and the
// files found. Adding, removing or renaming an entry changes the mtime of the directory
// holding it, so a class's listing is still right when every one of its directories has the
// same mtime and inode; a new or deleted subdirectory changes its parent's mtime. The split
// folder itself is re-listed every time (one readdir of ~1000 entries), so new and removed
// classes are seen even where a file system does not keep directory mtimes well. Only the
// classes that fail the check are walked again; the rest come from the cache.
//
// Racy mtimes: a directory changed within the file system's timestamp granularity after it
// was listed can keep the mtime it was listed with (the kernel's clock ticks every few ms;
// FAT and some network file systems store whole or even two seconds). So a directory whose
// mtime is less than kRacyNs before the time the listing began is not trusted: its class is
// walked again on the next call, until its mtime is old enough (as git does with racy
// index entries).
//
// The file is text, versioned by its first line, written to a temporary file in the same
// folder and renamed over the old one, and read back with every count and the final "end"
// line checked; anything unexpected (another version, another root, a truncated or edited
// file) makes it ignored and rewritten. File names containing '\n' cannot be stored in it:
// such a tree is indexed without caching.

namespace {

constexpr char kHeader[] = "ringtape-image-folder-index v1";
constexpr int64_t kRacyNs = 2'000'000'000;
constexpr const char* kExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
constexpr char kLayout[] = "expected the ImageNet layout DIR/train/<wnid>/*.JPEG (one folder per class)";

// A directory walked for a class, with what it was when it was listed.
struct DirStamp {
  std::string rel;  // relative to the split folder: "<class>" or "<class>/<sub>..."
  int64_t mtime_ns = 0;
  uint64_t ino = 0;
};

// One class's listing: its directories (the class folder first) and its images (relative
// to the split folder, in torchvision's order).
struct ClassListing {
  std::vector<DirStamp> dirs;
  std::vector<std::string> files;
};

int64_t mtime_ns_of(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec; }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool hidden(const char* name) { return name[0] == '.'; }

// Whether a directory entry is a directory, following symlinks (os.walk(followlinks=True)
// and os.scandir's is_dir() do). A broken symlink is not a directory.
bool is_dir_entry(const std::string& path, const dirent* e) {
  if (e->d_type == DT_DIR) return true;
  if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) return false;
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// readdir with the directory closed on every path out, errors included.
class DirReader {
 public:
  explicit DirReader(const std::string& path) : dir_(::opendir(path.c_str())) {}
  ~DirReader() {
    if (dir_ != nullptr) ::closedir(dir_);
  }
  DirReader(const DirReader&) = delete;
  DirReader& operator=(const DirReader&) = delete;
  bool ok() const { return dir_ != nullptr; }
  // The next entry other than "." and "..", or nullptr at the end. A read error (EIO, a
  // vanished network mount) is an error, not a short listing.
  const dirent* next(const std::string& path);

 private:
  DIR* dir_;
};

[[noreturn]] void fail_listing(const std::string& path, int err) {
  RT_FAIL(path, ": cannot list this folder (", std::strerror(err), "); check that it exists and is readable");
}

const dirent* DirReader::next(const std::string& path) {
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(dir_);
    if (e == nullptr) {
      if (errno != 0) fail_listing(path, errno);
      return nullptr;
    }
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) return e;
  }
}

// The class folder names (non-hidden directories, symlinks followed) of the split folder,
// sorted by byte order (std::string compares bytes as unsigned, like Python's str order on
// UTF-8 names). `root_id` gets the folder's device and inode.
std::vector<std::string> list_classes(const std::string& root, std::pair<dev_t, ino_t>& root_id) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) RT_FAIL(root, ": no such folder; ", kLayout);
    fail_listing(root, errno);
  }
  RT_CHECK(S_ISDIR(st.st_mode), root, ": is a file, not a folder; ", kLayout);
  root_id = {st.st_dev, st.st_ino};
  DirReader d(root);
  if (!d.ok()) fail_listing(root, errno);
  std::vector<std::string> classes;
  while (const dirent* e = d.next(root))
    if (!hidden(e->d_name) && is_dir_entry(root + "/" + e->d_name, e)) classes.emplace_back(e->d_name);
  std::sort(classes.begin(), classes.end());
  return classes;
}

// Walks root/cls like torchvision's make_dataset: for root_dir, _, names in
// sorted(os.walk(class_dir, followlinks=True)): for name in sorted(names). Directories are
// visited in the order of their path strings ("a" < "a-b" < "a/c", not depth first), each
// one's images sorted by name.
class ClassWalker {
 public:
  ClassWalker(const std::string& root, std::pair<dev_t, ino_t> root_id, const std::string& cls)
      : root_(root), ancestors_{root_id} {
    struct stat st;
    if (::stat((root + "/" + cls).c_str(), &st) != 0) fail_listing(root + "/" + cls, errno);
    visit(cls, st);
    std::sort(found_.begin(), found_.end(), [](const Found& a, const Found& b) { return a.rel < b.rel; });
    for (Found& f : found_) {
      std::sort(f.names.begin(), f.names.end());
      for (const std::string& n : f.names) listing_.files.push_back(f.rel + "/" + n);
    }
  }
  ClassListing take() { return std::move(listing_); }

 private:
  struct Found {
    std::string rel;
    std::vector<std::string> names;
  };

  // `st`: the directory's stat, taken before listing it so that a change made while it is
  // listed shows up as a newer mtime next time.
  void visit(const std::string& rel, const struct stat& st) {
    const std::string path = root_ + "/" + rel;
    listing_.dirs.push_back(DirStamp{rel, mtime_ns_of(st), uint64_t(st.st_ino)});
    DirReader d(path);
    if (!d.ok()) fail_listing(path, errno);
    Found found{rel, {}};
    std::vector<std::string> subdirs;
    while (const dirent* e = d.next(path)) {
      if (hidden(e->d_name)) continue;
      if (is_dir_entry(path + "/" + e->d_name, e))
        subdirs.emplace_back(e->d_name);
      else if (has_image_extension(e->d_name))
        found.names.emplace_back(e->d_name);
    }
    found_.push_back(std::move(found));
    ancestors_.emplace_back(st.st_dev, st.st_ino);
    for (const std::string& s : subdirs) {
      const std::string sub_rel = rel + "/" + s;
      struct stat sub;
      if (::stat((root_ + "/" + sub_rel).c_str(), &sub) != 0) fail_listing(root_ + "/" + sub_rel, errno);
      // Only a symlink can lead back to a folder above it; os.walk would loop until the
      // path grew too long.
      RT_CHECK(std::find(ancestors_.begin(), ancestors_.end(), std::pair(sub.st_dev, sub.st_ino)) == ancestors_.end(),
               root_, "/", sub_rel, ": a symlink back to a folder above it (a loop); remove it or point it elsewhere");
      visit(sub_rel, sub);
    }
    ancestors_.pop_back();
  }

  const std::string& root_;
  std::vector<std::pair<dev_t, ino_t>> ancestors_;  // the split folder down to the one being listed
  std::vector<Found> found_;
  ClassListing listing_;
};

// ---- the cache folder and file ----

bool usable_dir(const std::string& dir) {
  if (dir.empty()) return false;
  // mkdir -p, quietly: any failure just means this candidate is not usable.
  for (size_t pos = 1; pos <= dir.size(); ++pos)
    if (pos == dir.size() || dir[pos] == '/') ::mkdir(dir.substr(0, pos).c_str(), 0755);
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && ::access(dir.c_str(), W_OK | X_OK) == 0;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// The first usable cache folder, or "" for none.
std::string cache_dir_for(const IndexOptions& opt) {
  if (!opt.cache_dir.empty()) return usable_dir(opt.cache_dir) ? opt.cache_dir : "";
  std::vector<std::string> candidates = {env("RINGTAPE_CACHE_DIR")};
  if (!env("XDG_CACHE_HOME").empty()) candidates.push_back(env("XDG_CACHE_HOME") + "/ringtape");
  if (!env("HOME").empty()) candidates.push_back(env("HOME") + "/.cache/ringtape");
  for (const std::string& c : candidates)
    if (usable_dir(c)) return c;
  return "";
}

std::string cache_file_name(const std::string& canonical_root) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bit
  for (unsigned char c : canonical_root) h = (h ^ c) * 0x100000001b3ull;
  char name[40];
  std::snprintf(name, sizeof name, "index-%016llx.txt", static_cast<unsigned long long>(h));
  return name;
}

struct CacheData {
  int64_t scanned_ns = 0;  // when the listing that wrote it began
  std::unordered_map<std::string, ClassListing> classes;
};

bool read_all(const std::string& path, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0;
  if (ok) {
    out.resize(size_t(st.st_size));
    size_t got = 0;
    while (ok && got < out.size()) {
      const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      ok = n > 0;
      if (ok) got += size_t(n);
    }
  }
  ::close(fd);
  return ok;
}

// Line-by-line reading of the cache text; every accessor fails softly (returns false).
class Lines {
 public:
  explicit Lines(std::string_view text) : rest_(text) {}
  bool next(std::string_view& line) {
    const size_t nl = rest_.find('\n');
    if (nl == std::string_view::npos) return false;  // every line, the last one too, ends in '\n'
    line = rest_.substr(0, nl);
    rest_.remove_prefix(nl + 1);
    return true;
  }
  // "<key> <value>": the value as a string.
  bool field(std::string_view key, std::string_view& value) {
    std::string_view line;
    if (!next(line) || line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ')
      return false;
    value = line.substr(key.size() + 1);
    return true;
  }
  bool at_end() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

// Parses the decimal integer at the start of s, which must end at a space (skipped) or at
// the end of s; moves s past it. Fails on no digits, a value out of T's range, or junk.
template <typename T>
bool take_int(std::string_view& s, T& v) {
  size_t i = 0;
  const bool neg = std::is_signed_v<T> && !s.empty() && s[0] == '-';
  if (neg) ++i;
  const size_t start = i;
  uint64_t x = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) x = x * 10 + uint64_t(s[i] - '0');
  if (i == start || i - start > 19 || x > uint64_t(std::numeric_limits<T>::max())) return false;
  if (i < s.size() && s[i] != ' ') return false;
  s.remove_prefix(i < s.size() ? i + 1 : i);
  v = neg ? T(-T(x)) : T(x);
  return true;
}

// The cache for `canonical_root`, or false when the file is missing, of another version or
// root, or damaged in any way.
bool load_cache(const std::string& path, const std::string& canonical_root, CacheData& data) {
  std::string text;
  if (!read_all(path, text)) return false;
  Lines lines(text);
  std::string_view line, value;
  if (!lines.next(line) || line != kHeader) return false;
  if (!lines.field("root", value) || value != canonical_root) return false;
  if (!lines.field("scanned", value) || !take_int(value, data.scanned_ns) || !value.empty()) return false;
  size_t nclasses = 0;
  if (!lines.field("classes", value) || !take_int(value, nclasses) || !value.empty()) return false;
  for (size_t c = 0; c < nclasses; ++c) {
    // class <ndirs> <nfiles> <name>
    size_t ndirs = 0, nfiles = 0;
    if (!lines.field("class", value) || !take_int(value, ndirs) || !take_int(value, nfiles) || value.empty() ||
        ndirs == 0)
      return false;
    ClassListing& l = data.classes[std::string(value)];
    if (!l.dirs.empty()) return false;  // the same class twice
    const std::string_view name = value;
    l.dirs.resize(ndirs);
    for (DirStamp& d : l.dirs) {
      // d <mtime_ns> <ino> <rel>
      if (!lines.field("d", value) || !take_int(value, d.mtime_ns) || !take_int(value, d.ino) || value.empty())
        return false;
      d.rel = value;
    }
    if (l.dirs[0].rel != name) return false;
    l.files.resize(nfiles);
    for (std::string& f : l.files) {
      if (!lines.next(line) || line.empty()) return false;
      f = line;
    }
  }
  return lines.next(line) && line == "end" && lines.at_end();
}

bool storable(const std::string& s) { return s.find('\n') == std::string::npos; }

// Writes the cache atomically (temporary file + rename); any failure leaves no trace.
void save_cache(const std::string& path, const std::string& canonical_root, int64_t scanned_ns,
                const std::vector<std::string>& classes, const std::vector<ClassListing>& listings) {
  if (!storable(canonical_root)) return;
  for (size_t c = 0; c < classes.size(); ++c) {
    if (!storable(classes[c])) return;
    for (const DirStamp& d : listings[c].dirs)
      if (!storable(d.rel)) return;
    for (const std::string& f : listings[c].files)
      if (!storable(f)) return;
  }
  std::string tmp = path + ".tmpXXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return;
  FILE* f = ::fdopen(fd, "w");
  if (f == nullptr) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return;
  }
  std::fprintf(f, "%s\nroot %s\nscanned %lld\nclasses %zu\n", kHeader, canonical_root.c_str(),
               static_cast<long long>(scanned_ns), classes.size());
  for (size_t c = 0; c < classes.size(); ++c) {
    const ClassListing& l = listings[c];
    std::fprintf(f, "class %zu %zu %s\n", l.dirs.size(), l.files.size(), classes[c].c_str());
    for (const DirStamp& d : l.dirs)
      std::fprintf(f, "d %lld %llu %s\n", static_cast<long long>(d.mtime_ns), static_cast<unsigned long long>(d.ino),
                   d.rel.c_str());
    for (const std::string& file : l.files) {
      std::fwrite(file.data(), 1, file.size(), f);
      std::fputc('\n', f);
    }
  }
  std::fputs("end\n", f);
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
}

// Whether a cached class listing still describes the folder (Note [index cache]).
bool still_valid(const std::string& root, const ClassListing& l, int64_t scanned_ns) {
  for (const DirStamp& d : l.dirs) {
    struct stat st;
    if (::stat((root + "/" + d.rel).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    if (mtime_ns_of(st) != d.mtime_ns || uint64_t(st.st_ino) != d.ino) return false;
    if (d.mtime_ns > scanned_ns - kRacyNs) return false;  // racy: may have changed unseen
  }
  return true;
}

std::string canonical_path(const std::string& path) {
  char* p = ::realpath(path.c_str(), nullptr);
  if (p == nullptr) return path;
  std::string s(p);
  std::free(p);
  return s;
}

// "a, b, c and 7 more" for error messages.
std::string some_of(const std::vector<std::string>& names, size_t total) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + clip_for_message(names[i]);
  if (total > names.size()) s += " and " + std::to_string(total - names.size()) + " more";
  return s;
}

}  // namespace

bool has_image_extension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || name.size() - dot > 5) return false;
  char ext[6] = {};
  for (size_t i = dot; i < name.size(); ++i) {
    const char c = name[i];
    ext[i - dot] = c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
  }
  for (const char* e : kExtensions)
    if (std::strcmp(ext, e) == 0) return true;
  return false;
}

ImageFolderIndex index_image_folder(const std::string& split_dir, const IndexOptions& opt) {
  const int64_t started_ns = now_ns();
  ImageFolderIndex index;
  index.root = split_dir;
  std::pair<dev_t, ino_t> root_id;
  index.classes = list_classes(split_dir, root_id);
  RT_CHECK(!index.classes.empty(), split_dir, ": has no class folders; ", kLayout);

  const std::string canonical = canonical_path(split_dir);
  const std::string cache_dir = opt.use_cache ? cache_dir_for(opt) : "";
  const std::string cache_path = cache_dir.empty() ? "" : cache_dir + "/" + cache_file_name(canonical);
  CacheData cache;
  const bool loaded = !cache_path.empty() && load_cache(cache_path, canonical, cache);

  std::vector<ClassListing> listings(index.classes.size());
  for (size_t c = 0; c < index.classes.size(); ++c) {
    auto it = loaded ? cache.classes.find(index.classes[c]) : cache.classes.end();
    if (it != cache.classes.end() && still_valid(split_dir, it->second, cache.scanned_ns)) {
      listings[c] = std::move(it->second);
    } else {
      listings[c] = ClassWalker(split_dir, root_id, index.classes[c]).take();
      ++index.listed_classes;
    }
  }
  // Every class reused and none removed: the cache is the index.
  index.from_cache = loaded && index.listed_classes == 0 && cache.classes.size() == index.classes.size();
  if (!cache_path.empty() && !index.from_cache) save_cache(cache_path, canonical, started_ns, index.classes, listings);

  size_t total = 0;
  for (const ClassListing& l : listings) total += l.files.size();
  index.files.reserve(total);
  index.labels.reserve(total);
  for (size_t c = 0; c < listings.size(); ++c) {
    if (listings[c].files.empty()) index.empty_classes.push_back(index.classes[c]);
    for (std::string& f : listings[c].files) index.files.push_back(std::move(f));
    index.labels.insert(index.labels.end(), listings[c].files.size(), int32_t(c));
  }
  if (total == 0) {
    const size_t n = index.classes.size();
    const std::vector<std::string> first(index.classes.begin(),
                                         index.classes.begin() + std::ptrdiff_t(std::min<size_t>(3, n)));
    RT_FAIL(split_dir, ": none of its ", n, " class folders (", some_of(first, n),
            ") holds an image (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp, any case); ", kLayout);
  }
  return index;
}

// ---- the flat validation folder ----

namespace {

struct SolutionRow {
  int32_t label;
  int line;
};

// ImageId -> label from the Kaggle LOC_val_solution.csv.
std::unordered_map<std::string, SolutionRow> read_solution(const std::string& csv,
                                                           const std::vector<std::string>& classes) {
  std::unordered_map<std::string, int32_t> class_index;
  for (size_t i = 0; i < classes.size(); ++i) class_index.emplace(classes[i], int32_t(i));
  std::string text;
  if (!read_all(csv, text))
    RT_FAIL(csv, ": cannot read the validation labels (", std::strerror(errno),
            "); expected Kaggle's LOC_val_solution.csv (header ImageId,PredictionString)");
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // a UTF-8 BOM
  if (!text.empty() && text.back() != '\n') text += '\n';
  std::unordered_map<std::string, SolutionRow> rows;
  Lines lines(text);
  std::string_view line;
  for (int n = 1; lines.next(line); ++n) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (n == 1) {
      RT_CHECK(line == "ImageId,PredictionString", csv, ":1: the header is '", clip_for_message(line),
               "', expected 'ImageId,PredictionString' (Kaggle's LOC_val_solution.csv)");
      continue;
    }
    if (line.empty()) continue;
    const size_t comma = line.find(',');
    const std::string_view id = line.substr(0, comma);
    const std::string_view pred = comma == std::string_view::npos ? std::string_view() : line.substr(comma + 1);
    const std::string_view wnid = pred.substr(0, pred.find(' '));
    RT_CHECK(!id.empty() && !wnid.empty(), csv, ":", n, ": malformed row '", clip_for_message(line),
             "'; expected 'ImageId,wnid x_min y_min x_max y_max ...' like "
             "'ILSVRC2012_val_00000001,n01751748 111 108 362 467'");
    auto cls = class_index.find(std::string(wnid));
    RT_CHECK(cls != class_index.end(), csv, ":", n, ": wnid ", clip_for_message(wnid), " (image ",
             clip_for_message(id), ") is not one of the ", classes.size(),
             " training classes; the csv and the train folder must come from the same ImageNet");
    auto [it, added] = rows.emplace(std::string(id), SolutionRow{cls->second, n});
    RT_CHECK(added, csv, ":", n, ": image ", clip_for_message(id), " already has a row (line ", it->second.line, ")");
  }
  RT_CHECK(!rows.empty(), csv, ": has no rows after the header");
  return rows;
}

}  // namespace

ImageFolderIndex index_flat_val(const std::string& val_dir, const std::string& solution_csv,
                                const std::vector<std::string>& classes) {
  RT_CHECK(!classes.empty(),
           "index_flat_val: no classes given; pass the train split's classes "
           "(index_image_folder(DIR/train).classes)");
  struct stat st;
  if (::stat(val_dir.c_str(), &st) != 0)
    RT_FAIL(val_dir, ": no such folder (", std::strerror(errno),
            "); expected the validation images directly in it: DIR/val/ILSVRC2012_val_00000001.JPEG ...");
  RT_CHECK(S_ISDIR(st.st_mode), val_dir, ": is a file, not a folder");
  const auto rows = read_solution(solution_csv, classes);
  DirReader d(val_dir);
  if (!d.ok()) fail_listing(val_dir, errno);
  ImageFolderIndex index;
  index.root = val_dir;
  index.classes = classes;
  size_t subdirs = 0;
  while (const dirent* e = d.next(val_dir)) {
    if (hidden(e->d_name)) continue;
    if (is_dir_entry(val_dir + "/" + e->d_name, e))
      ++subdirs;
    else if (has_image_extension(e->d_name))
      index.files.emplace_back(e->d_name);
  }
  RT_CHECK(!index.files.empty(), val_dir, ": has no images directly in it",
           subdirs > 0 ? " but has subfolders: with DIR/val/<wnid>/*.JPEG, index it as a class folder "
                         "(index_image_folder)"
                       : "; expected DIR/val/ILSVRC2012_val_00000001.JPEG ...");
  std::sort(index.files.begin(), index.files.end());

  std::vector<std::string> unlabelled;
  size_t n_unlabelled = 0;
  std::vector<bool> has_image(classes.size(), false);
  std::unordered_set<std::string> seen;  // ImageIds with an image
  index.labels.reserve(index.files.size());
  for (const std::string& f : index.files) {
    const std::string id = f.substr(0, f.rfind('.'));
    auto it = rows.find(id);
    if (it == rows.end()) {
      if (unlabelled.size() < 3) unlabelled.push_back(f);
      ++n_unlabelled;
      continue;
    }
    seen.insert(id);
    index.labels.push_back(it->second.label);
    has_image[size_t(it->second.label)] = true;
  }
  RT_CHECK(n_unlabelled == 0, val_dir, ": ", n_unlabelled, " image(s) have no row in ", solution_csv, ": ",
           some_of(unlabelled, n_unlabelled), "; remove them or use the csv that belongs to this folder");
  if (seen.size() != rows.size()) {
    std::vector<std::string> missing;
    for (const auto& [id, row] : rows)
      if (!seen.count(id)) missing.push_back(id);
    std::sort(missing.begin(), missing.end());
    const size_t n = missing.size();
    missing.resize(std::min<size_t>(3, n));
    RT_FAIL(solution_csv, ": ", n, " row(s) name an image that is not in ", val_dir, ": ", some_of(missing, n),
            "; is the validation folder complete?");
  }
  for (size_t c = 0; c < classes.size(); ++c)
    if (!has_image[c]) index.empty_classes.push_back(classes[c]);
  return index;
}

}  // namespace rt::data
