// `ringtape pack` and the "webdataset" dataset on the tiny ImageNet tree
// (tests/data/imagenet_tree.h) plus larger noise photos (several shards): the pack -> read
// round trip bit for bit at max-side none, labels and classes, re-encoding at a max side,
// skipped files, evaluation examples equal to the folder path's, resumable packing
// (Note [Resumable pack]), shard lists and patterns, damaged index files, foreign shards
// without an index, and exact mid-epoch resume through the Loader.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/datasets/dataset.h"
#include "data/codecs/jpeg_decode.h"
#include "data/codecs/jpeg_encode.h"
#include "data/loading/loader.h"
#include "data/pack/pack.h"
#include "data/codecs/png_decode.h"
#include "data/formats/shard_index.h"
#include "data/formats/tar.h"
#include "engine/io/json.h"
#include "engine/random.h"
#include "tests/data/data_test_util.h"
#include "tests/data/imagenet_tree.h"

using namespace rt::data;
using rt::data::test::Bytes;
using rt::data::test::check_error;
using rt::data::test::fresh_dir;
using rt::data::test::read_bytes;
using rt::data::test::write_bytes;
namespace fs = std::filesystem;

namespace {

constexpr int kTrainCrop = 32, kValResize = 36, kValCrop = 28;
constexpr int64_t kShardBytes = 64 << 10;  // the smallest pack accepts: several shards here

// The tree plus 12 noise photos of 120x90 .. 230x200 (~20-60 KB each: several shards).
rt::data::test::ImagenetTree make_tree(const std::string& name) {
  rt::data::test::ImagenetTree t = rt::data::test::write_imagenet_tree(fresh_dir(name));
  rt::Generator g(11);
  for (int k = 0; k < 12; ++k) {
    const int w = 120 + 10 * k, h = 90 + 10 * k, c = k % 3;
    Bytes px(size_t(w) * size_t(h) * 3);
    for (uint8_t& v : px) v = uint8_t(g.randint(0, 256));
    write_bytes(t.root + "/train/" + t.classes[size_t(c)] + "/noise_" + std::to_string(k) + ".jpg",
                encode_jpeg(px.data(), w, h, 90, "noise"));
  }
  return t;
}

PackOptions pack_options(const std::string& data, const std::string& out, const std::string& cache) {
  PackOptions o;
  o.data_path = data;
  o.output = out;
  o.shard_bytes = kShardBytes;
  o.workers = 2;
  o.progress = false;
  o.cache_dir = cache;
  return o;
}

DatasetOptions dataset_options(const std::string& cache) {
  DatasetOptions o;
  o.image_folder.train_crop_size = kTrainCrop;
  o.image_folder.val_resize_size = kValResize;
  o.image_folder.val_crop_size = kValCrop;
  o.image_folder.seed = 5;
  o.image_folder.cache_dir = cache;
  return o;
}

// Every sample of the shards in a folder: key -> (image bytes, label).
std::map<std::string, std::pair<Bytes, int64_t>> read_samples(const std::vector<std::string>& shards) {
  std::map<std::string, std::pair<Bytes, int64_t>> out;
  for (const std::string& s : shards) {
    const ShardIndex x = load_shard(s);
    const RandomAccessFile f(s);
    for (const ShardSample& e : x.samples) {
      Bytes b(size_t(e.size));
      f.read_exact(e.offset, b);
      CHECK(out.emplace(e.key, std::make_pair(b, e.label)).second);  // keys are unique
    }
  }
  return out;
}

std::vector<Bytes> files_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  std::vector<Bytes> out;
  for (const auto& n : names) out.push_back(read_bytes(n));
  return out;
}

}  // namespace

