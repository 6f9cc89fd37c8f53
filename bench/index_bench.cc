// How long index_image_folder takes on an ImageNet-shaped tree: classes x per-class empty
// files (only names matter) named like ImageNet's (n00000000/n00000000_0.JPEG), with every
// directory's mtime set an hour back, as for a dataset unpacked earlier (fresh mtimes are
// not trusted from the cache for two seconds; image_folder.cc, Note [index cache]).
// Timed, each as the median of --repeats runs:
//   walk:   listing everything, no cache at all (use_cache = false);
//   cold:   no cache file yet: listing everything and writing the cache file;
//   cached: nothing changed: the cache file read, every directory stat'ed, the split
//           folder re-listed;
//   touch:  one class folder's mtime changed: the cache read, that class listed again and
//           the cache file rewritten.
// The tree was just written, so its directories are in the page cache: "walk" and "cold"
// are warm-cache numbers; on a cold disk or a network file system listing costs much more,
// which is what the cache saves.
//
//   bazel run -c opt //bench:index_bench -- [--classes 1000] [--per-class 100] [--repeats 5]
//       [--dir DIR]   (generate into DIR, which must not exist, and keep it; default: a
//                      temporary folder, removed at the end)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "data/formats/image_folder.h"

namespace {

namespace fs = std::filesystem;
using rt::data::ImageFolderIndex;
using rt::data::IndexOptions;

// From the command line; the defaults are flag_table()'s.
struct Options {
  int classes = 0, per_class = 0, repeats = 0;
  std::string dir;
};

const char* kUsage = "usage: index_bench [--classes N] [--per-class M] [--repeats R] [--dir DIR]";

std::vector<rt::cli::Flag> flag_table() {
  using rt::cli::FlagType;
  using rt::cli::Topic;
  using rt::bench::int_at_least;
  return {
      {"classes", FlagType::integer, "1000", "class folders to generate", {}, Topic::output, int_at_least(1)},
      {"per-class", FlagType::integer, "100", "empty files per class folder", {}, Topic::output, int_at_least(1)},
      {"repeats", FlagType::integer, "5", "runs of each timing; the median is reported", {}, Topic::output,
       int_at_least(1)},
      {"dir", FlagType::string, "",
       "generate into this folder, which must not exist, and keep it (else a temporary folder, removed at the end)"},
  };
}

Options parse(int argc, char** argv) {
  const rt::cli::Flags f = rt::bench::parse_flags(argc, argv, flag_table(), kUsage);
  Options o;
  o.classes = int(f.integer("classes"));
  o.per_class = int(f.integer("per-class"));
  o.repeats = int(f.integer("repeats"));
  o.dir = f.str("dir");
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void set_mtime(const std::string& path, time_t when) {
  const timespec t[2] = {{when, 0}, {when, 0}};
  RT_CHECK(utimensat(AT_FDCWD, path.c_str(), t, 0) == 0, path, ": cannot set its mtime");
}

std::string class_name(int c) {
  char name[16];
  std::snprintf(name, sizeof name, "n%08d", c);
  return name;
}

void generate(const std::string& root, const Options& o) {
  RT_CHECK(fs::create_directories(root), root, ": exists already; give --dir a folder that does not exist");
  for (int c = 0; c < o.classes; ++c) {
    const std::string cls = class_name(c), dir = root + "/" + cls;
    RT_CHECK(::mkdir(dir.c_str(), 0755) == 0, dir, ": cannot create");
    for (int i = 0; i < o.per_class; ++i) {
      const std::string f = dir + "/" + cls + "_" + std::to_string(i) + ".JPEG";
      const int fd = ::open(f.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
      RT_CHECK(fd >= 0, f, ": cannot create");
      ::close(fd);
    }
  }
  const time_t old = std::time(nullptr) - 3600;
  set_mtime(root, old);
  for (int c = 0; c < o.classes; ++c) set_mtime(root + "/" + class_name(c), old);
}

// Median seconds of `repeats` runs of f (each preceded by prepare()).
template <typename Prepare, typename F>
double median_time(int repeats, Prepare prepare, F f) {
  std::vector<double> s;
  for (int r = 0; r < repeats; ++r) {
    prepare(r);
    const auto t0 = std::chrono::steady_clock::now();
    f(r);
    s.push_back(seconds_since(t0));
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

int run(const Options& o) {
  const bool temporary = o.dir.empty();
  std::string base = o.dir;
  if (temporary) {
    std::string tmpl = (fs::temp_directory_path() / "ringtape-index-bench-XXXXXX").string();
    RT_CHECK(::mkdtemp(tmpl.data()) != nullptr, tmpl, ": cannot create a temporary folder");
    base = tmpl;
  }
  // The temporary tree goes on every way out, errors included.
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } cleanup{temporary ? base : ""};
  const std::string root = base + "/train", cache_dir = base + "/cache";
  const size_t expected = size_t(o.classes) * size_t(o.per_class);
  std::printf("index_bench: %d classes x %d files = %zu files in %s\n", o.classes, o.per_class, expected, root.c_str());
  auto t0 = std::chrono::steady_clock::now();
  generate(root, o);
  std::printf("generate:            %8.3f s\n", seconds_since(t0));

  const IndexOptions cached{cache_dir, true}, uncached{"", false};
  const auto check = [&](const ImageFolderIndex& ix, bool from_cache, int64_t listed) {
    RT_CHECK(ix.files.size() == expected && ix.classes.size() == size_t(o.classes), "index_bench: indexed ",
             ix.files.size(), " files in ", ix.classes.size(), " classes, expected ", expected);
    RT_CHECK(ix.from_cache == from_cache && ix.listed_classes == listed, "index_bench: from_cache ", ix.from_cache,
             " listed ", ix.listed_classes, ", expected ", from_cache, " and ", listed);
  };
  const auto no_prep = [](int) {};
  const auto remove_cache = [&](int) { fs::remove_all(cache_dir); };

  const double walk = median_time(o.repeats, no_prep,
                                  [&](int) { check(rt::data::index_image_folder(root, uncached), false, o.classes); });
  const double cold = median_time(o.repeats, remove_cache,
                                  [&](int) { check(rt::data::index_image_folder(root, cached), false, o.classes); });
  const double warm =
      median_time(o.repeats, no_prep, [&](int) { check(rt::data::index_image_folder(root, cached), true, 0); });
  // A different class each time, moved to a different old time: changed, but not racy.
  const time_t old = std::time(nullptr) - 1800;
  const double touch = median_time(
      o.repeats, [&](int r) { set_mtime(root + "/" + class_name(r % o.classes), old + r); },
      [&](int) { check(rt::data::index_image_folder(root, cached), false, 1); });
  uintmax_t cache_bytes = 0;
  for (const auto& e : fs::directory_iterator(cache_dir)) cache_bytes += e.file_size();

  std::printf("walk (no cache):     %8.3f s\n", walk);
  std::printf("cold (write cache):  %8.3f s\n", cold);
  std::printf("cached:              %8.3f s\n", warm);
  std::printf("after touching 1:    %8.3f s\n", touch);
  std::printf("cache file:          %8.2f MB (%.1f bytes/file)\n", double(cache_bytes) / 1e6,
              double(cache_bytes) / double(expected));
  std::printf("median of %d runs each\n", o.repeats);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return rt::bench::bench_main("index_bench", argc, argv, parse, run, flag_table, kUsage);
}
