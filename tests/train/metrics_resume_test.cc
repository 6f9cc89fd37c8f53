// set_aside_redone_records (Note [Metrics of a resumed run] in train/metrics.h): the records a
// resumed run writes again leave metrics.jsonl for logs/metrics-replaced.jsonl, nothing else
// moves, and nothing is lost.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "train/metrics.h"

namespace rt::train {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path fresh(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path d = fs::path(tmp ? tmp : "/tmp") / ("metrics_resume_test_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const char* kRecords =
    "{\"type\":\"train\",\"epoch\":0,\"step\":2,\"loss\":1.5}\n"
    "{\"type\":\"train\",\"epoch\":0,\"step\":4,\"loss\":1.4}\n"
    "{\"type\":\"eval\",\"epoch\":0,\"step\":4,\"top1\":20}\n"
    "{\"type\":\"memory\",\"epoch\":0,\"step\":4,\"rank\":0}\n"
    "{\"type\":\"train\",\"epoch\":1,\"step\":6,\"loss\":1.3}\n"
    "{\"type\":\"straggler\",\"epoch\":1,\"step\":6,\"message\":\"rank 1 ...\"}\n"
    "{\"type\":\"restart\",\"round\":1,\"cause\":\"x\",\"epoch\":1,\"step\":6}\n"
    "{\"type\":\"train\",\"epoch\":1,\"step\":8,\"loss\":1.2}\n"
    "{\"type\":\"train\",\"epoch\":1,\"st";  // a torn last line: kept as it is

TEST_CASE("resumed within epoch 1 at step 6: later steps move, the epoch-0 evaluation stays") {
  const fs::path d = fresh("mid");
  std::ofstream(d / "metrics.jsonl") << kRecords;
  CHECK(set_aside_redone_records((d / "metrics.jsonl").string(), (d / "replaced.jsonl").string(), 1, 6) == 1);
  const std::string kept = read(d / "metrics.jsonl"), moved = read(d / "replaced.jsonl");
  CHECK(moved == "{\"type\":\"train\",\"epoch\":1,\"step\":8,\"loss\":1.2}\n");
  CHECK(kept.find("\"step\":8") == std::string::npos);
  CHECK(kept.find("{\"type\":\"eval\",\"epoch\":0,\"step\":4") != std::string::npos);
  CHECK(kept.find("{\"type\":\"restart\"") != std::string::npos);
  CHECK(kept.find("{\"type\":\"train\",\"epoch\":1,\"st\n") != std::string::npos);
}

TEST_CASE("resumed at step 4 before epoch 0's evaluation: that evaluation is redone, so it moves too") {
  const fs::path d = fresh("boundary");
  std::ofstream(d / "metrics.jsonl") << kRecords;
  // The checkpoint of --checkpoint-every at the epoch's last step: epoch 0, step 4.
  CHECK(set_aside_redone_records((d / "metrics.jsonl").string(), (d / "replaced.jsonl").string(), 0, 4) == 5);
  const std::string kept = read(d / "metrics.jsonl"), moved = read(d / "replaced.jsonl");
  CHECK(kept.find("{\"type\":\"train\",\"epoch\":0,\"step\":4") != std::string::npos);
  CHECK(moved.find("{\"type\":\"eval\",\"epoch\":0,\"step\":4") != std::string::npos);
  CHECK(moved.find("{\"type\":\"memory\",\"epoch\":0") != std::string::npos);
  CHECK(moved.find("\"type\":\"straggler\"") != std::string::npos);
  CHECK(kept.find("{\"type\":\"restart\"") != std::string::npos);
  // A second resume appends to what was moved before.
  CHECK(set_aside_redone_records((d / "metrics.jsonl").string(), (d / "replaced.jsonl").string(), 0, 2) == 1);
  CHECK(read(d / "replaced.jsonl").find("{\"type\":\"train\",\"epoch\":0,\"step\":4") != std::string::npos);
  CHECK(read(d / "replaced.jsonl").find("{\"type\":\"eval\"") != std::string::npos);
}

TEST_CASE("from the start every stepped record moves; no file, nothing to do") {
  const fs::path d = fresh("start");
  std::ofstream(d / "metrics.jsonl") << kRecords;
  CHECK(set_aside_redone_records((d / "metrics.jsonl").string(), (d / "replaced.jsonl").string(), 0, 0) == 7);
  CHECK(read(d / "metrics.jsonl").find("{\"type\":\"restart\"") != std::string::npos);
  CHECK(set_aside_redone_records((d / "none.jsonl").string(), (d / "r.jsonl").string(), 0, 0) == 0);
  CHECK_FALSE(fs::exists(d / "r.jsonl"));
}

}  // namespace
}  // namespace rt::train