TEST_CASE("pack -> read: every readable image once, bit for bit at max-side none, with its label") {
  const auto t = make_tree("wds_roundtrip");
  const std::string out = fresh_dir("wds_roundtrip_out"), cache = fresh_dir("wds_roundtrip_cache");
  const PackResult r = pack_image_folder(pack_options(t.root + "/train", out + "/train", cache));
  CHECK(r.files == 36);
  CHECK(r.skipped == 3);  // truncated, empty and random bytes, as the folder reader finds them
  CHECK(r.packed == 33);
  CHECK(r.reencoded == 1);  // the PNG named .JPEG
  CHECK(r.shards >= 4);
  const std::vector<std::string> shards = list_shards(out, "train");
  CHECK(int64_t(shards.size()) == r.shards);
  for (const std::string& s : shards) {
    CHECK(fs::exists(index_path_of(s)));
    CHECK(fs::file_size(s) < uint64_t(kShardBytes) + (80 << 10));  // closes at the first sample past the size
  }
  const auto samples = read_samples(shards);
  REQUIRE(samples.size() == 33);
  std::set<std::string> bad(t.bad_train.begin(), t.bad_train.end());
  std::map<std::string, std::string> by_key;  // key -> file
  for (const auto& e : fs::recursive_directory_iterator(t.root + "/train")) {
    if (!e.is_regular_file() || e.path().extension() == ".txt") continue;
    const std::string rel = fs::relative(e.path(), t.root + "/train").string();
    if (bad.count("train/" + rel)) continue;
    by_key[fs::path(rel).replace_extension().string()] = e.path().string();
  }
  REQUIRE(by_key.size() == 33);
  for (const auto& [key, file] : by_key) {
    CAPTURE(key);
    REQUIRE(samples.count(key) == 1);
    const auto& [bytes, label] = samples.at(key);
    const std::string wnid = fs::path(key).parent_path().string();
    CHECK(label == std::find(t.classes.begin(), t.classes.end(), wnid) - t.classes.begin());
    const Bytes original = read_bytes(file);
    if (original[0] == 0x89) {  // the PNG named .JPEG: now a JPEG of its pixels
      CHECK(key == "n01484850/n01484850_8");
      const DecodedImage png = decode_png(original, key), jpg = decode_jpeg(bytes, key);
      CHECK(jpg.width == png.width);
      CHECK(jpg.height == png.height);
    } else {
      CHECK(bytes == original);
    }
  }
  // The summary names the classes in order; the test split takes the train split's indices.
  const Bytes summary = read_bytes(out + "/train.json");
  const rt::json::Value j = rt::json::parse(std::string(summary.begin(), summary.end()));
  std::vector<std::string> classes;
  for (const rt::json::Value& c : j.find("classes")->as_array()) classes.push_back(c.as_string());
  CHECK(classes == t.classes);
  CHECK(j.find("num_samples")->as_int() == 33);
  CHECK(j.find("skipped")->as_int() == 3);
  CHECK(int64_t(j.find("shardlist")->as_array().size()) == r.shards);
  const PackResult v = pack_image_folder(pack_options(t.root + "/val", out + "/val", cache));
  CHECK(v.packed == 9);
  CHECK(v.skipped == 1);
  for (const auto& [key, s] : read_samples(list_shards(out, "val")))
    CHECK(s.second == std::find(t.classes.begin(), t.classes.end(), fs::path(key).parent_path().string()) -
                           t.classes.begin());
}

TEST_CASE("webdataset: evaluation examples equal the folder path's, training follows the shard order") {
  const auto t = make_tree("wds_eval");
  const std::string out = fresh_dir("wds_eval_out"), cache = fresh_dir("wds_eval_cache");
  pack_image_folder(pack_options(t.root + "/train", out + "/train", cache));
  pack_image_folder(pack_options(t.root + "/val", out + "/val", cache));
  const DatasetOptions o = dataset_options(cache);
  const auto shards = open_dataset("webdataset", out, "test", o);
  const auto folder = open_dataset("imagenet", t.root, "test", o);
  CHECK(shards->name() == "webdataset");
  CHECK(shards->size() == 9);
  CHECK(shards->num_classes() == 4);  // from train.json's classes (the empty class counts)
  CHECK(shards->image_shape() == rt::Shape{3, kValCrop, kValCrop});
  CHECK(shards->normalization().mean == folder->normalization().mean);
  CHECK(shards->shard_sizes().size() == list_shards(out, "val").size());
  // Same file -> same pixels. Match examples by label and pixels: each shard example must
  // equal exactly one folder example.
  std::vector<std::pair<Bytes, int64_t>> from_folder;
  for (int64_t i = 0; i < folder->size(); ++i) {
    Bytes px(size_t(folder->example_bytes()));
    int64_t y = -1;
    try {
      folder->get(i, 0, px.data(), &y);
    } catch (const BadExample&) {
      continue;
    }
    from_folder.emplace_back(px, y);
  }
  REQUIRE(from_folder.size() == 9);
  for (int64_t i = 0; i < shards->size(); ++i) {
    Bytes px(size_t(shards->example_bytes()));
    int64_t y = -1;
    shards->get(i, 0, px.data(), &y);
    CHECK(std::count(from_folder.begin(), from_folder.end(), std::make_pair(px, y)) == 1);
  }
  const auto train = open_dataset("webdataset", out, "train", o);
  CHECK(train->size() == 33);
  CHECK(train->image_shape() == rt::Shape{3, kTrainCrop, kTrainCrop});
  int64_t sum = 0;
  for (const int64_t n : train->shard_sizes()) sum += n;
  CHECK(sum == 33);
}

