#include "data/formats/tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string_view>

#include "base/error.h"

namespace rt::data {

namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// What every error about a shard's contents ends with.
constexpr const char* kFix = "; the shard is damaged or incomplete: re-download it or repack it";

// ustar header fields: offset and length within the 512-byte block.
struct Field {
  int off, len;
};
constexpr Field kName{0, 100}, kMode{100, 8}, kUid{108, 8}, kGid{116, 8}, kSize{124, 12}, kMtime{136, 12},
    kChksum{148, 8}, kMagic{257, 8}, kDevMajor{329, 8}, kDevMinor{337, 8}, kPrefix{345, 155};
constexpr int kTypeflag = 156;

using Block = std::array<uint8_t, kBlock>;

std::string_view field(const Block& b, Field f) {
  return std::string_view(reinterpret_cast<const char*>(b.data()) + f.off, size_t(f.len));
}

// A NUL-terminated string field; one that fills its field has no NUL.
std::string_view cstr(std::string_view s) { return s.substr(0, std::min(s.find('\0'), s.size())); }

// A field or name as it may appear in a message: clipped, control bytes escaped.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : clip_for_message(s)) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7F) {
      out += c;
    } else {
      static const char* const hex = "0123456789abcdef";
      out += "\\x";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    }
  }
  return out;
}

template <typename... A>
[[noreturn]] void fail_at(const RandomAccessFile& f, int64_t offset, std::string_view member, const A&... a) {
  if (member.empty()) RT_FAIL(f.path(), ": ", a..., " (header at offset ", offset, ")", kFix);
  RT_FAIL(f.path(), ": ", a..., " (member '", shown(member), "', header at offset ", offset, ")", kFix);
}

bool all_zero(const Block& b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t c) { return c == 0; });
}

// A numeric header field, as GNU tar and Python's tarfile read it. Octal text: digits,
// optionally surrounded by spaces and ended by a NUL (all-NUL or blank means 0). Base-256
// (GNU, for values octal cannot hold, e.g. sizes of 8 GiB and more): a first byte 0x80 marks
// a positive big-endian number in the rest of the field (its low 7 bits included); 0xFF marks
// a negative one, which no size, checksum or time here may be. Returns false when malformed
// or beyond int64.
bool parse_number(std::string_view s, int64_t* out) {
  const auto first = static_cast<unsigned char>(s[0]);
  if (first == 0xFF) return false;
  int64_t n = 0;
  if (first == 0x80) {
    for (char c : s.substr(1)) {
      if (n > (kMaxInt64 >> 8)) return false;
      n = (n << 8) | static_cast<unsigned char>(c);
    }
    *out = n;
    return true;
  }
  s = cstr(s);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  for (char c : s) {
    if (c < '0' || c > '7' || n > (kMaxInt64 >> 3)) return false;
    n = (n << 3) | (c - '0');
  }
  *out = n;
  return true;
}

// The checksum is the sum of the header's bytes with the chksum field itself counted as
// eight spaces: the writer fills in the sum after computing it, so the field cannot count
// its own digits. Old writers summed signed chars; Python's tarfile and GNU tar accept
// either sum, and so do we.
bool checksum_ok(const Block& b) {
  int64_t stored = 0;
  if (!parse_number(field(b, kChksum), &stored)) return false;
  int64_t sum_unsigned = 0, sum_signed = 0;
  for (int i = 0; i < kBlock; ++i) {
    const bool in_field = i >= kChksum.off && i < kChksum.off + kChksum.len;
    sum_unsigned += in_field ? ' ' : b[size_t(i)];
    sum_signed += in_field ? ' ' : static_cast<signed char>(b[size_t(i)]);
  }
  return stored == sum_unsigned || stored == sum_signed;
}

// POSIX ustar: "ustar\0" + version "00". GNU: "ustar  \0" (the version folded into the magic).
bool is_posix_magic(const Block& b) { return field(b, kMagic).substr(0, 6) == std::string_view("ustar\0", 6); }
bool is_gnu_magic(const Block& b) { return field(b, kMagic) == std::string_view("ustar  \0", 8); }

// Pax records: "LEN key=value\n", where LEN is decimal and counts the whole record, its own
// digits and the newline included; the value may hold any byte, even '\n' and '='. Python's
// tarfile stops at a NUL where a record would start, so trailing NULs are accepted.
struct PaxInfo {
  bool has_path = false, has_size = false;
  std::string path;
  int64_t size = 0;
};

