// `ringtape pack` refusing to write wrong data: resuming over shards of another or a changed
// tree (Note [Resumable pack]), two packs at one output (Note [Pack output lock]), file names
// that WebDataset's key rule would merge (Note [Pack keys]), outputs inside the input or
// naming a folder, a dataset root given as the split, empty class folders, keys with dots in
// foreign tars, and the decoded-pixel limit. webdataset_test.cc covers the round trip.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/codecs/jpeg_encode.h"
#include "data/pack/pack.h"
#include "data/formats/shard_index.h"
#include "data/formats/tar.h"
#include "engine/io/json.h"
#include "engine/random.h"
#include "tests/data/data_test_util.h"

using namespace rt::data;
using rt::data::test::Bytes;
using rt::data::test::check_error;
using rt::data::test::error_of;
using rt::data::test::fresh_dir;
using rt::data::test::read_bytes;
using rt::data::test::write_bytes;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kShardBytes = 64 << 10;  // the smallest pack accepts: ~2 noise photos a shard

// A noise photo (~30 KB at 160x120): poorly compressible, so a dozen make several shards.
Bytes noise_jpeg(int w, int h, uint64_t seed) {
  rt::Generator g(seed);
  Bytes px(size_t(w) * size_t(h) * 3);
  for (uint8_t& v : px) v = uint8_t(g.randint(0, 256));
  return encode_jpeg(px.data(), w, h, 90, "noise");
}

void put(const std::string& path, const Bytes& b) {
  fs::create_directories(fs::path(path).parent_path());
  write_bytes(path, b);
}

// DIR/<class>/<stem><k>.jpg for k < per_class, photos seeded by their position.
std::string make_tree(const std::string& name, const std::vector<std::string>& classes, int per_class,
                      const std::string& stem = "p") {
  const std::string dir = fresh_dir(name) + "/train";
  uint64_t seed = 1;
  for (const std::string& c : classes)
    for (int k = 0; k < per_class; ++k) put(dir + "/" + c + "/" + stem + std::to_string(k) + ".jpg",
                                            noise_jpeg(160, 120, seed++));
  return dir;
}

PackOptions options(const std::string& data, const std::string& out, const std::string& cache) {
  PackOptions o;
  o.data_path = data;
  o.output = out;
  o.shard_bytes = kShardBytes;
  o.workers = 2;
  o.progress = false;
  o.cache_dir = cache;
  return o;
}

std::vector<Bytes> files_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  std::vector<Bytes> out;
  for (const auto& n : names) out.push_back(read_bytes(n));
  return out;
}

std::string shard(const std::string& prefix, int64_t k) {
  char num[32];
  std::snprintf(num, sizeof num, "-%06lld.tar", (long long)k);
  return prefix + num;
}

// An interruption after `kept` finished shards: the later ones and the summary gone.
void interrupt(const std::string& prefix, int64_t kept, int64_t shards) {
  for (int64_t k = kept; k < shards; ++k) {
    fs::remove(shard(prefix, k));
    fs::remove(index_path_of(shard(prefix, k)));
  }
  fs::remove(prefix + ".json");
}

// The relative paths (in the tree) of a shard's samples, from its .json members.
std::vector<std::string> paths_in(const std::string& tar) {
  const RandomAccessFile f(tar);
  std::vector<std::string> out;
  for (const TarMember& m : list_tar(f)) {
    if (split_member_name(m.name).second != "json") continue;
    Bytes b(size_t(m.size));
    f.read_exact(m.data_offset, b);
    out.push_back(rt::json::parse(std::string(b.begin(), b.end())).find("path")->as_string());
  }
  if (out.empty())  // a pack before .json members: the key is the path (these trees' names have no dots)
    for (const ShardSample& s : load_shard(tar).samples) out.push_back(s.key + ".jpg");
  return out;
}

// What f wrote on stderr.
std::string stderr_of(const std::function<void()>& f) {
  const std::string path = fresh_dir("pack_stderr") + "/err.txt";
  std::fflush(stderr);
  const int saved = ::dup(2), fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE((saved >= 0 && fd >= 0));
  ::dup2(fd, 2);
  ::close(fd);
  try {
    f();
  } catch (...) {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  const Bytes b = read_bytes(path);
  return std::string(b.begin(), b.end());
}

// The message of any exception f throws (rt::Error or rt::UsageError).
std::string any_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

const std::vector<std::string> kClasses = {"c0", "c1", "c2"};

}  // namespace