TEST_CASE("webdataset: exact resume mid-epoch, for any worker count, with a shuffle buffer") {
  const auto t = make_tree("wds_resume");
  const std::string out = fresh_dir("wds_resume_out"), cache = fresh_dir("wds_resume_cache");
  pack_image_folder(pack_options(t.root + "/train", out + "/train", cache));
  const auto ds = open_dataset("webdataset", out, "train", dataset_options(cache));
  for (const int world : {1, 2, 3}) {
    CAPTURE(world);
    SamplerOptions so;
    so.seed = 9;
    so.shard_sizes = ds->shard_sizes();
    so.shuffle_buffer = 6;
    so.world_size = world;
    so.rank = world - 1;
    auto batches = [&](int workers, int64_t first) {
      Loader loader(*ds, Sampler(ds->size(), 4, so), {.workers = workers});
      loader.start_epoch(3, first);
      std::vector<std::pair<Bytes, std::vector<int64_t>>> out;
      while (auto b = loader.next()) {
        const auto* px = b->images.data<uint8_t>();
        const auto* y = b->labels.data<int64_t>();
        out.emplace_back(Bytes(px, px + b->images.nbytes()), std::vector<int64_t>(y, y + b->labels.numel()));
      }
      return out;
    };
    const auto whole = batches(0, 0);
    REQUIRE(whole.size() >= 3);
    const auto resumed = batches(2, 2);
    REQUIRE(resumed.size() == whole.size() - 2);
    for (size_t k = 0; k < resumed.size(); ++k) CHECK(resumed[k] == whole[k + 2]);
  }
}

TEST_CASE("pack: resumes after its last finished shard and writes the same bytes") {
  const auto t = make_tree("wds_pack_resume");
  const std::string cache = fresh_dir("wds_pack_resume_cache");
  const std::string a = fresh_dir("wds_pack_a"), b = fresh_dir("wds_pack_b");
  pack_image_folder(pack_options(t.root + "/train", a + "/train", cache));
  const PackResult first = pack_image_folder(pack_options(t.root + "/train", b + "/train", cache));
  REQUIRE(first.shards >= 4);
  // An interruption while shard 2 was written: its tar unfinished, the later ones absent.
  for (int64_t k = 2; k < first.shards; ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "/train-%06lld", (long long)k);
    fs::remove(b + name + std::string(".tar"));
    fs::remove(b + name + std::string(".idx"));
  }
  fs::remove(b + "/train.json");
  write_bytes(b + "/train-000002.tar.partial", Bytes(1000, 7));
  const PackResult again = pack_image_folder(pack_options(t.root + "/train", b + "/train", cache));
  CHECK(again.resumed_shards == 2);
  CHECK(again.shards == first.shards);
  CHECK(again.packed == first.packed);
  CHECK(!fs::exists(b + "/train-000002.tar.partial"));
  CHECK(files_of(a) == files_of(b));  // same shards, indexes and summary, byte for byte
  // Other options over finished shards: refused, nothing removed.
  PackOptions other = pack_options(t.root + "/train", b + "/train", cache);
  other.max_side = 40;
  check_error([&] { pack_image_folder(other); }, {"train-000000.tar", "other options", "same flags"});
  CHECK(files_of(a) == files_of(b));
  // A tar pack did not finish is somebody's data: never overwritten.
  const std::string c = fresh_dir("wds_pack_c");
  write_bytes(c + "/train-000000.tar", Bytes(2048, 0));
  check_error([&] { pack_image_folder(pack_options(t.root + "/train", c + "/train", cache)); },
              {"train-000000.tar", "not a finished shard", "another --output"});
  CHECK(fs::file_size(c + "/train-000000.tar") == 2048);
}