void parse_pax(const RandomAccessFile& f, int64_t offset, std::string_view data, PaxInfo* info) {
  size_t pos = 0;
  while (pos < data.size() && data[pos] != '\0') {
    const std::string_view rest = data.substr(pos);
    size_t digits = 0;
    int64_t len = 0;
    while (digits < rest.size() && digits < 18 && rest[digits] >= '0' && rest[digits] <= '9')
      len = len * 10 + (rest[digits++] - '0');
    if (digits == 0 || digits >= rest.size() || rest[digits] != ' ')
      fail_at(f, offset, "", "malformed pax record at byte ", pos, " of the pax header: expected \"LEN key=value\\n\"");
    if (len < int64_t(digits) + 4 || len > int64_t(rest.size()))
      fail_at(f, offset, "", "malformed pax record at byte ", pos, ": its length field says ", len,
              " bytes but the header holds ", rest.size(), " from there (and a record needs at least ", digits + 4,
              ")");
    const std::string_view rec = rest.substr(digits + 1, size_t(len) - digits - 1);
    const size_t eq = rec.find('=');
    if (rec.back() != '\n' || eq == std::string_view::npos || eq == 0)
      fail_at(f, offset, "", "malformed pax record '", shown(rec), "' at byte ", pos,
              ": expected \"key=value\" ending in a newline, within the length its field gives");
    const std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1, rec.size() - eq - 2);
    if (key == "path") {
      info->has_path = true;
      info->path = std::string(value);
    } else if (key == "size") {
      int64_t n = 0;
      bool ok = !value.empty() && value.size() <= 18;
      for (char c : value) ok = ok && c >= '0' && c <= '9' && ((n = n * 10 + (c - '0')), true);
      if (!ok) fail_at(f, offset, "", "pax size record '", shown(value), "' is not a decimal number of bytes");
      info->has_size = true;
      info->size = n;
    }
    pos += size_t(len);
  }
  if (!std::all_of(data.begin() + std::ptrdiff_t(pos), data.end(), [](char c) { return c == '\0'; }))
    fail_at(f, offset, "", "malformed pax header: bytes after a NUL at byte ", pos);
}

}  // namespace

RandomAccessFile::RandomAccessFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO given by mistake fails the regular-file check below instead of
  // blocking here; reads of regular files ignore it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  RT_CHECK(fd_ >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    RT_FAIL(path, ": cannot stat (", std::strerror(e), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    RT_FAIL(path, ": not a regular file");
  }
  size_ = int64_t(st.st_size);
}

RandomAccessFile::~RandomAccessFile() { ::close(fd_); }

void RandomAccessFile::read_exact(int64_t offset, std::span<uint8_t> dst) const {
  const auto count = int64_t(dst.size());
  RT_CHECK(offset >= 0 && offset <= size_ && count <= size_ - offset, path_, ": read of ", count, " bytes at offset ",
           offset, " is outside the file (", size_, " bytes)");
  int64_t done = 0;
  while (done < count) {
    const size_t chunk = size_t(std::min<int64_t>(count - done, int64_t(1) << 30));
    const ssize_t r = ::pread(fd_, dst.data() + done, chunk, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    RT_CHECK(r >= 0, path_, ": read of ", count, " bytes at offset ", offset, " failed (", std::strerror(errno), ")");
    RT_CHECK(r > 0, path_, ": read of ", count, " bytes at offset ", offset, " came back short at offset ",
             offset + done, " (the file shrank since it was opened, from ", size_, " bytes)");
    done += r;
  }
}

void RandomAccessFile::will_need(int64_t offset, int64_t length) const {
  offset = std::max<int64_t>(offset, 0);
  if (length <= 0 || offset >= size_) return;
  length = std::min(length, size_ - offset);
  (void)::posix_fadvise(fd_, off_t(offset), off_t(length), POSIX_FADV_WILLNEED);
}

void RandomAccessFile::sequential() const { (void)::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL); }

