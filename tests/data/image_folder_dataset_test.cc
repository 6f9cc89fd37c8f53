// The "imagenet" dataset on a tiny tree (tests/data/imagenet_tree.h): sizes, shapes,
// classes and labels as torchvision's ImageFolder, examples equal to the transforms
// computed by hand, the odd files that must decode, the damaged ones that must throw
// BadExample naming the file, layout errors, the flat validation layout, and a Loader
// that replaces and counts the damaged files the same way for any worker count.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"
#include "data/datasets/imagenet_common.h"
#include "data/codecs/png_decode.h"
#include "data/transforms/image_transforms.h"
#include "data/loading/loader.h"
#include "tests/data/data_test_util.h"
#include "tests/data/imagenet_tree.h"
#include "tests/data/jpeg_test_util.h"

using namespace rt::data;
using namespace rt::data::test;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kWnids = {"n01440764", "n01443537", "n01484850", "n01491361"};
constexpr int kTrainCrop = 32, kValResize = 36, kValCrop = 28;
constexpr uint64_t kSeed = 7;

// Sizes small enough for a fast test; the index cache under the test's scratch space.
DatasetOptions options(const std::string& name) {
  DatasetOptions o;
  o.image_folder.train_crop_size = kTrainCrop;
  o.image_folder.val_resize_size = kValResize;
  o.image_folder.val_crop_size = kValCrop;
  o.image_folder.seed = kSeed;
  o.image_folder.cache_dir = fresh_dir("cache_" + name);
  return o;
}

std::unique_ptr<Dataset> open(const ImagenetTree& t, const std::string& split, const DatasetOptions& o) {
  return open_dataset("imagenet", t.root, split, o);
}

struct Example {
  Bytes pixels;
  int64_t label = -1;
};

Example get(const Dataset& ds, int64_t i, int64_t epoch) {
  Example e;
  e.pixels.resize(size_t(ds.example_bytes()));
  ds.get(i, epoch, e.pixels.data(), &e.label);
  return e;
}

// The label torchvision gives a file: the position of its class folder among the sorted
// train folders (the wnid is the folder name).
int64_t wnid_label(const std::string& rel) {
  const std::string folder = fs::path(rel).parent_path().filename().string();
  return std::find(kWnids.begin(), kWnids.end(), folder) - kWnids.begin();
}

}  // namespace

TEST_CASE("imagenet: sizes, shapes, classes, normalisation and labels follow torchvision") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_basic"));
  REQUIRE(t.train.size() == 24);
  REQUIRE(t.val.size() == 10);
  const DatasetOptions o = options("basic");
  const auto train = open(t, "train", o);
  const auto val = open(t, "test", o);

  CHECK(train->size() == 24);  // notes.txt is not an image
  CHECK(val->size() == 10);
  CHECK(train->name() == "imagenet");
  CHECK(train->pixel_dtype() == rt::DType::u8);
  CHECK(train->image_shape() == rt::Shape{3, kTrainCrop, kTrainCrop});
  CHECK(val->image_shape() == rt::Shape{3, kValCrop, kValCrop});
  CHECK(train->num_classes() == 4);  // the empty n01491361 keeps its index
  CHECK(val->num_classes() == 4);
  for (const auto* ds : {train.get(), val.get()}) {
    CHECK(ds->normalization().mean == std::vector<double>{0.485, 0.456, 0.406});
    CHECK(ds->normalization().std == std::vector<double>{0.229, 0.224, 0.225});
  }
  for (size_t i = 0; i < t.train.size(); ++i) {
    if (t.train[i].bad()) continue;
    CAPTURE(t.train[i].rel);
    CHECK(get(*train, int64_t(i), 0).label == wnid_label(t.train[i].rel));
  }
  for (size_t i = 0; i < t.val.size(); ++i) {
    if (t.val[i].bad()) continue;
    CAPTURE(t.val[i].rel);
    CHECK(get(*val, int64_t(i), 0).label == wnid_label(t.val[i].rel));
  }
}

TEST_CASE("imagenet: val folders map to the train indices by wnid") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_map"));
  // Without the middle class, n01484850 must still be 2 (not 1, its val position).
  fs::remove_all(t.root + "/val/n01443537");
  const auto val = open(t, "test", options("map"));
  CHECK(val->num_classes() == 4);
  REQUIRE(val->size() == 6);
  for (int64_t i = 0; i < 6; ++i) CHECK(get(*val, i, 0).label == (i < 3 ? 0 : 2));

  // A val class the train split lacks is an error naming it.
  fs::copy(t.root + "/val/n01440764", t.root + "/val/n09999999");
  check_error([&] { open(t, "test", options("map2")); },
              {"n09999999", t.root + "/val", t.root + "/train", "same class folders"});
}