TEST_CASE("pack: max-side re-encodes larger images to torchvision's Resize size and keeps the others") {
  const auto t = make_tree("wds_maxside");
  const std::string out = fresh_dir("wds_maxside_out"), cache = fresh_dir("wds_maxside_cache");
  PackOptions o = pack_options(t.root + "/train", out + "/train", cache);
  o.max_side = 100;
  o.quality = 80;
  const PackResult r = pack_image_folder(o);
  CHECK(r.reencoded == 10 + 1);  // the noise photos with a shorter side above 100 (110..200), and the PNG
  for (const auto& [key, s] : read_samples(list_shards(out, "train"))) {
    const ImageInfo info = jpeg_info(s.first, key);
    CAPTURE(key);
    CHECK(std::min(info.width, info.height) <= 100);
    if (key.find("noise_5") != std::string::npos) {  // 170x140 -> Resize(100): 121x100
      CHECK(info.width == 121);
      CHECK(info.height == 100);
    }
  }
}

TEST_CASE("webdataset: shard lists, patterns, missing shards and bad paths name the problem") {
  CHECK(expand_braces("a-{000..002}.tar") == std::vector<std::string>{"a-000.tar", "a-001.tar", "a-002.tar"});
  CHECK(expand_braces("{x,y}/s-{8..10}.tar") ==
        std::vector<std::string>{"x/s-8.tar", "x/s-9.tar", "x/s-10.tar", "y/s-8.tar", "y/s-9.tar", "y/s-10.tar"});
  CHECK(expand_braces("plain.tar") == std::vector<std::string>{"plain.tar"});
  check_error([] { expand_braces("a-{1..}.tar"); }, {"numeric range"});
  check_error([] { expand_braces("a-{3..1}.tar"); }, {"backwards"});
  check_error([] { expand_braces("a-{1..2.tar"); }, {"without '}'"});
  check_error([] { expand_braces("a-{0..99999999}.tar"); }, {"10 million"});

  const auto t = make_tree("wds_lists");
  const std::string out = fresh_dir("wds_lists_out"), cache = fresh_dir("wds_lists_cache");
  const PackResult r = pack_image_folder(pack_options(t.root + "/train", out + "/train", cache));
  const std::string last = std::to_string(r.shards - 1);
  const std::string pattern = out + "/train-{000000.." + std::string(6 - last.size(), '0') + last + "}.tar";
  CHECK(list_shards(pattern, "") == list_shards(out, "train"));
  const DatasetOptions o = dataset_options(cache);
  CHECK(open_dataset("webdataset", pattern, "train", o)->size() == 33);
  // A shard of the pattern missing: named, with the pattern.
  fs::rename(out + "/train-000001.tar", out + "/moved.tar");
  check_error([&] { open_dataset("webdataset", pattern, "train", o); },
              {"shard '" + out + "/train-000001.tar' not found", "pattern"});
  fs::rename(out + "/moved.tar", out + "/train-000001.tar");
  // No val shards: the error says how to write them.
  check_error([&] { open_dataset("webdataset", out, "test", o); }, {"no val-*.tar", out, "ringtape pack"});
  check_error([&] { open_dataset("webdataset", pattern, "test", o); }, {"val-*.tar", "--val-data-path"});
  // A folder without shards, and a file that is not a tar.
  check_error([&] { open_dataset("webdataset", fresh_dir("wds_empty"), "train", o); }, {"no train-*.tar"});
  const std::string junk = fresh_dir("wds_junk") + "/train-000000.tar";
  write_bytes(junk, Bytes(3000, 0x41));
  check_error([&] { open_dataset("webdataset", junk, "train", o); }, {junk, "not a tar"});
}