std::vector<TarMember> list_tar(const RandomAccessFile& f) {
  const int64_t file_size = f.size();
  RT_CHECK(file_size > 0, f.path(), ": empty file, not a tar (0 bytes)", kFix);
  std::vector<TarMember> members;
  // What the extended headers since the last entry say about the next one.
  int64_t first_header = -1;  // the first of them, or -1
  PaxInfo pax;
  bool has_long_name = false;
  std::string long_name;
  std::vector<uint8_t> ext;  // an extended header's data
  Block b;
  for (int64_t off = 0;; ) {
    const int64_t left = file_size - off;
    if (left == 0) break;
    if (left < kBlock) {
      if (off == 0) RT_FAIL(f.path(), ": not a tar file (", left, " bytes, less than one 512-byte header)", kFix);
      fail_at(f, off, "", "header cut short: the file ends ", left, " bytes into it (truncated, ", kBlock - left,
              " bytes missing)");
    }
    f.read_exact(off, b);
    if (all_zero(b)) break;
    const bool posix = is_posix_magic(b);
    if (!checksum_ok(b) || !(posix || is_gnu_magic(b))) {
      const char* what = checksum_ok(b) ? "no ustar magic" : "header checksum mismatch";
      if (off == 0)
        RT_FAIL(f.path(), ": not a tar file (", what, " in the first header, where a tar has a ustar header)", kFix);
      fail_at(f, off, "", what, " (a damaged block, or data where a header belongs)");
    }
    const char type = char(b[kTypeflag]);
    const bool extension = type == 'x' || type == 'L';
    // Headers that describe the next entry, or (global pax, GNU long link name) no file at all;
    // the pending pax and long-name values are not theirs.
    const bool entry = !extension && type != 'g' && type != 'K';
    std::string name(cstr(field(b, kName)));
    const std::string_view prefix = cstr(field(b, kPrefix));
    // Only POSIX ustar has a prefix: GNU headers keep access times and sparse maps there.
    if (posix && !prefix.empty()) name = std::string(prefix) + "/" + name;
    if (entry && has_long_name) name = long_name;
    if (entry && pax.has_path) name = pax.path;

    int64_t size = 0;
    if (!parse_number(field(b, kSize), &size))
      fail_at(f, off, name, "size field '", shown(field(b, kSize)), "' is not an octal or base-256 number, or is ",
              "negative");
    if (entry && pax.has_size) size = pax.size;
    // Before the truncation check: a forged size gets the more specific message.
    if (extension && size > kMaxTarExtension)
      fail_at(f, off, "", type == 'x' ? "pax" : "GNU long-name", " header of ", size, " bytes is larger than the ",
              kMaxTarExtension, "-byte limit");
    const int64_t data_offset = off + kBlock;
    const int64_t room = file_size - data_offset;
    const int64_t pad = (kBlock - size % kBlock) % kBlock;
    if (size > room || pad > room - size)  // the data rounded up to 512, without overflowing
      fail_at(f, off, name, "truncated: the member's ", size, " bytes of data (", uint64_t(size) + uint64_t(pad),
              " with padding) run past the end of the file, ", uint64_t(size) + uint64_t(pad) - uint64_t(room),
              " bytes missing");
    const int64_t next = data_offset + size + pad;

    if (extension) {
      ext.resize(size_t(size));
      f.read_exact(data_offset, ext);
      const std::string_view data(reinterpret_cast<const char*>(ext.data()), ext.size());
      if (type == 'x') {
        parse_pax(f, off, data, &pax);
      } else {
        has_long_name = true;
        long_name = std::string(cstr(data));
      }
      if (first_header < 0) first_header = off;
    } else if (entry) {
      if (name.empty()) fail_at(f, off, "", "member with an empty name");
      if (type == 'S')
        RT_FAIL(f.path(), ": member '", shown(name), "' (header at offset ", off, ") is a GNU sparse file, whose data "
                "is not the file's bytes; repack the shard without tar's --sparse");
      const bool regular = type == '0' || type == '7' || (type == '\0' && name.back() != '/');
      if (regular) members.push_back({name, first_header >= 0 ? first_header : off, data_offset, size});
      first_header = -1;
      pax = PaxInfo();
      has_long_name = false;
      long_name.clear();
    }
    off = next;
  }
  if (first_header >= 0) fail_at(f, first_header, "", "extended header (pax or GNU long name) followed by no member");
  return members;
}

namespace {

// An octal field of `f.len - 1` digits and a NUL, as ustar writers fill them.
void put_octal(Block& b, Field f, int64_t v) {
  for (int i = f.len - 2; i >= 0; --i, v >>= 3) b[size_t(f.off + i)] = uint8_t('0' + (v & 7));
  b[size_t(f.off + f.len - 1)] = 0;
}

constexpr int64_t kMaxOctal11 = (int64_t(1) << 33) - 1;  // 11 octal digits: 8 GiB - 1
constexpr Block kZeros{};

// The zero bytes that fill `n` bytes of data up to the next 512-byte boundary.
std::span<const uint8_t> padding(int64_t n) { return std::span(kZeros).first(size_t((kBlock - n % kBlock) % kBlock)); }

Block ustar_header(std::string_view name, std::string_view prefix, int64_t size, int64_t mtime, char type) {
  Block b{};
  name = name.substr(0, size_t(kName.len));
  std::copy(name.begin(), name.end(), b.begin() + kName.off);
  std::copy(prefix.begin(), prefix.end(), b.begin() + kPrefix.off);
  put_octal(b, kMode, 0644);
  put_octal(b, kUid, 0);
  put_octal(b, kGid, 0);
  put_octal(b, kSize, size);
  put_octal(b, kMtime, mtime);
  b[kTypeflag] = uint8_t(type);
  std::memcpy(b.data() + kMagic.off, "ustar\0" "00", 8);
  put_octal(b, kDevMajor, 0);
  put_octal(b, kDevMinor, 0);
  // The checksum as 6 octal digits, NUL, space (the layout every writer uses), computed
  // with the field counted as spaces.
  std::memset(b.data() + kChksum.off, ' ', size_t(kChksum.len));
  int64_t sum = 0;
  for (uint8_t c : b) sum += c;
  put_octal(b, Field{kChksum.off, 7}, sum);
  b[size_t(kChksum.off + 7)] = ' ';
  return b;
}

// One pax record; LEN counts itself, so its digit count is found by iterating.
std::string pax_record(std::string_view key, std::string_view value) {
  const size_t base = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = base + std::to_string(base).size();
  len = base + std::to_string(len).size();
  return std::to_string(len) + " " + std::string(key) + "=" + std::string(value) + "\n";
}

}  // namespace

