#include "data/formats/idx.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "data/formats/gz_reader.h"
#include "base/error.h"

namespace rt::data {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// No image format has dimensions near this; it bounds the element count so the product
// cannot overflow and a garbage header is reported as such.
constexpr int64_t kMaxDim = int64_t(1) << 31;
constexpr int64_t kMaxElements = int64_t(1) << 40;
// Memory grows with the bytes actually read, not with what the header claims: a corrupt
// header announcing terabytes fails at the end of the file, not in the allocator.
constexpr size_t kReadChunk = size_t(64) << 20;

std::string hex32(const uint8_t* b) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setfill('0');
  for (int i = 0; i < 4; ++i) os << std::setw(2) << int(b[i]);
  return os.str();
}

}  // namespace

IdxArray read_idx_u8(const std::string& path, int ndim, const std::string& what) {
  GzReader in(path);
  uint8_t magic[4];
  const size_t got_magic = in.read(magic, 4);
  RT_CHECK(got_magic == 4, "idx file '", path, "' is ", got_magic, " bytes long; expected a 4-byte magic number, ",
           "dimensions and ", what, " (a truncated download? fetch the file again)");
  const uint8_t want[4] = {0, 0, kUnsignedByte, uint8_t(ndim)};
  RT_CHECK(std::equal(magic, magic + 4, want), "idx file '", path, "' starts with magic number ", hex32(magic),
           "; expected ", hex32(want), " (idx", ndim, " of unsigned bytes, as ", what,
           " files have). Is it the right file (images vs labels) and not damaged?");

  IdxArray out;
  int64_t elements = 1;
  for (int d = 0; d < ndim; ++d) {
    uint8_t b[4];
    RT_CHECK(in.read(b, 4) == 4, "idx file '", path, "' is truncated inside its header (dimension ", d, " of ", ndim,
             " missing); fetch the file again");
    const int64_t v = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    RT_CHECK(v > 0 && v < kMaxDim, "idx file '", path, "': dimension ", d, " is ", v, "; expected a positive size");
    elements *= v;
    RT_CHECK(elements <= kMaxElements, "idx file '", path, "': dimensions give more than ", kMaxElements,
             " elements; the header is damaged");
    out.dims.push_back(v);
  }

  size_t total = 0;
  while (total < size_t(elements)) {
    const size_t n = std::min(kReadChunk, size_t(elements) - total);
    out.data.resize(total + n);
    const size_t r = in.read(out.data.data() + total, n);
    total += r;
    if (r < n) break;
  }
  std::ostringstream dims;
  for (size_t d = 0; d < out.dims.size(); ++d) dims << (d ? " x " : "") << out.dims[d];
  RT_CHECK(total == size_t(elements), "idx file '", path, "' is truncated: its header announces ", dims.str(), " = ",
           elements, " bytes of ", what, " but only ", total, " follow; fetch the file again");
  uint8_t extra;
  RT_CHECK(in.read(&extra, 1) == 0, "idx file '", path, "' has more data than its header (", dims.str(),
           ") announces; it is damaged or not an idx file");
  return out;
}

}  // namespace rt::data