TEST_CASE("pack resume: another tree with the same file count is refused, its shards kept") {
  const std::string cache = fresh_dir("pack_other_cache"), out = fresh_dir("pack_other_out") + "/train";
  const std::string a = make_tree("pack_other_a", kClasses, 4);
  const std::string b = make_tree("pack_other_b", {"d0", "d1", "d2"}, 4, "q");
  const PackResult first = pack_image_folder(options(a, out, cache));
  REQUIRE(first.shards >= 3);
  const auto before = files_of(fs::path(out).parent_path().string());
  check_error([&] { pack_image_folder(options(b, out, cache)); },
              {"cannot resume", "train-000000.tar", "rm -f ", "train-*.tar", "another --output"});
  CHECK(files_of(fs::path(out).parent_path().string()) == before);
}

TEST_CASE("pack resume: a photo moved to another class folder is refused, naming it") {
  const std::string cache = fresh_dir("pack_move_cache"), out = fresh_dir("pack_move_out") + "/train";
  const std::string t = make_tree("pack_move", kClasses, 4);
  pack_image_folder(options(t, out, cache));
  const std::string moved = paths_in(shard(out, 0)).front();  // in the first shard
  const std::string to = (moved.rfind("c0/", 0) == 0 ? "c1/moved_" : "c0/moved_") + fs::path(moved).filename().string();
  fs::rename(t + "/" + moved, t + "/" + to);
  check_error([&] { pack_image_folder(options(t, out, cache)); },
              {"cannot resume", "'" + moved + "'", "missing", "train-000000.tar", "rm -f "});
}

TEST_CASE("pack resume: two files renamed after an interruption are refused") {
  const std::string cache = fresh_dir("pack_rename_cache"), out = fresh_dir("pack_rename_out") + "/train";
  const std::string t = make_tree("pack_rename", kClasses, 4);
  const PackResult first = pack_image_folder(options(t, out, cache));
  interrupt(out, 1, first.shards);
  const std::vector<std::string> in0 = paths_in(shard(out, 0));
  REQUIRE(in0.size() >= 2);
  for (size_t k = 0; k < 2; ++k) fs::rename(t + "/" + in0[k], t + "/" + in0[k] + "_renamed.jpg");
  check_error([&] { pack_image_folder(options(t, out, cache)); },
              {"cannot resume", "'" + in0[0] + "'", "train-000000.tar", "rm -f "});
  CHECK(!fs::exists(out + ".json"));
}

TEST_CASE("pack resume: a touched file is no change, edited bytes are") {
  const std::string cache = fresh_dir("pack_touch_cache"), out = fresh_dir("pack_touch_out") + "/train";
  const std::string t = make_tree("pack_touch", kClasses, 4);
  const PackResult first = pack_image_folder(options(t, out, cache));
  const auto before = files_of(fs::path(out).parent_path().string());
  const std::string f = t + "/" + paths_in(shard(out, 0)).front();
  fs::last_write_time(f, fs::last_write_time(f) + std::chrono::seconds(30));
  const PackResult again = pack_image_folder(options(t, out, cache));
  CHECK(again.resumed_shards == first.shards);
  CHECK(files_of(fs::path(out).parent_path().string()) == before);
  Bytes b = read_bytes(f);
  b[b.size() / 2] ^= 0x10;  // same size, other bytes
  write_bytes(f, b);
  check_error([&] { pack_image_folder(options(t, out, cache)); },
              {"cannot resume", "content", paths_in(shard(out, 0)).front(), "rm -f "});
}

TEST_CASE("pack resume: a class folder added (labels shift) is refused") {
  const std::string cache = fresh_dir("pack_cls_cache"), out = fresh_dir("pack_cls_out") + "/train";
  const std::string t = make_tree("pack_cls", kClasses, 4);
  pack_image_folder(options(t, out, cache));
  fs::create_directories(t + "/a_new");  // sorts first: every label moves up by one
  check_error([&] { pack_image_folder(options(t, out, cache)); }, {"cannot resume", "class", "a_new", "rm -f "});
}

