// TCP plumbing for the rendezvous store and anything else in distributed/ that opens sockets of its
// own: an owned descriptor, listening and connecting with the errors users need (a port in
// use names who holds it; a refused connection is retried until a deadline, because rank 0
// may start after the others), whole-buffer I/O against a deadline, and the length-prefixed
// frames the store speaks.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rt::dist::net {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// An owned file descriptor. Closing never throws (it runs in destructors).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release();
  void reset();

 private:
  int fd_ = -1;
};

// "host:port", with brackets around an IPv6 literal ("[::1]:29500").
std::string endpoint(const std::string& host, int port);
// Seconds with one decimal, for messages: "2.5 s".
std::string seconds(Clock::duration d);
// This machine's name (gethostname), "localhost" when it has none: for messages naming a
// process ("pid 12 on node7") and for file names.
std::string host_name();

// A listening, non-blocking TCP socket on host:port. host "" means every interface (IPv6
// dual-stack where the kernel has IPv6, else IPv4). port 0 lets the kernel pick a free port
// (local_port() tells which). A port in use throws rt::Error naming the port, the process
// holding it when /proc shows it, and how to choose another.
Fd listen_tcp(const std::string& host, int port);
// The local port a socket is bound to.
int local_port(int fd);

// A connected, non-blocking TCP socket to host:port (TCP_NODELAY; use send_all/recv_all). Refused, reset or unreachable attempts are
// retried (backoff 10 ms doubling to 500 ms) until `timeout`; then rt::Error names host:port,
// the time spent and the last error. An unresolvable host fails the same way (DNS may lag).
Fd connect_tcp(const std::string& host, int port, Millis timeout);

// The process listening on TCP `port` on this machine, as "pid 123 (python train.py)", from
// /proc/net/tcp{,6} and /proc/*/fd. "" when no socket or no owner is visible (another
// user's process hides its descriptors).
std::string port_holder(int port);

// Whole-buffer I/O on a socket against a deadline. MSG_NOSIGNAL: a gone peer is a result,
// never SIGPIPE.
enum class Io { ok, closed, timed_out, failed };
Io send_all(int fd, const void* data, size_t n, Clock::time_point deadline);
Io recv_all(int fd, void* data, size_t n, Clock::time_point deadline);
// What an Io result means, with errno's text for `failed` (errno as the call left it).
std::string describe(Io r, int err);

// Frames: a u32 little-endian payload length, then the payload. Payloads are built from
// u8, u64 (little-endian) and strings (u32 length + bytes). No frame is longer than
// kMaxFrame: a stray client (an HTTP probe, a port scanner) must not make the server
// allocate gigabytes.
inline constexpr uint32_t kMaxFrame = 64u << 20;

class FrameWriter {
 public:
  FrameWriter() : buf_(4, 0) {}
  FrameWriter& u8(uint8_t v);
  FrameWriter& u64(uint64_t v);
  FrameWriter& str(std::string_view s);
  FrameWriter& bytes(const std::vector<uint8_t>& b);
  // The finished frame, length prefix filled in. Throws rt::Error past kMaxFrame.
  const std::vector<uint8_t>& finish();

 private:
  std::vector<uint8_t> buf_;
};

// Reads a payload; any read past its end sets !ok() and returns zeros/empties, so a parser
// checks ok() once at the end instead of after every field.
class FrameReader {
 public:
  FrameReader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  uint8_t u8();
  uint64_t u64();
  std::string str();
  std::vector<uint8_t> bytes();
  bool ok() const { return ok_; }
  bool at_end() const { return p_ == end_; }

 private:
  bool take(size_t n);
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

// The payload length in a frame's first 4 bytes.
uint32_t frame_length(const uint8_t* header);

}  // namespace rt::dist::net
