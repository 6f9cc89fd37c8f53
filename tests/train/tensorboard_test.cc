// TensorBoard events (train/tensorboard.h, Note [Events file format]) read back by a reader
// written here from the format's description, not from the writer: its own bitwise CRC-32C,
// TFRecord framing with both CRCs checked, and a protobuf decoder. Then a training run's
// scalars, and a resumed run's second file.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/flags.h"
#include "base/error.h"
#include "engine/io/json.h"
#include "train/tensorboard.h"
#include "train/train_config.h"
#include "cli/train_command.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

// ---- The independent reader.

// CRC-32C one bit at a time (the writer uses a table).
uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}

uint32_t masked(const std::string& s) {
  const uint32_t c = crc32c_bitwise(s);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

// The records' data; throws std::runtime_error naming the record and what is wrong.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> out;
  for (size_t at = 0; at < file.size();) {
    const std::string where = "record " + std::to_string(out.size()) + ": ";
    if (file.size() - at < 12) throw std::runtime_error(where + "truncated header");
    const std::string len_bytes = file.substr(at, 8);
    if (le(file, at + 8, 4) != masked(len_bytes)) throw std::runtime_error(where + "length CRC mismatch");
    const uint64_t n = le(len_bytes, 0, 8);
    if (file.size() - at - 12 < n + 4) throw std::runtime_error(where + "truncated data");
    const std::string data = file.substr(at + 12, size_t(n));
    if (le(file, at + 12 + size_t(n), 4) != masked(data)) throw std::runtime_error(where + "data CRC mismatch");
    out.push_back(data);
    at += 12 + size_t(n) + 4;
  }
  return out;
}

struct Field {
  int number, wire;
  uint64_t num = 0;   // varint, fixed64, fixed32
  std::string bytes;  // length-delimited
};

std::vector<Field> decode(const std::string& m) {
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= m.size() || shift > 63) throw std::runtime_error("bad varint");
      const uint8_t b = uint8_t(m[at++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  std::vector<Field> out;
  while (at < m.size()) {
    const uint64_t key = varint();
    Field f{int(key >> 3), int(key & 7), 0, {}};
    if (f.wire == 0) {
      f.num = varint();
    } else if (f.wire == 1 || f.wire == 5) {
      const int n = f.wire == 1 ? 8 : 4;
      if (m.size() - at < size_t(n)) throw std::runtime_error("truncated fixed field");
      f.num = le(m, at, n);
      at += size_t(n);
    } else if (f.wire == 2) {
      const uint64_t n = varint();
      if (m.size() - at < n) throw std::runtime_error("truncated bytes field");
      f.bytes = m.substr(at, size_t(n));
      at += size_t(n);
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(f.wire));
    }
    out.push_back(f);
  }
  return out;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

// An Event as tensorflow/core/util/event.proto defines it (the fields the writer uses).
Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : decode(data)) {
    if (f.number == 1 && f.wire == 1) std::memcpy(&e.wall_time, &f.num, 8);
    else if (f.number == 2 && f.wire == 0) e.step = int64_t(f.num);
    else if (f.number == 3 && f.wire == 2) e.file_version = f.bytes;
    else if (f.number == 5 && f.wire == 2)
      for (const Field& v : decode(f.bytes)) {  // Summary.value
        REQUIRE((v.number == 1 && v.wire == 2));
        std::pair<std::string, float> tv;
        for (const Field& x : decode(v.bytes)) {
          if (x.number == 1 && x.wire == 2) tv.first = x.bytes;
          if (x.number == 2 && x.wire == 5) {
            const uint32_t bits = uint32_t(x.num);
            std::memcpy(&tv.second, &bits, 4);
          }
        }
        e.values.push_back(tv);
      }
    else FAIL("unexpected Event field ", f.number, " of wire type ", f.wire);
  }
  return e;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every event of the file; the first must be the version header.