TEST_CASE("imagenet: a training example is a pure function of (seed, epoch, index)") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_train"));
  const DatasetOptions o = options("train");
  const auto train = open(t, "train", o);
  DatasetOptions o2 = o;
  o2.image_folder.seed = kSeed + 1;
  const auto other_seed = open(t, "train", o2);

  int checked = 0;
  for (size_t i = 0; i < t.train.size(); ++i) {
    if (t.train[i].bad()) continue;
    CAPTURE(t.train[i].rel);
    const Bytes file = read_bytes(t.path(t.train[i]));
    const Example e0 = get(*train, int64_t(i), 0);
    CHECK(get(*train, int64_t(i), 0).pixels == e0.pixels);  // the same twice
    CHECK(get(*train, int64_t(i), 1).pixels != e0.pixels);  // another epoch, another crop
    CHECK(get(*other_seed, int64_t(i), 0).pixels != e0.pixels);
    for (int64_t epoch : {0, 3}) {
      rt::Generator g = example_generator(kSeed, epoch, int64_t(i));
      const bool flip = g.next_u64() >> 63;
      Bytes want(size_t(kTrainCrop) * kTrainCrop * 3);
      train_transform(file, t.path(t.train[i]), kTrainCrop, g, flip, want.data());
      CHECK(get(*train, int64_t(i), epoch).pixels == want);
    }
    ++checked;
  }
  CHECK(checked == 21);
}

TEST_CASE("imagenet: an evaluation example is Resize + CenterCrop of its file, in every epoch") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_eval"));
  const auto val = open(t, "test", options("eval"));
  for (size_t i = 0; i < t.val.size(); ++i) {
    if (t.val[i].bad()) continue;
    CAPTURE(t.val[i].rel);
    Bytes want(size_t(kValCrop) * kValCrop * 3);
    eval_transform(read_bytes(t.path(t.val[i])), t.path(t.val[i]), kValResize, kValCrop, want.data());
    CHECK(get(*val, int64_t(i), 0).pixels == want);
    CHECK(get(*val, int64_t(i), 5).pixels == want);
  }
}

TEST_CASE("imagenet: grayscale, CMYK and PNG-named-.JPEG files decode") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_odd"));
  const auto train = open(t, "train", options("odd"));
  std::set<TreeFileKind> seen;
  for (size_t i = 0; i < t.train.size(); ++i) {
    const TreeFile& f = t.train[i];
    if (f.kind == TreeFileKind::photo || f.bad()) continue;
    CAPTURE(f.rel);
    seen.insert(f.kind);
    Example e;
    REQUIRE_NOTHROW(e = get(*train, int64_t(i), 0));
    CHECK(e.label == f.label);
    if (f.kind == TreeFileKind::gray) {
      for (size_t p = 0; p < e.pixels.size(); p += 3) {
        REQUIRE(e.pixels[p] == e.pixels[p + 1]);
        REQUIRE(e.pixels[p] == e.pixels[p + 2]);
      }
    }
    if (f.kind == TreeFileKind::png) {
      CHECK(fs::path(f.rel).extension() == ".JPEG");
      CHECK(read_bytes(t.path(f)).at(1) == 'P');  // really a PNG
    }
  }
  CHECK(seen == std::set<TreeFileKind>{TreeFileKind::gray, TreeFileKind::cmyk, TreeFileKind::png});
}

TEST_CASE("imagenet: damaged files throw BadExample naming the file") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_bad"));
  const DatasetOptions o = options("bad");
  const auto train = open(t, "train", o);
  const auto val = open(t, "test", o);
  // Checks every bad file of `files`; returns how many there were.
  const auto check_bad = [&](const Dataset& ds, const std::vector<TreeFile>& files) {
    int n = 0;
    for (size_t i = 0; i < files.size(); ++i) {
      if (!files[i].bad()) continue;
      CAPTURE(files[i].rel);
      ++n;
      const std::string path = t.path(files[i]);
      bool thrown = false;
      try {
        get(ds, int64_t(i), 0);
      } catch (const BadExample& e) {
        thrown = true;
        CHECK(e.source() == path);
        CHECK_MESSAGE(std::string(e.what()).find(path) != std::string::npos, e.what());
        if (files[i].kind == TreeFileKind::empty) CHECK(std::string(e.what()).find("empty") != std::string::npos);
      }
      CHECK(thrown);
    }
    return n;
  };
  CHECK(check_bad(*train, t.train) == 3);
  CHECK(check_bad(*val, t.val) == 1);
  CHECK(t.bad_train == std::vector<std::string>{"train/n01440764/n01440764_7.JPEG", "train/n01443537/n01443537_8.JPEG",
                                                "train/n01484850/n01484850_9.JPEG"});
}

