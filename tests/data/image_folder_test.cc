// ImageFolder indexes: torchvision's classes and file order (byte-sorted classes, os.walk
// directories in path-string order, case-insensitive extensions, hidden entries skipped,
// symlinks followed), the listing cache (used when nothing changed, class by class
// re-listing after a change, damaged cache files ignored and rewritten), the flat
// validation layout with LOC_val_solution.csv, and the errors for bad layouts.
#include "data/formats/image_folder.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/data/data_test_util.h"

using namespace rt::data;
using rt::data::test::check_error;
using rt::data::test::fresh_dir;
namespace fs = std::filesystem;

namespace {

void touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << "x";
}

std::vector<std::string> cache_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

// Sets every directory's mtime to an hour ago, as for a dataset unpacked earlier: fresh
// mtimes are "racy" (image_folder.cc, Note [index cache]) and keep a class from being
// trusted from the cache for two seconds. Then indexes twice so the cache settles.
void settle(const std::string& root, const IndexOptions& opt) {
  const auto set_old = [](const std::string& p) {
    timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 3600;
    t[1] = t[0];
    REQUIRE(utimensat(AT_FDCWD, p.c_str(), t, 0) == 0);
  };
  set_old(root);
  for (const auto& e : fs::recursive_directory_iterator(root, fs::directory_options::follow_directory_symlink))
    if (e.is_directory()) set_old(e.path().string());
  index_image_folder(root, opt);
  REQUIRE(index_image_folder(root, opt).from_cache);
}

// The tree of the first test case, under `dir`/train.
std::string make_tree(const std::string& dir) {
  const std::string t = dir + "/train";
  for (const char* f :
       {"n02/b.JPEG", "n02/a.jpg", "n02/B.jpg", "n02/z.PNG", "n02/zz.jpg", "n02/notes.txt", "n02/.hidden.jpg",
        "n02/._b.JPEG", "n02/sub/x.jpeg", "n02/sub/deep/d.bmp", "n02/sub-x/y.JPG", "n02/.cache/c.jpg", "n01/img1.jpeg",
        "n01/img0.tiff", "N00/x.webp", "N00/y.Jpeg.txt", "empty/readme.txt", ".git/a.jpg", "labels.jpg"})
    touch(t + "/" + f);
  fs::create_directory_symlink("n01", t + "/n03");  // a symlinked class folder is followed
  return t;
}

}  // namespace

TEST_CASE("has_image_extension: torchvision's IMG_EXTENSIONS, any case") {
  for (const char* ok : {"a.jpg", "a.JPEG", "a.Png", "x.y.ppm", "a.BMP", "a.pgm", "a.tif", "a.TIFF", "a.webp"})
    CHECK_MESSAGE(has_image_extension(ok), ok);
  for (const char* no : {"a.txt", "jpg", "a.jpg.txt", "a.jpe", "a.gif", "a.", "a.jpegx", "a_jpg"})
    CHECK_MESSAGE(!has_image_extension(no), no);
}

TEST_CASE("index_image_folder: torchvision's classes, labels and file order") {
  const std::string t = make_tree(fresh_dir("if_order"));
  const ImageFolderIndex ix = index_image_folder(t, IndexOptions{"", false});
  CHECK(ix.root == t);
  // Byte order: upper case before lower case. Hidden ".git" and the file "labels.jpg" at
  // the top are not classes; the empty class is one (torchvision's find_classes lists it).
  CHECK(ix.classes == std::vector<std::string>{"N00", "empty", "n01", "n02", "n03"});
  CHECK(ix.empty_classes == std::vector<std::string>{"empty"});
  // n02: its own files sorted (B < a < b < z < zz), then sub, then sub-x, then sub/deep:
  // os.walk's directories sorted as path strings, '-' (0x2d) before '/' (0x2f).
  const std::vector<std::string> files = {"N00/x.webp",     "n01/img0.tiff",   "n01/img1.jpeg",      "n02/B.jpg",
                                          "n02/a.jpg",      "n02/b.JPEG",      "n02/z.PNG",          "n02/zz.jpg",
                                          "n02/sub/x.jpeg", "n02/sub-x/y.JPG", "n02/sub/deep/d.bmp", "n03/img0.tiff",
                                          "n03/img1.jpeg"};
  CHECK(ix.files == files);
  CHECK(ix.labels == std::vector<int32_t>{0, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4});
  CHECK_FALSE(ix.from_cache);
  CHECK(ix.listed_classes == 5);
}

