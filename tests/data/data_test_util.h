// Helpers for the data tests: scratch folders, writing bytes (plain or gzip), and
// checking that an rt::Error's message names what the user needs.
#pragma once

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

namespace rt::data::test {

// A fresh, empty folder under the test's scratch space.
inline std::string fresh_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(base ? base : fs::temp_directory_path().string()) / ("data_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

using Bytes = std::vector<uint8_t>;

inline void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  REQUIRE(out.good());
}

inline Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, b.data(), unsigned(b.size())) == int(b.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

// An idx file of unsigned bytes: magic 0,0,8,ndim, big-endian dims, then `data`.
inline Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b = {0, 0, 0x08, uint8_t(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// The message of the rt::Error that f throws ("<no error>" when it returns).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rt::Error& e) {
    return e.what();
  }
  return "<no error>";
}

// f must throw an rt::Error whose message contains every one of `parts`.
inline void check_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string msg = error_of(f);
  for (const std::string& p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, "'", p, "' missing from: ", msg);
}

}  // namespace rt::data::test