TEST_CASE("pack resume: a version 1 index is read for training, refused for resuming") {
  const std::string cache = fresh_dir("pack_v1_cache"), out = fresh_dir("pack_v1_out") + "/train";
  const std::string t = make_tree("pack_v1", kClasses, 4);
  pack_image_folder(options(t, out, cache));
  const std::string tar = shard(out, 0);
  ShardIndex x;
  REQUIRE(read_shard_index(tar, int64_t(fs::file_size(tar)), &x));
  std::string v1 = "ringtape-shard-index 1\ntar_bytes " + std::to_string(x.tar_bytes) + "\nsource " +
                   std::to_string(x.source_first) + " " + std::to_string(x.source_end) + "\noptions " + x.options +
                   "\nsamples " + std::to_string(x.samples.size()) + "\n";
  for (const ShardSample& s : x.samples)
    v1 += s.key + " " + s.field + " " + std::to_string(s.offset) + " " + std::to_string(s.size) + " " +
          std::to_string(s.label) + "\n";
  write_bytes(index_path_of(tar), Bytes(v1.begin(), v1.end()));
  ShardIndex y;
  REQUIRE(read_shard_index(tar, x.tar_bytes, &y));
  REQUIRE(y.samples.size() == x.samples.size());
  for (size_t k = 0; k < x.samples.size(); ++k) {
    CHECK(y.samples[k].key == x.samples[k].key);
    CHECK(y.samples[k].offset == x.samples[k].offset);
    CHECK(y.samples[k].label == x.samples[k].label);
  }
  check_error([&] { pack_image_folder(options(t, out, cache)); },
              {"cannot resume", "version 1", "train-000000.tar", "rm -f "});
}

TEST_CASE("pack lock: a held OUTPUT.lock refuses a second pack, naming the holder") {
  const std::string cache = fresh_dir("pack_lock_cache"), dir = fresh_dir("pack_lock_out");
  const std::string t = make_tree("pack_lock", kClasses, 2);
  const int fd = ::open((dir + "/train.lock").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string holder = "otherhost 4242\n";
  REQUIRE(::write(fd, holder.data(), holder.size()) == ssize_t(holder.size()));
  check_error([&] { pack_image_folder(options(t, dir + "/train", cache)); },
              {"otherhost", "4242", "wait", "stop"});
  CHECK(!fs::exists(shard(dir + "/train", 0)));
  ::close(fd);  // released: the pack goes ahead
  CHECK(pack_image_folder(options(t, dir + "/train", cache)).packed == 6);
}

// A pack in a child process; its error message ("<no error>" when none) in DIR/childC.txt.
pid_t pack_in_child(const std::string& tree, const std::string& dir, const std::string& cache, int c) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    PackOptions o = options(tree, dir + "/train", cache + std::to_string(c));
    o.workers = 1;
    o.max_side = 64;  // re-encoded on one thread: the first pack runs for a while
    const std::string msg = error_of([&] { pack_image_folder(o); });
    write_bytes(dir + "/child" + std::to_string(c) + ".txt", Bytes(msg.begin(), msg.end()));
    ::_exit(msg == "<no error>" ? 0 : 1);
  }
  return pid;
}

