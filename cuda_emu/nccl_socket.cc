// Loopback TCP with deadlines and a stop signal, for the NCCL fake (nccl_socket.h).
#include "cuda_emu/nccl_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rt::emu::nccl {
namespace {

[[noreturn]] void system_error(const std::string& what, int err) {
  throw Error(ncclSystemError, what + ": " + errno_text(err));
}

[[noreturn]] void lost(const std::string& who, int err) {
  throw Error(ncclRemoteError, "the connection to " + who + " was closed" +
                                   (err ? " (" + errno_text(err) + ")" : std::string()) +
                                   ": its process exited or was killed, or it aborted");
}

[[noreturn]] void late(const std::string& who, const char* doing) {
  throw Error(ncclRemoteError, std::string("no answer from ") + who + " while " + doing + " within " + timeout_text());
}

Fd tcp_socket() {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) system_error("socket()", errno);
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Waits until `fd` has `events` (or an error/hang-up, which the caller's next call sees).
void wait_for(int fd, short events, Clock::time_point deadline, const Waker& stop, const std::string& who,
              const char* doing) {
  for (;;) {
    if (stop.is_set()) throw stopped();
    if (Clock::now() >= deadline) late(who, doing);
    pollfd p[2] = {{fd, events, 0}, {stop.fd(), POLLIN, 0}};
    const int n = poll(p, 2, poll_ms(deadline));
    if (n < 0 && errno != EINTR) system_error("poll()", errno);
    if (n > 0 && p[0].revents) return;
  }
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Waker::Waker() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_) system_error("eventfd()", errno);
}

void Waker::set() {
  set_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd_.get(), &one, sizeof one);  // never read back: stays readable
}

Error stopped() { return Error(ncclInvalidUsage, "the communicator was aborted or failed earlier"); }

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(left < 0 ? 0 : left > 1000 ? 1000 : left + 1);
}

Fd listen_loopback(uint16_t* port) {
  Fd fd = tcp_socket();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) system_error("bind(127.0.0.1:0)", errno);
  if (listen(fd.get(), SOMAXCONN) != 0) system_error("listen()", errno);
  socklen_t len = sizeof a;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) system_error("getsockname()", errno);
  *port = ntohs(a.sin_port);
  return fd;
}

Fd connect_to(uint32_t addr, uint16_t port, Clock::time_point deadline, const Waker& stop, const std::string& who) {
  for (;;) {
    Fd fd = tcp_socket();
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = addr;
    a.sin_port = htons(port);
    int err = 0;
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        wait_for(fd.get(), POLLOUT, deadline, stop, who, "connecting to it");
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) return fd;
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EAGAIN)
      system_error("connecting to " + who + " at 127.0.0.1:" + std::to_string(port), err);
    // Nobody listens (yet): wait a little, unless stopped or late.
    if (Clock::now() + std::chrono::milliseconds(50) >= deadline)
      throw Error(ncclRemoteError, "cannot connect to " + who + " at 127.0.0.1:" + std::to_string(port) + " (" +
                                       errno_text(err) + ") within " + timeout_text() +
                                       ": is its process still running?");
    pollfd p{stop.fd(), POLLIN, 0};
    poll(&p, 1, 50);
    if (stop.is_set()) throw stopped();
  }
}

Fd accept_one(int listen_fd, Clock::time_point deadline, const Waker& stop, const std::string& who) {
  for (;;) {
    wait_for(listen_fd, POLLIN, deadline, stop, who, "waiting for it to connect");
    Fd fd(accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd) {
      const int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) system_error("accept()", errno);
  }
}

void send_all(int fd, const void* p, size_t n, Clock::time_point deadline, const Waker& stop, const std::string& who) {
  auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      b += k;
      n -= size_t(k);
    } else if (errno == EAGAIN || errno == EINTR) {
      wait_for(fd, POLLOUT, deadline, stop, who, "sending to it");
    } else if (errno == EPIPE || errno == ECONNRESET) {
      lost(who, errno);
    } else {
      system_error("sending to " + who, errno);
    }
  }
}

void recv_all(int fd, void* p, size_t n, Clock::time_point deadline, const Waker& stop, const std::string& who) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = recv(fd, b, n, MSG_DONTWAIT);
    if (k > 0) {
      b += k;
      n -= size_t(k);
    } else if (k == 0) {
      lost(who, 0);
    } else if (errno == EAGAIN || errno == EINTR) {
      wait_for(fd, POLLIN, deadline, stop, who, "waiting for its answer");
    } else if (errno == ECONNRESET) {
      lost(who, errno);
    } else {
      system_error("receiving from " + who, errno);
    }
  }
}

void drain(int fd) {
  char buf[4096];
  while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

}  // namespace rt::emu::nccl