TEST_CASE("imagenet: layout errors name the path and the expected layout") {
  const std::string layout = "DIR/train/<wnid>/*.JPEG";
  const DatasetOptions o = options("errors");
  const std::string missing = fresh_dir("inet_err_missing") + "/nope";
  check_error([&] { open_dataset("imagenet", missing, "train", o); }, {missing, layout});

  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_err_notrain"));
  fs::remove_all(t.root + "/train");
  check_error([&] { open(t, "train", o); }, {t.root + "/train", "not found", layout});

  const ImagenetTree u = write_imagenet_tree(fresh_dir("inet_err_noval"));
  fs::remove_all(u.root + "/val");
  check_error([&] { open(u, "test", o); }, {u.root + "/val", "not found", layout});

  const ImagenetTree v = write_imagenet_tree_flat(fresh_dir("inet_err_nocsv"));
  fs::remove(v.root + "/LOC_val_solution.csv");
  check_error([&] { open(v, "test", o); },
              {v.root + "/val", v.root + "/LOC_val_solution.csv", "flat", "no class folders", layout});

  // Sizes that cannot work name the flags.
  DatasetOptions bad = o;
  bad.image_folder.val_resize_size = kValCrop - 1;
  check_error([&] { open(t, "test", bad); }, {"val_resize_size", "val_crop_size"});
  // Crops beyond any decodable image (and whose byte counts would overflow int64).
  bad = o;
  bad.image_folder.train_crop_size = 2'000'000'000;
  check_error([&] { open(t, "train", bad); },
              {"imagenet: a size of 2000000000 px makes images of 4000000000000000000 pixels", "(2^28)"});
  bad = o;
  bad.image_folder.val_resize_size = 16385;
  check_error([&] { open(t, "test", bad); }, {"a size of 16385 px", "crop and resize sizes of at most 16384"});
  check_error([&] { open_dataset("imagenet", "", "train", o); }, {"needs a path DIR"});
}

TEST_CASE("imagenet: the flat validation layout with LOC_val_solution.csv") {
  const ImagenetTree t = write_imagenet_tree_flat(fresh_dir("inet_flat"));
  const DatasetOptions o = options("flat");
  const auto val = open(t, "test", o);
  REQUIRE(val->size() == 10);
  CHECK(val->num_classes() == 4);
  CHECK(val->image_shape() == rt::Shape{3, kValCrop, kValCrop});
  const std::vector<int64_t> want = {2, 0, 1, 1, 0, 2, 2, 1, 0, 0};  // as the csv says
  for (size_t i = 0; i < t.val.size(); ++i) {
    CAPTURE(t.val[i].rel);
    CHECK(t.val[i].label == want[i]);
    if (t.val[i].bad()) {
      CHECK_THROWS_AS(get(*val, int64_t(i), 0), BadExample);
      continue;
    }
    const Example e = get(*val, int64_t(i), 0);
    CHECK(e.label == want[i]);
    Bytes px(size_t(kValCrop) * kValCrop * 3);
    eval_transform(read_bytes(t.path(t.val[i])), t.path(t.val[i]), kValResize, kValCrop, px.data());
    CHECK(e.pixels == px);
  }
  // The csv may also sit in DIR/val.
  fs::rename(t.root + "/LOC_val_solution.csv", t.root + "/val/LOC_val_solution.csv");
  CHECK(open(t, "test", options("flat2"))->size() == 10);
}

TEST_CASE("imagenet: a Loader replaces and counts damaged files, the same with 0 and 2 workers") {
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_loader"));
  const auto train = open(t, "train", options("loader"));
  SamplerOptions so;
  so.shuffle = false;
  so.drop_last = false;
  struct Epoch {
    std::vector<Bytes> images;
    std::vector<std::vector<int64_t>> labels;
    std::set<std::string> skipped;
    int64_t count = 0;
  };
  const auto run = [&](int workers, int64_t epoch) {
    LoaderOptions lo;
    lo.workers = workers;
    lo.log_skipped = false;
    Loader loader(*train, Sampler(train->size(), 5, so), lo);  // batches 5 5 5 5 4: every file once
    loader.start_epoch(epoch);
    Epoch e;
    while (auto b = loader.next()) {
      const int64_t n = b->images.size(0);
      CHECK(b->images.dtype() == rt::DType::u8);
      CHECK(b->images.shape() == rt::Shape{n, kTrainCrop, kTrainCrop, 3});
      const auto* p = static_cast<const uint8_t*>(b->images.raw_data());
      e.images.emplace_back(p, p + b->images.nbytes());
      e.labels.emplace_back(b->labels.data<int64_t>(), b->labels.data<int64_t>() + n);
      for (const SkippedExample& s : b->skipped) e.skipped.insert(s.source);
    }
    e.count = loader.skipped_in_epoch();
    return e;
  };
  std::set<std::string> bad;
  for (const std::string& rel : t.bad_train) bad.insert(t.path(rel));

  const Epoch a = run(0, 0), b = run(2, 0);
  REQUIRE(a.images.size() == 5);
  CHECK(a.count == 3);
  CHECK(a.skipped == bad);
  CHECK(b.count == 3);
  CHECK(b.skipped == bad);
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);

  // A damaged file's slot holds the next file in order: n01440764_7 (index 6, batch 1
  // position 1) becomes index 7, and the last file (index 23) wraps to index 0.
  const int64_t px = int64_t(kTrainCrop) * kTrainCrop * 3;
  const Example next = get(*train, 7, 0), first = get(*train, 0, 0);
  CHECK(Bytes(a.images[1].begin() + px, a.images[1].begin() + 2 * px) == next.pixels);
  CHECK(a.labels[1][1] == next.label);
  CHECK(Bytes(a.images[4].begin() + 3 * px, a.images[4].begin() + 4 * px) == first.pixels);
  CHECK(a.labels[4][3] == first.label);

  const Epoch c = run(2, 1);
  CHECK(c.count == 3);
  CHECK(c.images != a.images);  // another epoch, other crops
}

