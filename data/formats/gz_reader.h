// Sequential file reading through zlib, which decompresses gzip files and passes other
// files through unchanged: one code path reads both "x.gz" and an unpacked "x".
#pragma once

#include <cstddef>
#include <string>

namespace rt::data {

class GzReader {
 public:
  // Throws rt::Error naming the path and the system's reason when it cannot be opened.
  explicit GzReader(const std::string& path);
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on corrupt or truncated
  // gzip data (zlib checks the stream structure and the CRC at its end).
  size_t read(void* dst, size_t n);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* file_;  // gzFile, kept opaque so users need not include zlib.h
};

}  // namespace rt::data