TarWriter::TarWriter(const std::string& path, int64_t mtime) : path_(path), mtime_(mtime) {
  RT_CHECK(mtime >= 0 && mtime <= kMaxOctal11, path, ": tar mtime ", mtime, " is outside [0, 8^11)");
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RT_CHECK(fd_ >= 0, path, ": cannot create (", std::strerror(errno), ")");
}

TarWriter::~TarWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TarWriter::write_fd(std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t r = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      failed_ = true;
      RT_FAIL(path_, ": write failed (", r < 0 ? std::strerror(errno) : "wrote nothing", ")");
    }
    done += size_t(r);
  }
}

void TarWriter::write_all(std::span<const uint8_t> bytes) {
  constexpr size_t kBuffer = size_t(1) << 20;
  if (buffer_.size() + bytes.size() > kBuffer) {
    write_fd(buffer_);
    buffer_.clear();
  }
  if (bytes.size() >= kBuffer) {
    write_fd(bytes);  // large data goes straight to the file
  } else {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  }
  bytes_written_ += int64_t(bytes.size());
}

void TarWriter::add(const std::string& name, std::span<const uint8_t> data) {
  RT_CHECK(fd_ >= 0 && !failed_, path_, ": cannot add member '", shown(name), "': the writer is ",
           failed_ ? "broken by an earlier error" : "finished");
  RT_CHECK(!name.empty(), path_, ": tar member with an empty name");
  RT_CHECK(name.find('\0') == std::string::npos, path_, ": tar member name '", shown(name), "' holds a NUL byte");
  const auto size = int64_t(data.size());
  // ustar holds 100 name bytes, or 155 prefix bytes + '/' + 100: split at the last '/' that
  // leaves a prefix of at most 155 (a later '/' would only leave a longer name).
  std::string_view ustar_name = name, prefix;
  bool pax_path = false;
  if (name.size() > size_t(kName.len)) {
    const size_t slash = std::string_view(name).substr(0, size_t(kPrefix.len) + 1).rfind('/');
    if (slash != std::string::npos && slash > 0 && name.size() - slash - 1 <= size_t(kName.len) &&
        slash + 1 < name.size()) {
      prefix = std::string_view(name).substr(0, slash);
      ustar_name = std::string_view(name).substr(slash + 1);
    } else {
      pax_path = true;  // the ustar name field keeps the first 100 bytes
    }
  }
  try {
    if (pax_path || size > kMaxOctal11) {
      std::string records;
      if (pax_path) records += pax_record("path", name);
      if (size > kMaxOctal11) records += pax_record("size", std::to_string(size));
      const Block h = ustar_header("././@PaxHeader", "", int64_t(records.size()), mtime_, 'x');
      write_all(h);
      write_all(std::span(reinterpret_cast<const uint8_t*>(records.data()), records.size()));
      write_all(padding(int64_t(records.size())));
    }
    write_all(ustar_header(ustar_name, prefix, size > kMaxOctal11 ? 0 : size, mtime_, '0'));
    write_all(data);
    write_all(padding(size));
  } catch (const Error& e) {
    failed_ = true;
    RT_FAIL(e.what(), " (adding member '", shown(name), "')");
  }
}

void TarWriter::finish() {
  RT_CHECK(fd_ >= 0 && !failed_, path_, ": cannot finish: the writer is ",
           failed_ ? "broken by an earlier error" : "finished");
  write_all(kZeros);
  write_all(kZeros);
  write_fd(buffer_);
  buffer_.clear();
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    RT_FAIL(path_, ": fsync failed (", std::strerror(e), ")");
  }
  RT_CHECK(::close(fd) == 0, path_, ": close failed (", std::strerror(errno), ")");
}

}  // namespace rt::data
