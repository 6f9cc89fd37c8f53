#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "distributed/net_util.h"
#include "base/error.h"

namespace rt::train {
namespace {

// The byte-at-a-time table of the reflected polynomial.
constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrcTable = crc32c_table();

// Protobuf's wire format (Note [Events file format]): little-endian, varints of 7 bits a byte.
enum Wire { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += char((v & 0x7F) | 0x80);
  out += char(v);
}
void put_tag(std::string& out, int field, Wire w) { put_varint(out, uint64_t(field) << 3 | w); }
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char((v >> (8 * i)) & 0xFF);
}
void put_bytes(std::string& out, int field, const std::string& b) {
  put_tag(out, field, kBytes);
  put_varint(out, b.size());
  out += b;
}

// Event { wall_time = 1; step = 2 } and the rest of the event, `more`, already encoded.
std::string event(int64_t step, const std::string& more) {
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  uint64_t wall_bits;
  std::memcpy(&wall_bits, &wall, 8);
  std::string e;
  put_tag(e, 1, kFixed64);
  put_le(e, wall_bits, 8);
  put_tag(e, 2, kVarint);
  put_varint(e, uint64_t(step));  // an int64's two's complement, as protobuf encodes it
  return e + more;
}

std::string scalar_event(const std::string& tag, int64_t step, float value) {
  uint32_t value_bits;
  std::memcpy(&value_bits, &value, 4);
  std::string v;  // Value
  put_bytes(v, 1, tag);
  put_tag(v, 2, kFixed32);
  put_le(v, value_bits, 4);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string more;
  put_bytes(more, 5, summary);
  return event(step, more);
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kCrcTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string r, len;
  put_le(len, data.size(), 8);
  r += len;
  put_le(r, masked_crc32c(len.data(), len.size()), 4);
  r += data;
  put_le(r, masked_crc32c(data.data(), data.size()), 4);
  return r;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  RT_CHECK(!ec, "cannot create the TensorBoard directory '", dir, "': ", ec.message(),
           " (give --tensorboard-dir a writable directory)");
  const long now = long(std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count());
  const std::string base =
      (fs::path(dir) / ("events.out.tfevents." + std::to_string(now) + "." + dist::net::host_name())).string();
  for (int i = 0; i < 1000 && !f_; ++i) {
    path_ = i == 0 ? base : base + "." + std::to_string(i);
    f_ = std::fopen(path_.c_str(), "wbx");  // x: never another writer's file
    RT_CHECK(f_ || errno == EEXIST, "cannot create the TensorBoard events file '", path_, "': ", std::strerror(errno),
             " (give --tensorboard-dir a writable directory)");
  }
  RT_CHECK(f_, "cannot create a TensorBoard events file in '", dir, "': ", base, " and 999 numbered names are taken");
  std::string version;
  put_bytes(version, 3, "brain.Event:2");
  write_event(event(0, version));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, double value) {
  write_event(scalar_event(tag, step, float(value)));
}

void TensorBoardWriter::write_event(const std::string& e) {
  const std::string r = tfrecord(e);
  RT_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size() && std::fflush(f_) == 0,
           "writing TensorBoard events to '", path_, "' failed: ", std::strerror(errno), " (disk full?)");
}

}  // namespace rt::train
