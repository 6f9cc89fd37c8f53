// The idx format of (Fashion-)MNIST: a 4-byte magic number (0, 0, type code, number of
// dimensions), that many big-endian uint32 dimensions, then the elements row-major.
// Only unsigned bytes (type code 0x08) are read: images are idx3, labels idx1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes
};

// Reads a gzip-compressed or plain idx file of unsigned bytes with `ndim` dimensions.
// `what` says what the file should hold ("images", "labels") for error messages. Throws
// rt::Error naming the path on a wrong magic number, a bad dimension, missing bytes
// (truncated) or extra bytes after the data.
IdxArray read_idx_u8(const std::string& path, int ndim, const std::string& what);

}  // namespace rt::data
