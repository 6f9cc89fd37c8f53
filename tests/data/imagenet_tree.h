// A tiny ImageNet on disk for the "imagenet" dataset and trainer tests: the ImageFolder
// layout (DIR/train/<wnid>/, DIR/val/<wnid>/) or the flat validation layout
// (DIR/val/ILSVRC2012_val_00000001.JPEG + DIR/LOC_val_solution.csv), with the odd files
// real ImageNet holds (grayscale, CMYK, a PNG named .JPEG: all valid) and the damaged ones
// a user's copy may hold (truncated, empty, random bytes: unreadable).
//
//   train/n01440764/  _1.._6 photos, _7 truncated, notes.txt (not an image: not indexed)
//   train/n01443537/  _1.._6 photos, _7 grayscale, _8 zero bytes
//   train/n01484850/  _1.._6 photos, _7 CMYK, _8 PNG named .JPEG, _9 random bytes
//   train/n01491361/  empty (its class keeps index 3)
//   val/<wnid>/       3 photos per class; n01443537 also holds a truncated file
//
// 24 train files (3 unreadable), 10 val files (1 unreadable). Photos are 64x48 or 48x64
// smooth gradients tinted per class (red, green, blue), so the classes are learnable.
#pragma once

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/data/jpeg_test_util.h"

namespace rt::data::test {

enum class TreeFileKind { photo, gray, cmyk, png, truncated, empty, random };

struct TreeFile {
  std::string rel;  // relative to the root: "train/n01440764/n01440764_1.JPEG"
  int label = 0;    // index of its wnid among the train classes
  TreeFileKind kind = TreeFileKind::photo;
  // No decoder can read it: the dataset throws BadExample.
  bool bad() const {
    return kind == TreeFileKind::truncated || kind == TreeFileKind::empty || kind == TreeFileKind::random;
  }
};

struct ImagenetTree {
  std::string root;
  std::vector<std::string> classes;    // the train class folders, sorted; the last one is empty
  std::vector<TreeFile> train;         // in the dataset's index order
  std::vector<TreeFile> val;           // likewise
  std::vector<std::string> bad_train;  // rel of the unreadable train files, in index order
  std::vector<std::string> bad_val;

  std::string path(const TreeFile& f) const { return root + "/" + f.rel; }
  std::string path(const std::string& rel) const { return root + "/" + rel; }
};

namespace tree_detail {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

inline const std::vector<std::string>& wnids() {
  static const std::vector<std::string> w = {"n01440764", "n01443537", "n01484850", "n01491361"};
  return w;
}

inline void write_file(const fs::path& p, const Bytes& b) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!out.good()) throw std::runtime_error("imagenet_tree: cannot write " + p.string());
}

// RGB HWC: a class tint plus gradients and a gentle wave that vary with `k`.
inline Bytes photo_pixels(int w, int h, int label, int k) {
  static const double tint[3][3] = {{180, 80, 70}, {70, 170, 80}, {70, 90, 180}};
  Bytes px(size_t(w) * size_t(h) * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const double gx = double(x) / (w - 1) - 0.5, gy = double(y) / (h - 1) - 0.5;
        const double v = tint[label][c] + 50 * gx * (c == k % 3 ? 1 : -1) + 40 * gy +
                         20 * std::sin(0.15 * (k + 1) * x + 0.1 * y + c);
        px[(size_t(y) * size_t(w) + size_t(x)) * 3 + size_t(c)] = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return px;
}

inline Bytes photo_jpeg(int label, int k) {
  const int w = k % 2 ? 48 : 64, h = k % 2 ? 64 : 48;
  return encode_jpeg(w, h, 3, JCS_RGB, photo_pixels(w, h, label, k));
}

inline Bytes gray_jpeg() {
  const int w = 56, h = 40;
  Bytes px(size_t(w) * size_t(h));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) px[size_t(y) * size_t(w) + size_t(x)] = uint8_t(40 + 3 * x + 2 * y);
  return encode_jpeg(w, h, 1, JCS_GRAYSCALE, px);
}

// An Adobe CMYK JPEG (libjpeg writes the Adobe marker for CMYK input).
inline Bytes cmyk_jpeg() {
  const int w = 40, h = 56;
  Bytes px(size_t(w) * size_t(h) * 4);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 4; ++c)
        px[(size_t(y) * size_t(w) + size_t(x)) * 4 + size_t(c)] = uint8_t(60 + 2 * x + y + 30 * c);
  return encode_jpeg(w, h, 4, JCS_CMYK, px);
}

inline Bytes png_file(int label) {
  const int w = 50, h = 42;
  const Bytes px = photo_pixels(w, h, label, 7);
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  im.width = png_uint_32(w);
  im.height = png_uint_32(h);
  im.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&im, nullptr, &size, 0, px.data(), 0, nullptr))
    throw std::runtime_error("imagenet_tree: png_image_write_to_memory failed");
  Bytes out(size);
  if (!png_image_write_to_memory(&im, out.data(), &size, 0, px.data(), 0, nullptr))
    throw std::runtime_error("imagenet_tree: png_image_write_to_memory failed");
  out.resize(size);
  return out;
}