TEST_CASE("webdataset: a damaged index is an error naming it; a stale one is replaced by a scan") {
  const auto t = make_tree("wds_index");
  const std::string out = fresh_dir("wds_index_out"), cache = fresh_dir("wds_index_cache");
  pack_image_folder(pack_options(t.root + "/train", out + "/train", cache));
  const std::string tar = out + "/train-000000.tar", idx = index_path_of(tar);
  const ShardIndex good = load_shard(tar);
  const ShardIndex scanned = scan_shard(tar);
  REQUIRE(scanned.samples.size() == good.samples.size());
  for (size_t k = 0; k < good.samples.size(); ++k) {
    CHECK(scanned.samples[k].key == good.samples[k].key);
    CHECK(scanned.samples[k].offset == good.samples[k].offset);
    CHECK(scanned.samples[k].size == good.samples[k].size);
    CHECK(scanned.samples[k].label == good.samples[k].label);
  }
  const std::string text(reinterpret_cast<const char*>(read_bytes(idx).data()), read_bytes(idx).size());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    s.replace(at, from.size(), to);
    write_bytes(idx, Bytes(s.begin(), s.end()));
  };
  with("ringtape-shard-index 2", "ringtape-shard-index 7");
  check_error([&] { load_shard(tar); }, {idx, "line 1", "version"});
  with("samples ", "samples 99999999999");
  check_error([&] { load_shard(tar); }, {idx, "line 5"});
  const std::string first_offset = " " + std::to_string(good.samples[0].offset) + " ";
  with(first_offset, " 999999999 ");
  check_error([&] { load_shard(tar); }, {idx, "outside the tar"});
  // Cut after the first sample (training reads no further than the samples).
  REQUIRE(good.samples.size() >= 2);
  const size_t samples_line_end = text.find('\n', text.find("\nsamples ") + 1);
  write_bytes(idx, Bytes(text.begin(), text.begin() + long(text.find('\n', samples_line_end + 1) + 1)));
  check_error([&] { load_shard(tar); }, {idx, "ends after"});
  // The tar changed (a different size): the index no longer describes it, scan instead.
  with("tar_bytes " + std::to_string(good.tar_bytes), "tar_bytes 5");
  CHECK(load_shard(tar).samples.size() == good.samples.size());
}

TEST_CASE("webdataset: shards from other tools, without an index: samples grouped by key, bad ones left out") {
  const std::string dir = fresh_dir("wds_foreign");
  Bytes px(24 * 16 * 3, 90);
  const Bytes jpg = encode_jpeg(px.data(), 24, 16, 90, "x");
  {
    TarWriter w(dir + "/train-000000.tar");
    auto text = [](const std::string& s) { return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()); };
    w.add("a/0001.jpg", jpg);
    w.add("a/0001.cls", text("2\n"));
    w.add("a/0002.cls", text("1"));  // no image
    w.add("a/0003.jpeg", jpg);       // no label
    w.add("a/0004.json", text("{}"));
    w.add("a/0004.jpeg", jpg);
    w.add("a/0004.cls", text(" 0 "));
    w.add("a/0005.jpg", jpg);
    w.add("a/0005.cls", text("two"));  // not a class index
    w.add("a/0006.seg.png", jpg);       // field "seg.png": not an image field
    w.add("a/0006.cls", text("1"));
    w.add("b/0007.jpg", Bytes{0xFF, 0xD8, 0xFF, 0x00});  // undecodable: the loader's business
    w.add("b/0007.cls", text("3"));
    w.finish();
  }
  const ShardIndex x = load_shard(dir + "/train-000000.tar");
  REQUIRE(x.samples.size() == 3);
  CHECK(x.skipped == 4);
  CHECK(x.samples[0].key == "a/0001");
  CHECK(x.samples[0].label == 2);
  CHECK(x.samples[1].key == "a/0004");
  CHECK(x.samples[1].field == "jpeg");
  CHECK(x.samples[1].label == 0);
  const DatasetOptions o = dataset_options(fresh_dir("wds_foreign_cache"));
  const auto ds = open_dataset("webdataset", dir, "train", o);
  CHECK(ds->num_classes() == 4);  // no summary: the largest label + 1
  Bytes out(size_t(ds->example_bytes()));
  int64_t y = -1;
  ds->get(1, 0, out.data(), &y);
  CHECK(y == 0);
  try {
    ds->get(2, 0, out.data(), &y);
    FAIL("an undecodable image must throw BadExample");
  } catch (const BadExample& e) {
    CHECK(e.source() == dir + "/train-000000.tar:b/0007.jpg");
  }
  // The loader replaces it and counts it, as for a folder.
  SamplerOptions so;
  so.shard_sizes = ds->shard_sizes();
  Loader loader(*ds, Sampler(ds->size(), 3, so), {.log_skipped = false});
  loader.start_epoch(0);
  REQUIRE(loader.next().has_value());
  CHECK(loader.skipped_in_epoch() == 1);
}
