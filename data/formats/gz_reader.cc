#include "data/formats/gz_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "base/error.h"

namespace rt::data {

GzReader::GzReader(const std::string& path) : path_(path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  RT_CHECK(f != nullptr, "cannot open '", path, "': ", errno ? std::strerror(errno) : "out of memory");
  // zlib's default 8 KiB buffer makes a 26 MB read take thousands of system calls.
  gzbuffer(f, 1 << 18);
  file_ = f;
}

GzReader::~GzReader() { gzclose_r(static_cast<gzFile>(file_)); }

size_t GzReader::read(void* dst, size_t n) {
  gzFile f = static_cast<gzFile>(file_);
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    const int r = gzread(f, static_cast<char*>(dst) + got, chunk);
    if (r <= 0) {
      int err = Z_OK;
      const char* msg = gzerror(f, &err);
      RT_CHECK(r == 0 && err == Z_OK, "cannot read '", path_, "': ",
               err == Z_ERRNO ? std::strerror(errno) : msg,
               " (a damaged or truncated download? fetch the file again)");
      break;
    }
    got += size_t(r);
  }
  // A truncated gzip stream ends early without a read error but leaves one behind.
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  RT_CHECK(err == Z_OK, "cannot read '", path_, "': ", msg, " (a damaged or truncated download? fetch the file again)");
  return got;
}

}  // namespace rt::data