TEST_CASE("index_image_folder: the cache is used, and re-lists exactly the classes that changed") {
  const std::string dir = fresh_dir("if_cache");
  const std::string t = make_tree(dir);
  const IndexOptions opt{dir + "/cache", true};
  const ImageFolderIndex fresh = index_image_folder(t, IndexOptions{"", false});
  CHECK_FALSE(index_image_folder(t, opt).from_cache);
  REQUIRE(cache_files(dir + "/cache").size() == 1);
  CHECK(fs::path(cache_files(dir + "/cache")[0]).filename().string().rfind("index-", 0) == 0);
  settle(t, opt);
  const ImageFolderIndex cached = index_image_folder(t, opt);
  CHECK(cached.from_cache);
  CHECK(cached.listed_classes == 0);
  CHECK(cached.root == t);
  CHECK(cached.classes == fresh.classes);
  CHECK(cached.files == fresh.files);
  CHECK(cached.labels == fresh.labels);
  CHECK(cached.empty_classes == fresh.empty_classes);
  // The same folder by another path (trailing slash) finds the same cache file.
  CHECK(index_image_folder(t + "/", opt).from_cache);

  SUBCASE("a racy mtime (not older than the listing by two seconds) is not trusted") {
    // In the future, so that the test does not depend on how fast it runs.
    timespec t2[2];
    clock_gettime(CLOCK_REALTIME, &t2[0]);
    t2[0].tv_sec += 3600;
    t2[1] = t2[0];
    REQUIRE(utimensat(AT_FDCWD, (t + "/N00").c_str(), t2, 0) == 0);
    for (int i = 0; i < 2; ++i) {
      const ImageFolderIndex ix = index_image_folder(t, opt);
      CHECK_FALSE(ix.from_cache);
      CHECK(ix.listed_classes == 1);
      CHECK(ix.files == fresh.files);
    }
  }
  SUBCASE("adding a file") {
    touch(t + "/n02/new.jpg");
    const ImageFolderIndex ix = index_image_folder(t, opt);
    CHECK_FALSE(ix.from_cache);
    CHECK(ix.listed_classes == 1);
    CHECK(ix.files.size() == fresh.files.size() + 1);
    CHECK(std::find(ix.files.begin(), ix.files.end(), "n02/new.jpg") != ix.files.end());
  }
  SUBCASE("adding a file in a nested folder") {
    touch(t + "/n02/sub/deep/e.jpg");
    const ImageFolderIndex ix = index_image_folder(t, opt);
    CHECK(ix.listed_classes == 1);
    CHECK(ix.files.size() == fresh.files.size() + 1);
  }
  SUBCASE("removing and renaming files") {
    fs::remove(t + "/n01/img0.tiff");
    fs::rename(t + "/n02/a.jpg", t + "/n02/c.jpg");
    const ImageFolderIndex ix = index_image_folder(t, opt);
    // n01 and n03 (its symlink) and n02 changed.
    CHECK(ix.listed_classes == 3);
    CHECK(ix.files == std::vector<std::string>{"N00/x.webp", "n01/img1.jpeg", "n02/B.jpg", "n02/b.JPEG", "n02/c.jpg",
                                               "n02/z.PNG", "n02/zz.jpg", "n02/sub/x.jpeg", "n02/sub-x/y.JPG",
                                               "n02/sub/deep/d.bmp", "n03/img1.jpeg"});
  }
  SUBCASE("adding and removing classes") {
    touch(t + "/m00/a.jpg");
    fs::remove_all(t + "/N00");
    const ImageFolderIndex ix = index_image_folder(t, opt);
    CHECK_FALSE(ix.from_cache);
    CHECK(ix.listed_classes == 1);
    CHECK(ix.classes == std::vector<std::string>{"empty", "m00", "n01", "n02", "n03"});
    CHECK(ix.files[0] == "m00/a.jpg");
    CHECK(ix.labels[0] == 1);
    // A removed class alone also rewrites the cache.
    settle(t, opt);
    fs::remove_all(t + "/empty");
    const ImageFolderIndex ix2 = index_image_folder(t, opt);
    CHECK_FALSE(ix2.from_cache);
    CHECK(ix2.listed_classes == 0);
    CHECK(ix2.classes == std::vector<std::string>{"m00", "n01", "n02", "n03"});
    CHECK(ix2.labels[0] == 0);
    CHECK(index_image_folder(t, opt).from_cache);
  }
  SUBCASE("a damaged cache file is ignored and rewritten") {
    const std::string cache = cache_files(dir + "/cache")[0];
    const std::string good = [&] {
      std::ifstream in(cache);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    const std::string damaged[] = {
        "garbage\n",
        "",
        good.substr(0, good.size() / 2),
        good.substr(0, good.size() - 4),  // no "end" line
        "ringtape-image-folder-index v0" + good.substr(good.find('\n')),
        good + "extra\n",
    };
    for (const std::string& d : damaged) {
      std::ofstream(cache, std::ios::trunc) << d;
      const ImageFolderIndex ix = index_image_folder(t, opt);
      CHECK_FALSE(ix.from_cache);
      CHECK(ix.files == fresh.files);
      CHECK(ix.labels == fresh.labels);
      CHECK(index_image_folder(t, opt).from_cache);  // rewritten
    }
  }
}

TEST_CASE("index_image_folder: where the cache goes, and no cache without error") {
  const std::string dir = fresh_dir("if_cachedir");
  const std::string t = make_tree(dir);
  const char* home = std::getenv("HOME");
  const std::string saved_home = home ? home : "";
  // $RINGTAPE_CACHE_DIR first; the folder is created.
  REQUIRE(setenv("RINGTAPE_CACHE_DIR", (dir + "/env/cache").c_str(), 1) == 0);
  index_image_folder(t);
  CHECK(cache_files(dir + "/env/cache").size() == 1);
  // An unusable folder (below a file): indexed without a cache, no error.
  touch(dir + "/file");
  REQUIRE(setenv("RINGTAPE_CACHE_DIR", (dir + "/file/cache").c_str(), 1) == 0);
  REQUIRE(setenv("XDG_CACHE_HOME", (dir + "/file/xdg").c_str(), 1) == 0);
  REQUIRE(setenv("HOME", (dir + "/file/home").c_str(), 1) == 0);
  CHECK(index_image_folder(t).files.size() == 13);
  CHECK(index_image_folder(t, IndexOptions{dir + "/file/x", true}).files.size() == 13);
  // Then $XDG_CACHE_HOME/ringtape.
  REQUIRE(setenv("XDG_CACHE_HOME", (dir + "/xdg").c_str(), 1) == 0);
  index_image_folder(t);
  CHECK(cache_files(dir + "/xdg/ringtape").size() == 1);
  // use_cache = false writes nothing.
  index_image_folder(t, IndexOptions{dir + "/unused", false});
  CHECK_FALSE(fs::exists(dir + "/unused"));
  unsetenv("RINGTAPE_CACHE_DIR");
  unsetenv("XDG_CACHE_HOME");
  if (home) setenv("HOME", saved_home.c_str(), 1);
}

TEST_CASE("index_image_folder: errors name the folder and the expected layout") {
  const std::string dir = fresh_dir("if_errors");
  const IndexOptions no_cache{"", false};
  check_error([&] { index_image_folder(dir + "/missing", no_cache); },
              {dir + "/missing", "no such folder", "DIR/train/<wnid>/*.JPEG"});
  touch(dir + "/file");
  check_error([&] { index_image_folder(dir + "/file", no_cache); }, {dir + "/file", "not a folder"});
  touch(dir + "/flat/a.JPEG");
  touch(dir + "/flat/.hidden/b.JPEG");
  check_error([&] { index_image_folder(dir + "/flat", no_cache); }, {dir + "/flat", "no class folders"});
  touch(dir + "/allempty/c1/readme.txt");
  fs::create_directories(dir + "/allempty/c2");
  check_error([&] { index_image_folder(dir + "/allempty", no_cache); },
              {dir + "/allempty", "none of its 2 class folders", "c1, c2"});
  touch(dir + "/loop/c1/a.jpg");
  fs::create_directory_symlink("..", dir + "/loop/c1/up");
  check_error([&] { index_image_folder(dir + "/loop", no_cache); }, {"c1/up", "loop"});
}

namespace {

const std::vector<std::string> kClasses = {"n01", "n02", "n03"};

std::string make_val(const std::string& dir, const std::string& csv_text) {
  for (const char* f : {"ILSVRC2012_val_00000002.JPEG", "ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000003.JPEG",
                        "notes.txt", ".DS_Store.JPEG"})
    touch(dir + "/val/" + f);
  std::ofstream(dir + "/LOC_val_solution.csv") << csv_text;
  return dir + "/val";
}

}  // namespace

TEST_CASE("index_flat_val: labels from LOC_val_solution.csv") {
  const std::string dir = fresh_dir("if_val");
  const std::string val = make_val(dir,
                                   "ImageId,PredictionString\r\n"
                                   "ILSVRC2012_val_00000003,n01 1 2 3 4 n01 5 6 7 8 \r\n"
                                   "ILSVRC2012_val_00000001,n03 10 20 30 40\r\n"
                                   "ILSVRC2012_val_00000002,n01 0 0 9 9\r\n");
  const ImageFolderIndex ix = index_flat_val(val, dir + "/LOC_val_solution.csv", kClasses);
  CHECK(ix.root == val);
  CHECK(ix.classes == kClasses);
  CHECK(ix.files == std::vector<std::string>{"ILSVRC2012_val_00000001.JPEG", "ILSVRC2012_val_00000002.JPEG",
                                             "ILSVRC2012_val_00000003.JPEG"});
  CHECK(ix.labels == std::vector<int32_t>{2, 0, 0});
  CHECK(ix.empty_classes == std::vector<std::string>{"n02"});
}

TEST_CASE("index_flat_val: errors name the file, the line and the fix") {
  const std::string dir = fresh_dir("if_val_errors");
  const std::string head = "ImageId,PredictionString\n";
  const std::string rows =
      "ILSVRC2012_val_00000001,n01 1 2 3 4\nILSVRC2012_val_00000002,n02 1 2 3 4\n"
      "ILSVRC2012_val_00000003,n03 1 2 3 4\n";
  const std::string csv = dir + "/LOC_val_solution.csv";
  const std::string val = make_val(dir, head + rows);
  REQUIRE(index_flat_val(val, csv, kClasses).files.size() == 3);
  const auto with_csv = [&](const std::string& text) {
    std::ofstream(csv, std::ios::trunc) << text;
    return [&] { index_flat_val(val, csv, kClasses); };
  };
  check_error([&] { index_flat_val(val, dir + "/nope.csv", kClasses); },
              {dir + "/nope.csv", "cannot read", "LOC_val_solution.csv"});
  check_error([&] { index_flat_val(dir + "/nope", csv, kClasses); }, {dir + "/nope", "no such folder"});
  check_error(with_csv("id,label\n" + rows), {csv + ":1:", "ImageId,PredictionString"});
  check_error(with_csv(head + rows + "ILSVRC2012_val_00000004\n"), {csv + ":5:", "malformed row"});
  check_error(with_csv(head + rows + "ILSVRC2012_val_00000004,\n"), {csv + ":5:", "malformed row"});
  check_error(with_csv(head + "ILSVRC2012_val_00000001,n09 1 2 3 4\n" + rows),
              {csv + ":2:", "wnid n09", "ILSVRC2012_val_00000001", "3 training classes"});
  check_error(with_csv(head + rows + "ILSVRC2012_val_00000002,n02 1 1 1 1\n"), {csv + ":5:", "line 3"});
  check_error(with_csv(head + "ILSVRC2012_val_00000001,n01 1 2 3 4\n"),
              {"2 image(s) have no row", "ILSVRC2012_val_00000002.JPEG, ILSVRC2012_val_00000003.JPEG"});
  std::string extra = head + rows;
  for (int i = 4; i <= 9; ++i) extra += "ILSVRC2012_val_0000000" + std::to_string(i) + ",n01 1 2 3 4\n";
  check_error(with_csv(extra), {"6 row(s) name an image that is not in",
                                "ILSVRC2012_val_00000004, "
                                "ILSVRC2012_val_00000005, "
                                "ILSVRC2012_val_00000006 and 3 more"});
  // A val folder in class-folder layout: say so.
  touch(dir + "/val2/n01/a.JPEG");
  check_error([&] { index_flat_val(dir + "/val2", csv, kClasses); }, {"subfolders", "index_image_folder"});
}