// 633 bytes whose header claims 16000 x 16000 pixels are refused from the header, before a
// decoder allocates 768 MB for them (Note [Decoded-pixel limit]).
TEST_CASE("imagenet: a header claiming more pixels than --max-image-pixels is refused before decoding") {
  std::vector<uint8_t> px(16 * 16 * 3);
  for (size_t k = 0; k < px.size(); ++k) px[k] = uint8_t(k * 7);
  const std::vector<uint8_t> small = encode_jpeg(16, 16, 3, JCS_RGB, px);
  // The bomb: the same file with its frame header (SOF0: FF C0, length, precision, then
  // height and width, big-endian) saying 16000 x 16000.
  std::vector<uint8_t> bomb = small;
  size_t sof = 0;
  for (size_t k = 2; k + 9 < bomb.size(); ++k)
    if (bomb[k] == 0xFF && bomb[k + 1] == 0xC0) {
      sof = k;
      break;
    }
  REQUIRE(sof > 0);
  for (const size_t at : {sof + 5, sof + 7}) {
    bomb[at] = uint8_t(16000 >> 8);
    bomb[at + 1] = uint8_t(16000 & 255);
  }
  CHECK(encoded_image_size(bomb, "bomb.JPEG") == std::pair<int64_t, int64_t>{16000, 16000});
  CHECK(encoded_image_size(small, "small.JPEG") == std::pair<int64_t, int64_t>{16, 16});

  ImageFolderOptions o;  // the default limit: PIL's
  o.val_resize_size = 16;
  o.val_crop_size = 16;
  std::vector<uint8_t> out(16 * 16 * 3);
  for (const bool train : {false, true}) {
    CAPTURE(train);
    o.train_crop_size = 16;
    std::string what;
    try {
      imagenet_example(bomb, "bomb.JPEG", train, o, 0, 0, out.data());
    } catch (const BadExample& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("bomb.JPEG: the image's header claims 16000x16000 = 256000000 pixels") != std::string::npos,
                  what);
    CHECK_MESSAGE(what.find("--max-image-pixels") != std::string::npos, what);
  }
  // At the limit an image decodes; one pixel over, it is refused.
  o.max_image_pixels = 16 * 16;
  CHECK_NOTHROW(imagenet_example(small, "small.JPEG", false, o, 0, 0, out.data()));
  o.max_image_pixels = 16 * 16 - 1;
  CHECK_THROWS_AS(imagenet_example(small, "small.JPEG", false, o, 0, 0, out.data()), BadExample);

  // A PNG's size comes from its IHDR chunk: the tree's PNG named .JPEG.
  const ImagenetTree t = write_imagenet_tree(fresh_dir("inet_pixels"));
  for (const TreeFile& f : t.train)
    if (f.kind == TreeFileKind::png) {
      std::ifstream in(t.path(f), std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const DecodedImage img = decode_png(bytes, f.rel);
      CHECK(encoded_image_size(bytes, f.rel) == std::pair<int64_t, int64_t>{img.width, img.height});
      o.max_image_pixels = int64_t(img.width) * img.height - 1;
      CHECK_THROWS_AS(imagenet_example(bytes, f.rel, true, o, 0, 0, out.data()), BadExample);
    }
  CHECK_THROWS_WITH_AS(encoded_image_size(std::vector<uint8_t>(small.begin(), small.begin() + 20), "cut.JPEG"),
                       doctest::Contains("cut.JPEG"), rt::Error);
}