std::vector<Event> read_events(const fs::path& p) {
  std::vector<Event> out;
  for (const std::string& r : read_records(read(p))) out.push_back(decode_event(r));
  REQUIRE(!out.empty());
  CHECK(out[0].file_version == "brain.Event:2");
  CHECK(out[0].values.empty());
  return out;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

fs::path tmpdir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("tensorboard_test_" + name);
  fs::remove_all(p);
  return p;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- The writer.

TEST_CASE("crc32c: the check value and RFC 3720's vectors; the table agrees with the bitwise CRC") {
  CHECK(train::crc32c("123456789", 9) == 0xE3069283u);
  CHECK(train::crc32c("", 0) == 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(train::crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(train::crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(train::crc32c("56789", 5, train::crc32c("1234", 4)) == 0xE3069283u);  // continued
  std::mt19937 rng(7);
  for (size_t n : {size_t(1), size_t(7), size_t(64), size_t(1000)}) {
    std::string s(n, '\0');
    for (char& c : s) c = char(rng());
    CHECK(train::crc32c(s.data(), n) == crc32c_bitwise(s));
    CHECK(train::masked_crc32c(s.data(), n) == masked(s));
  }
}

TEST_CASE("the events file reads back: the version, then one event per scalar") {
  const fs::path dir = tmpdir("scalars") / "nested";  // created with its parents
  const double t0 = std::floor(now_s());
  std::string path;
  const std::string long_tag = "train/" + std::string(200, 'x');  // a length of two varint bytes
  {
    train::TensorBoardWriter w(dir.string());
    path = w.path();
    w.scalar("train/loss", 1, 2.25);
    w.scalar("train/lr", 300, 0.1);  // a step of two varint bytes
    w.scalar(long_tag, int64_t(1) << 40, -1e-3);
    w.scalar("eval/loss", 0, NAN);
    // Flushed at each write: a reader sees every event while the writer is open.
    CHECK(read_events(path).size() == 5);
  }
  // events.out.tfevents.<unix-time>.<hostname>
  const std::string name = fs::path(path).filename().string();
  REQUIRE(name.rfind("events.out.tfevents.", 0) == 0);
  const std::string rest = name.substr(20);
  const double t_name = std::stod(rest.substr(0, rest.find('.')));
  CHECK(t_name >= t0);
  CHECK(t_name <= now_s());
  CHECK(rest.size() > rest.find('.') + 1);  // a host name follows
  CHECK(fs::path(path).parent_path() == dir);

  const std::vector<Event> e = read_events(path);
  REQUIRE(e.size() == 5);
  for (const Event& x : e) {
    CHECK(x.wall_time >= t0);
    CHECK(x.wall_time <= now_s());
  }
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"train/loss", 1}, {"train/lr", 300}, {long_tag, int64_t(1) << 40}, {"eval/loss", 0}};
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    REQUIRE(e[i + 1].values.size() == 1);
    CHECK(e[i + 1].values[0].first == want[i].first);
    CHECK(e[i + 1].step == want[i].second);
  }
  CHECK(e[1].values[0].second == 2.25f);
  CHECK(e[2].values[0].second == 0.1f);
  CHECK(e[3].values[0].second == -1e-3f);
  CHECK(std::isnan(e[4].values[0].second));
}

TEST_CASE("a corrupted byte, a damaged length or a cut file fails the reader's checks") {
  const fs::path dir = tmpdir("corrupt");
  std::string path;
  {
    train::TensorBoardWriter w(dir.string());
    path = w.path();
    w.scalar("train/loss", 7, 1.5);
  }
  const std::string good = read(path);
  REQUIRE(read_records(good).size() == 2);
  const size_t second = 12 + size_t(le(good, 0, 8)) + 4;  // where the scalar's record starts
  std::string bad = good;
  bad[second + 12 + 3] ^= 0x01;  // a byte of the scalar event's data
  CHECK_THROWS_WITH_AS(read_records(bad), "record 1: data CRC mismatch", std::runtime_error);
  bad = good;
  bad[bad.size() - 1] ^= 0x80;  // the data CRC itself
  CHECK_THROWS_WITH_AS(read_records(bad), "record 1: data CRC mismatch", std::runtime_error);
  bad = good;
  bad[second] ^= 0x04;  // the length
  CHECK_THROWS_WITH_AS(read_records(bad), "record 1: length CRC mismatch", std::runtime_error);
  CHECK_THROWS_WITH_AS(read_records(good.substr(0, good.size() - 2)), "record 1: truncated data",
                       std::runtime_error);
  // And the writer's own framing helper frames the same way.
  CHECK(good.substr(second) == train::tfrecord(read_records(good)[1]));
}

TEST_CASE("two writers in one directory in the same second get two files") {
  const fs::path dir = tmpdir("two");
  train::TensorBoardWriter a(dir.string()), b(dir.string());
  CHECK(a.path() != b.path());
  CHECK(event_files(dir).size() == 2);
}

TEST_CASE("a directory that cannot be made is an error naming it and the flag") {
  const fs::path file = tmpdir("blocked");
  std::ofstream(file) << "a file, not a directory";
  CHECK_THROWS_WITH_AS(train::TensorBoardWriter((file / "tb").string()),
                       doctest::Contains("cannot create the TensorBoard directory"), Error);
  CHECK_THROWS_WITH_AS(train::TensorBoardWriter((file / "tb").string()), doctest::Contains("--tensorboard-dir"),
                       Error);
}

// ---- Through training.

// 64 synthetic 1x8x8 images, batch 8: 8 steps per epoch, a line per step.
int train(const fs::path& out, std::vector<std::string> more) {
  std::vector<std::string> args = {"--dataset", "synthetic", "--synthetic-size", "64x1x8x8", "--num-classes", "4",
                                   "--width", "4", "--batch-size", "8", "--epochs", "2", "--print-freq", "1",
                                   "--workers", "0", "--device", "cpu", "--output-dir", out.string()};
  args.insert(args.end(), more.begin(), more.end());
  cli::Flags f(cli::train_flags());
  f.parse(args);
  return cli::run_train(f);
}

// tag -> step -> value, over the files' scalar events.
std::map<std::string, std::map<int64_t, float>> scalars(const std::vector<fs::path>& files) {
  std::map<std::string, std::map<int64_t, float>> out;
  for (const fs::path& p : files)
    for (const Event& e : read_events(p))
      for (const auto& [tag, v] : e.values) {
        CHECK_MESSAGE(!out[tag].count(e.step), tag, " twice at step ", e.step);
        out[tag][e.step] = v;
      }
  return out;
}

TEST_CASE("--tensorboard: a run's training and evaluation scalars; a resumed run adds a file") {
  const fs::path out = tmpdir("run");
  REQUIRE(train(out, {"--tensorboard", "--steps", "5"}) == 0);
  REQUIRE(event_files(out / "tensorboard").size() == 1);
  REQUIRE(train(out, {"--tensorboard", "--resume", (out / "checkpoint.safetensors").string()}) == 0);
  const std::vector<fs::path> files = event_files(out / "tensorboard");
  REQUIRE(files.size() == 2);

  // The same numbers as metrics.jsonl, at the same steps.
  auto tb = scalars(files);
  std::istringstream metrics(read(out / "metrics.jsonl"));
  int train_records = 0, eval_records = 0;
  for (std::string line; std::getline(metrics, line);) {
    const json::Value m = json::parse(line);
    const int64_t step = m.find("step")->as_int();
    const std::string type = m.find("type")->as_string();
    if (type == "memory") continue;  // per-epoch memory records have no TensorBoard scalars
    const std::vector<std::pair<std::string, std::string>> keys =
        type == "train" ? std::vector<std::pair<std::string, std::string>>{{"train/loss", "loss"},
                                                                           {"train/lr", "lr"},
                                                                           {"train/img_per_s", "img_per_s"}}
                        : std::vector<std::pair<std::string, std::string>>{
                              {"eval/loss", "loss"}, {"eval/top1", "top1"}, {"eval/top5", "top5"}};
    (type == "train" ? train_records : eval_records)++;
    for (const auto& [tag, key] : keys) {
      CAPTURE(tag);
      CAPTURE(step);
      REQUIRE(tb[tag].count(step));
      CHECK(tb[tag][step] == float(m.find(key)->as_double()));
    }
  }
  CHECK(train_records == 16);
  CHECK(eval_records == 2);
  CHECK(tb["train/loss"].size() == 16);
  CHECK(tb["train/loss"].begin()->first == 1);
  CHECK(tb["train/loss"].rbegin()->first == 16);
  CHECK(tb["eval/top1"].size() == 2);
  CHECK(tb["eval/top1"].count(8));  // the global step at the epoch's end
  CHECK(tb.size() == 6);
}

TEST_CASE("--tensorboard-dir puts the events there; without --tensorboard it is refused") {
  const fs::path out = tmpdir("dir"), tb = tmpdir("dir_events");
  REQUIRE(train(out, {"--tensorboard", "--tensorboard-dir", tb.string(), "--steps", "2"}) == 0);
  CHECK(event_files(tb).size() == 1);
  CHECK_FALSE(fs::exists(out / "tensorboard"));
  CHECK(scalars(event_files(tb))["train/loss"].size() == 2);
  // No --tensorboard: no events; --tensorboard-dir alone is a usage error naming both flags.
  const fs::path plain = tmpdir("plain");
  REQUIRE(train(plain, {"--steps", "1"}) == 0);
  CHECK_FALSE(fs::exists(plain / "tensorboard"));
  cli::Flags f(cli::train_flags());
  f.parse({"--tensorboard-dir", tb.string()});
  CHECK_THROWS_WITH_AS(cli::parse_train_config(f), "--tensorboard-dir applies to --tensorboard, which is not given",
                       UsageError);
}

}  // namespace
}  // namespace rt
