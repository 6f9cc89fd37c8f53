// The tar layer under WebDataset shards: tar files whose members are the samples' parts
// ("key.jpg" + "key.cls"). Shards come from other tools (Python's tarfile, GNU tar) and may
// be damaged or hostile, so list_tar is strict and bounded: every size is checked against
// the file before anything is read or allocated, and every problem is an rt::Error that
// names the file, the offset, the member where known, and what to do about it.
//
// Formats read: ustar (name + 155-byte prefix), GNU (magic "ustar  \0", base-256 numbers
// for sizes of 8 GiB and more, 'L' long names) and POSIX pax ('x' extended headers whose
// "path" and "size" records apply to the next member; 'g' global headers and 'K' long link
// names are skipped).
// Old GNU sparse members ('S') are refused: their data is not the file's bytes.
// TarWriter writes ustar, adding a pax header only for what ustar cannot hold.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rt::data {

// A read-only file read at offsets (pread). Reads are thread-safe: several threads may share
// one. The size is taken at open time; a file that shrinks later makes read_exact throw.
class RandomAccessFile {
 public:
  // Throws rt::Error "<path>: cannot open (<strerror>)", or when the path is not a regular file.
  explicit RandomAccessFile(const std::string& path);
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

  // Reads exactly dst.size() bytes at `offset`. Throws rt::Error naming the path, offset and
  // count when [offset, offset + dst.size()) is not inside the file (an empty read at
  // offset == size() is allowed), when the read fails, or when it comes back short.
  void read_exact(int64_t offset, std::span<uint8_t> dst) const;

  // posix_fadvise(WILLNEED) on [offset, offset + length) clipped to the file: the kernel
  // starts reading it in the background. Best effort, never throws.
  void will_need(int64_t offset, int64_t length) const;
  // posix_fadvise(SEQUENTIAL) on the whole file: a larger kernel read-ahead. Best effort.
  void sequential() const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

struct TarMember {
  std::string name;           // ustar prefix + "/" + name, or a pax "path", or a GNU long name ('L')
  int64_t header_offset = 0;  // the member's first header block (its pax or long-name header if any)
  int64_t data_offset = 0;    // its first data byte (512-aligned)
  int64_t size = 0;           // data bytes
};

// The regular-file members ('0', '\0' and '7' type flags) in file order; directories, links
// and other entries are skipped together with their data. The archive ends at the first
// all-zero block or at end of file exactly on a block boundary (after the last member's
// padding). A 0-byte file is an error ("empty file"), a first block of zeros an empty archive.
// Throws rt::Error (path, offset, member and a fix in the message) for: a file that is not
// a tar, a bad header checksum, a bad or negative size field, a member whose data runs past
// the end of the file ("truncated", with the bytes missing), a header cut short, a pax header
// or GNU long name over 1 MiB (kMaxTarExtension), malformed pax records, an empty name, an
// extended header followed by no member, and GNU sparse members.
std::vector<TarMember> list_tar(const RandomAccessFile& file);

// The largest pax extended header or GNU long name list_tar reads: a forged size field must
// not make it allocate gigabytes. Real ones hold a path of at most a few kilobytes.
inline constexpr int64_t kMaxTarExtension = int64_t(1) << 20;

// Writes a tar file: ustar headers (a long name split into prefix and name where a '/'
// allows), with a pax extended header only for a name that does not fit that split or a
// size of 8 GiB or more, as Python's tarfile (PAX_FORMAT) writes them. Members are regular
// files, mode 0644, uid/gid 0, empty uname/gname, mtime as given.
class TarWriter {
 public:
  // Creates or truncates the file; throws rt::Error naming the path.
  explicit TarWriter(const std::string& path, int64_t mtime = 0);
  // Closes without finishing: the file is left incomplete. Never throws.
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Throws rt::Error naming the path and member on an empty name or one holding a NUL byte,
  // after finish(), after an earlier error, and on any I/O error (e.g. ENOSPC).
  void add(const std::string& name, std::span<const uint8_t> data);
  // Two zero blocks, then write, fsync and close. Throws rt::Error on any I/O error.
  void finish();
  // Bytes added so far, headers and padding included; the file's size after finish().
  int64_t bytes_written() const { return bytes_written_; }

 private:
  void write_all(std::span<const uint8_t> bytes);  // through buffer_
  void write_fd(std::span<const uint8_t> bytes);   // straight to the file

  std::string path_;
  int64_t mtime_ = 0;
  int fd_ = -1;
  bool failed_ = false;  // an earlier write failed: the file's contents are unknown
  std::vector<uint8_t> buffer_;
  int64_t bytes_written_ = 0;
};

}  // namespace rt::data
