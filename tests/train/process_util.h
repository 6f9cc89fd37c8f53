// What the tests that run the `ringtape` binary share: where Bazel put it, a fresh scratch
// directory per case, and reading a file the process wrote.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rt::test {

inline std::string ringtape_binary() {
  const char* src = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  REQUIRE_MESSAGE((src && ws), "run under bazel test (TEST_SRCDIR / TEST_WORKSPACE)");
  return std::string(src) + "/" + ws + "/cli/ringtape";
}

// $TEST_TMPDIR/<prefix><name>, emptied and created.
inline std::filesystem::path fresh_dir(const std::string& prefix, const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / (prefix + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace rt::test
