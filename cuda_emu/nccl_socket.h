// The NCCL fake's transport underneath: TCP over 127.0.0.1 (a lost peer shows up as a
// closed or reset connection, as NCCL's socket transport sees it), every socket
// non-blocking, every wait bounded by a deadline and ended early by a Waker, so that
// ncclCommAbort from any thread ends a wait on a silent peer.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda_emu/nccl_common.h"

namespace rt::emu::nccl {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// A stop signal that poll() sees: once set, its descriptor stays readable for ever, so
// every wait of the communicator, now or later, on any thread, ends.
class Waker {
 public:
  Waker();
  void set();
  bool is_set() const { return set_.load(std::memory_order_acquire); }
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  std::atomic<bool> set_{false};
};

// What ends a wait when the Waker is set: the caller knows why (an abort, an earlier
// failure) and keeps its own message.
Error stopped();

// In the calls below, `who` names the other end for messages ("rank 2", "the bootstrap
// root"). A wait past `deadline` throws ncclRemoteError; a closed connection throws
// ncclRemoteError; other socket errors ncclSystemError.

// A listening socket on 127.0.0.1 and an ephemeral port.
Fd listen_loopback(uint16_t* port);
// Connects to addr:port (addr in network order), retrying a refused connection until the
// deadline (the other side may not listen yet).
Fd connect_to(uint32_t addr, uint16_t port, Clock::time_point deadline, const Waker& stop, const std::string& who);
Fd accept_one(int listen_fd, Clock::time_point deadline, const Waker& stop, const std::string& who);
void send_all(int fd, const void* p, size_t n, Clock::time_point deadline, const Waker& stop, const std::string& who);
void recv_all(int fd, void* p, size_t n, Clock::time_point deadline, const Waker& stop, const std::string& who);
// Reads and drops whatever has arrived, without waiting (before a close: unread data would
// make the kernel reset the connection and drop what this side still had to send).
void drain(int fd);

std::string errno_text(int err);  // "Connection reset by peer (errno 104)"
// Milliseconds for poll() until `deadline`, at least 0 and at most 1000.
int poll_ms(Clock::time_point deadline);

}  // namespace rt::emu::nccl