// The first 300 bytes of a colour JPEG: the header ends inside the Huffman tables, so not
// even the image size can be read.
inline Bytes truncated_jpeg(int label) {
  Bytes b = photo_jpeg(label, 0);
  b.resize(300);
  return b;
}

// Bytes that are neither a JPEG nor a PNG.
inline Bytes random_bytes() {
  Bytes b(777);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (uint8_t& v : b) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = uint8_t(s >> 56);
  }
  b[0] = 0x42;  // neither FF (JPEG) nor 89 (PNG)
  return b;
}

inline Bytes bytes_of(TreeFileKind kind, int label, int k) {
  switch (kind) {
    case TreeFileKind::photo: return photo_jpeg(label, k);
    case TreeFileKind::gray: return gray_jpeg();
    case TreeFileKind::cmyk: return cmyk_jpeg();
    case TreeFileKind::png: return png_file(label);
    case TreeFileKind::truncated: return truncated_jpeg(label);
    case TreeFileKind::empty: return {};
    case TreeFileKind::random: return random_bytes();
  }
  return {};
}

inline void add(ImagenetTree& t, std::vector<TreeFile>& list, std::vector<std::string>& bad, const std::string& rel,
                int label, TreeFileKind kind, int k) {
  write_file(fs::path(t.root) / rel, bytes_of(kind, label, k));
  list.push_back({rel, label, kind});
  if (list.back().bad()) bad.push_back(rel);
}

// DIR/train as described at the top of the file.
inline void write_train(ImagenetTree& t) {
  using K = TreeFileKind;
  const std::vector<std::vector<K>> extra = {{K::truncated}, {K::gray, K::empty}, {K::cmyk, K::png, K::random}};
  for (int c = 0; c < 3; ++c) {
    const std::string w = wnids()[size_t(c)];
    std::vector<K> kinds(6, K::photo);
    kinds.insert(kinds.end(), extra[size_t(c)].begin(), extra[size_t(c)].end());
    for (size_t k = 0; k < kinds.size(); ++k)
      add(t, t.train, t.bad_train, "train/" + w + "/" + w + "_" + std::to_string(k + 1) + ".JPEG", c, kinds[k],
          int(k) + 3 * c);
  }
  std::ofstream(fs::path(t.root) / "train" / wnids()[0] / "notes.txt") << "not an image\n";
  fs::create_directories(fs::path(t.root) / "train" / wnids()[3]);
}

inline std::string val_name(int n) {
  char b[40];
  std::snprintf(b, sizeof b, "ILSVRC2012_val_%08d.JPEG", n);
  return b;
}

inline ImagenetTree start(const std::string& dir) {
  if (fs::exists(dir) && !fs::is_empty(dir)) throw std::runtime_error("imagenet_tree: " + dir + " is not empty");
  ImagenetTree t;
  t.root = dir;
  t.classes = wnids();
  write_train(t);
  return t;
}

}  // namespace tree_detail

// Writes the ImageFolder layout (train/ and val/<wnid>/) into `dir`, which must be empty
// or absent.
inline ImagenetTree write_imagenet_tree(const std::string& dir) {
  using K = TreeFileKind;
  ImagenetTree t = tree_detail::start(dir);
  int n = 0;
  for (int c = 0; c < 3; ++c) {
    const std::string folder = "val/" + t.classes[size_t(c)] + "/";
    for (int k = 0; k < (c == 1 ? 4 : 3); ++k) {
      ++n;
      tree_detail::add(t, t.val, t.bad_val, folder + tree_detail::val_name(n), c, k < 3 ? K::photo : K::truncated,
                       20 + n);
    }
  }
  return t;
}

// Writes train/ as above and the flat validation layout: val/ILSVRC2012_val_0000000N.JPEG
// (classes interleaved, number 4 truncated) with LOC_val_solution.csv in `dir`, its rows
// in another order and some with several boxes, as Kaggle's file has.
inline ImagenetTree write_imagenet_tree_flat(const std::string& dir) {
  using K = TreeFileKind;
  ImagenetTree t = tree_detail::start(dir);
  const int labels[10] = {2, 0, 1, 1, 0, 2, 2, 1, 0, 0};
  std::vector<std::string> rows;
  for (int n = 1; n <= 10; ++n) {
    const int c = labels[n - 1];
    tree_detail::add(t, t.val, t.bad_val, "val/" + tree_detail::val_name(n), c, n == 4 ? K::truncated : K::photo,
                     20 + n);
    const std::string id = tree_detail::val_name(n).substr(0, 23);  // without ".JPEG"
    std::string boxes = t.classes[size_t(c)] + " 1 2 30 40";
    if (n % 3 == 0) boxes += " " + t.classes[size_t(c)] + " 5 6 20 21";
    rows.push_back(id + "," + boxes + " ");
  }
  std::reverse(rows.begin(), rows.end());
  std::ofstream csv(std::filesystem::path(dir) / "LOC_val_solution.csv");
  csv << "ImageId,PredictionString\n";
  for (const std::string& r : rows) csv << r << "\n";
  if (!csv.good()) throw std::runtime_error("imagenet_tree: cannot write " + dir + "/LOC_val_solution.csv");
  return t;
}

}  // namespace rt::data::test