// Two processes at one output: the second starts once the first holds the lock (its pid is
// in OUTPUT.lock) and must refuse, naming it; the first's output is whole. When the first
// finished before the second reached the lock (a loaded machine), the second rightly resumes
// its shards and the round is run again.
TEST_CASE("pack lock: of two packs racing to one output, the second refuses, naming the first") {
  const std::string cache = fresh_dir("pack_race_cache");
  const std::string t = make_tree("pack_race", kClasses, 12);
  bool raced = false;
  for (int round = 0; round < 4 && !raced; ++round) {
    CAPTURE(round);
    const std::string dir = fresh_dir("pack_race_out" + std::to_string(round));
    const pid_t first = pack_in_child(t, dir, cache, 0);
    // Wait until the first holds the lock: it writes "host pid" there after locking.
    const std::string mark = " " + std::to_string(first) + "\n";
    bool locked = false;
    for (int k = 0; k < 20000 && !locked; ++k) {
      std::error_code ec;
      if (fs::exists(dir + "/train.lock", ec)) {
        const Bytes b = read_bytes(dir + "/train.lock");
        locked = std::string(b.begin(), b.end()).find(mark) != std::string::npos;
      }
      if (!locked) std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    REQUIRE(locked);
    const pid_t second = pack_in_child(t, dir, cache, 1);
    int status[2] = {0, 0};
    REQUIRE(::waitpid(first, &status[0], 0) == first);
    REQUIRE(::waitpid(second, &status[1], 0) == second);
    REQUIRE(WIFEXITED(status[0]));
    REQUIRE(WIFEXITED(status[1]));
    const Bytes m0 = read_bytes(dir + "/child0.txt"), m1 = read_bytes(dir + "/child1.txt");
    CHECK_MESSAGE(WEXITSTATUS(status[0]) == 0, std::string(m0.begin(), m0.end()));
    // Whatever the timing, the output is the first pack's, whole: the summary's count is
    // the shards' and every shard's index matches its tar.
    const Bytes j = read_bytes(dir + "/train.json");
    const rt::json::Value v = rt::json::parse(std::string(j.begin(), j.end()));
    int64_t samples = 0;
    for (int64_t k = 0; fs::exists(shard(dir + "/train", k)); ++k) {
      ShardIndex x;
      REQUIRE(read_shard_index(shard(dir + "/train", k), int64_t(fs::file_size(shard(dir + "/train", k))), &x));
      CHECK(x.samples.size() == scan_shard(shard(dir + "/train", k)).samples.size());
      samples += int64_t(x.samples.size());
    }
    CHECK(samples == v.find("num_samples")->as_int());
    CHECK(samples == int64_t(kClasses.size()) * 12);
    if (WEXITSTATUS(status[1]) == 0) continue;  // the first had finished: no race this round
    raced = true;
    const std::string refused(m1.begin(), m1.end());
    CHECK_MESSAGE(refused.find("is being written by another pack") != std::string::npos, refused);
    CHECK_MESSAGE(refused.find(mark.substr(0, mark.size() - 1)) != std::string::npos, refused);
  }
  CHECK_MESSAGE(raced, "the first pack always finished before the second started; nothing was tested");
}

TEST_CASE("pack keys: names differing in '.', '_' or ' ' stay distinct samples, their paths kept") {
  const std::string cache = fresh_dir("pack_keys_cache"), out = fresh_dir("pack_keys_out") + "/train";
  const std::string t = fresh_dir("pack_keys") + "/train";
  const std::set<std::string> rels = {"c0/img.1.JPEG", "c0/img_1.JPEG", "c0/img 1.JPEG", "c1/100%.jpg"};
  uint64_t seed = 1;
  for (const std::string& r : rels) put(t + "/" + r, noise_jpeg(40, 30, seed++));
  const PackResult r = pack_image_folder(options(t, out, cache));
  CHECK(r.packed == 4);
  // As WebDataset groups members: consecutive members sharing a key.
  const RandomAccessFile f(shard(out, 0));
  std::map<std::string, std::set<std::string>> fields;
  std::string last;
  for (const TarMember& m : list_tar(f)) {
    const auto [key, field] = split_member_name(m.name);
    CHECK_MESSAGE((key == last || fields.count(key) == 0), "key '", key, "' is not one run of members");
    CHECK(key.find_first_of(". \t") == std::string::npos);
    fields[key].insert(field);
    last = key;
  }
  CHECK(fields.size() == 4);
  for (const auto& [key, fs_] : fields) CHECK(fs_ == std::set<std::string>{"cls", "jpg", "json"});
  const std::vector<std::string> paths = paths_in(shard(out, 0));
  CHECK(std::set<std::string>(paths.begin(), paths.end()) == rels);
  const ShardIndex x = load_shard(shard(out, 0));
  std::set<std::string> keys;
  for (const ShardSample& s : x.samples) keys.insert(s.key);
  CHECK(keys.size() == 4);
}

TEST_CASE("pack keys: two files differing only in their extension are refused, naming both") {
  const std::string cache = fresh_dir("pack_ext_cache"), out = fresh_dir("pack_ext_out") + "/train";
  const std::string t = fresh_dir("pack_ext") + "/train";
  put(t + "/c0/x.jpg", noise_jpeg(40, 30, 1));
  put(t + "/c0/x.jpeg", noise_jpeg(40, 30, 2));
  check_error([&] { pack_image_folder(options(t, out, cache)); }, {"c0/x.jpg", "c0/x.jpeg", "rename"});
}

TEST_CASE("pack: empty class folders keep their labels, with a warning") {
  const std::string cache = fresh_dir("pack_empty_cache"), out = fresh_dir("pack_empty_out") + "/train";
  const std::string t = make_tree("pack_empty", {"c0", "c2"}, 2);
  fs::create_directories(t + "/c1");
  const std::string err = stderr_of([&] { pack_image_folder(options(t, out, cache)); });
  CHECK_MESSAGE(err.find("c1") != std::string::npos, err);
  CHECK_MESSAGE(err.find("no images") != std::string::npos, err);
  CHECK_MESSAGE(err.find("keep") != std::string::npos, err);
  const Bytes j = read_bytes(out + ".json");
  const rt::json::Value v = rt::json::parse(std::string(j.begin(), j.end()));
  CHECK(v.find("classes")->as_array().size() == 3);
}

TEST_CASE("pack: an output inside the input folder is refused before anything is created") {
  const std::string cache = fresh_dir("pack_inside_cache");
  const std::string t = make_tree("pack_inside", kClasses, 1);
  check_error([&] { pack_image_folder(options(t, t + "/shards/train", cache)); },
              {"inside", t, "--output"});
  CHECK(!fs::exists(t + "/shards"));
  check_error([&] { pack_image_folder(options(t, t + "/train", cache)); }, {"inside", "--output"});
}

TEST_CASE("pack: a dataset root holding train/ and val/ is refused with the split paths") {
  const std::string cache = fresh_dir("pack_root_cache"), out = fresh_dir("pack_root_out") + "/train";
  const std::string root = fresh_dir("pack_root");
  put(root + "/train/c0/a.jpg", noise_jpeg(40, 30, 1));
  put(root + "/val/c0/b.jpg", noise_jpeg(40, 30, 2));
  check_error([&] { pack_image_folder(options(root, out, cache)); },
              {"--data-path " + root + "/train", "--data-path " + root + "/val"});
}

TEST_CASE("pack: an output naming a folder means that folder plus the split's prefix") {
  const std::string cache = fresh_dir("pack_dir_cache");
  const std::string t = make_tree("pack_dir", kClasses, 1);
  const std::string o1 = fresh_dir("pack_dir_o1"), o2 = fresh_dir("pack_dir_o2");
  pack_image_folder(options(t, o1 + "/sub/", cache));
  CHECK(fs::exists(o1 + "/sub/train-000000.tar"));
  CHECK(fs::exists(o1 + "/sub/train.json"));
  CHECK(!fs::exists(o1 + "/sub/-000000.tar"));
  CHECK(!fs::exists(o1 + "/sub/.json"));
  pack_image_folder(options(t, o2, cache));  // an existing folder, no slash
  CHECK(fs::exists(o2 + "/train-000000.tar"));
  // Not a split name: an explicit prefix is needed.
  const std::string photos = fresh_dir("pack_dir_photos") + "/photos";
  put(photos + "/c0/a.jpg", noise_jpeg(40, 30, 1));
  const std::string msg = any_error_of([&] { pack_image_folder(options(photos, o1 + "/p/", cache)); });
  CHECK_MESSAGE(msg.find("prefix") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("/train") != std::string::npos, msg);
  CHECK(!fs::exists(o1 + "/p/-000000.tar"));
  // A folder that cannot be created: the reason.
  write_bytes(o1 + "/file", Bytes(3, 1));
  check_error([&] { pack_image_folder(options(t, o1 + "/file/sub/train", cache)); },
              {"cannot create the output folder", "Not a directory"});
}

TEST_CASE("scan_shard: keys with dots (another tool's tar) are explained") {
  const std::string dir = fresh_dir("pack_dots");
  {
    TarWriter w(dir + "/x-000000.tar");
    const Bytes img = noise_jpeg(16, 16, 1), cls = {'3'};
    w.add("a/img.1.jpg", img);
    w.add("a/img.1.cls", cls);
    w.finish();
  }
  ShardIndex x;
  const std::string err = stderr_of([&] { x = scan_shard(dir + "/x-000000.tar"); });
  CHECK(x.samples.empty());
  CHECK_MESSAGE(err.find("'1.jpg'") != std::string::npos, err);
  CHECK_MESSAGE(err.find("first dot") != std::string::npos, err);
  CHECK_MESSAGE(err.find("must not put dots in keys") != std::string::npos, err);
}

TEST_CASE("pack: an image over --max-image-pixels is skipped unread, named") {
  const std::string cache = fresh_dir("pack_px_cache"), out = fresh_dir("pack_px_out") + "/train";
  const std::string t = make_tree("pack_px", {"c0"}, 3);  // 160x120 = 19200 pixels each
  put(t + "/c0/big.jpg", noise_jpeg(200, 150, 9));        // 30000 pixels
  PackOptions o = options(t, out, cache);
  o.max_image_pixels = 20000;
  PackResult r;
  const std::string err = stderr_of([&] { r = pack_image_folder(o); });
  CHECK(r.packed == 3);
  CHECK(r.skipped == 1);
  CHECK_MESSAGE(err.find("big.jpg") != std::string::npos, err);
  CHECK_MESSAGE(err.find("--max-image-pixels") != std::string::npos, err);
  o.max_image_pixels = 0;  // no limit
  const std::string out2 = fresh_dir("pack_px_out2") + "/train";
  o.output = out2;
  CHECK(pack_image_folder(o).packed == 4);
}
