#include "distributed/net_util.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/error.h"

namespace rt::dist::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

int Fd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);  // no retry on EINTR: on Linux the descriptor is gone anyway
  fd_ = -1;
}

std::string endpoint(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string host_name() {
  char b[256] = {};
  if (gethostname(b, sizeof b - 1) != 0 || b[0] == '\0') return "localhost";
  return b;
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

// getaddrinfo for a TCP endpoint; "" on success, else the resolver's message.
std::string resolve(const std::string& host, int port, int flags, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
  if (rc == 0) return "";
  return rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
}

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Milliseconds left until `deadline` for poll(): at least 0, rounded up so that a poll
// never returns just before the deadline and spins once more.
int poll_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

std::string in_use_message(const std::string& host, int port) {
  const std::string holder = port_holder(port);
  return detail::cat("cannot listen on ", endpoint(host.empty() ? "*" : host, port), ": port ", port,
                     " is already in use",
                     holder.empty() ? " (which process holds it is not visible here; `ss -ltnp 'sport = :" +
                                          std::to_string(port) + "'`, as root for other users' processes, names it)"
                                    : " by " + holder,
                     ". Stop that process, or give this job another master port (MASTER_PORT=<n> when torchrun or "
                     "srun starts the ranks) that no other job uses");
}

// A socket bound to `addr` and listening; throws on failure. EADDRINUSE can come from
// bind() or, when another socket is bound with SO_REUSEADDR but not yet listening, from
// listen().
Fd bind_listen(const std::string& host, int port, int family, const sockaddr* addr, socklen_t len) {
  Fd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  RT_CHECK(fd, "cannot create a TCP socket for ", endpoint(host, port), ": ", std::strerror(errno));
  const int one = 1, zero = 0;
  // A restarted job must be able to reuse its port while old connections sit in TIME_WAIT.
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6 && host.empty()) setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(fd.get(), addr, len) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
    const int err = errno;
    RT_CHECK(err != EADDRINUSE, in_use_message(host, port));
    RT_FAIL("cannot listen on ", endpoint(host.empty() ? "*" : host, port), ": ", std::strerror(err),
            err == EACCES ? " (ports below 1024 need privileges: choose MASTER_PORT >= 1024)"
            : err == EADDRNOTAVAIL ? " (the address is not one of this machine's: check MASTER_ADDR on rank 0)"
                                   : "");
  }
  RT_CHECK(set_nonblocking(fd.get()), "cannot make the listening socket non-blocking: ", std::strerror(errno));
  return fd;
}

}  // namespace

Fd listen_tcp(const std::string& host, int port) {
  RT_CHECK(port >= 0 && port <= 65535, "cannot listen on port ", port, ": a TCP port is 0..65535");
  if (host.empty()) {
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<uint16_t>(port));
    // A kernel without IPv6 refuses the family; fall back to every IPv4 interface.
    Fd probe(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe) {
      probe.reset();
      return bind_listen(host, port, AF_INET6, reinterpret_cast<sockaddr*>(&a6), sizeof a6);
    }
    sockaddr_in a4{};
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons(static_cast<uint16_t>(port));
    return bind_listen(host, port, AF_INET, reinterpret_cast<sockaddr*>(&a4), sizeof a4);
  }
  AddrInfo ai;
  const std::string err = resolve(host, port, AI_PASSIVE, &ai);
  RT_CHECK(err.empty(), "cannot listen on ", endpoint(host, port), ": cannot resolve '", clip_for_message(host),
           "': ", err);
  return bind_listen(host, port, ai.list->ai_family, ai.list->ai_addr, ai.list->ai_addrlen);
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  RT_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0, "getsockname: ", std::strerror(errno));
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

namespace {

bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    auto& x = reinterpret_cast<const sockaddr_in&>(a);
    auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0;
}

// One non-blocking connect attempt, bounded by `deadline`; "" on success, else why not.
std::string try_connect(const addrinfo& a, Clock::time_point deadline, Fd* out) {
  Fd fd(::socket(a.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return std::strerror(errno);
  if (::connect(fd.get(), a.ai_addr, a.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return std::strerror(errno);
    pollfd p{fd.get(), POLLOUT, 0};
    int rc;
    while ((rc = ::poll(&p, 1, poll_ms(deadline))) < 0 && errno == EINTR) {
    }
    if (rc == 0) return "connection attempt timed out";
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return std::strerror(err);
  }
  // Connecting to a local port nobody listens on can, when the kernel picks that same port
  // as our source port, "succeed" as a TCP simultaneous open with ourselves. That is no store.
  sockaddr_storage self{}, peer{};
  socklen_t ls = sizeof self, lp = sizeof peer;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &ls) == 0 &&
      getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peer), &lp) == 0 && same_endpoint(self, peer)) {
    return "connected to itself (nothing listens on the port yet)";
  }
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small requests, answered at once
  *out = std::move(fd);
  return "";
}

}  // namespace

Fd connect_tcp(const std::string& host, int port, Millis timeout) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto backoff = Millis(10);
  std::string last;
  while (true) {
    AddrInfo ai;
    last = resolve(host, port, 0, &ai);
    if (last.empty()) {
      for (const addrinfo* a = ai.list; a; a = a->ai_next) {
        Fd fd;
        last = try_connect(*a, deadline, &fd);
        if (last.empty()) return fd;
      }
    } else {
      last = "cannot resolve '" + clip_for_message(host) + "': " + last;
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, Millis(500));
  }
  RT_FAIL("cannot connect to ", endpoint(host, port), " within ", seconds(Clock::now() - start), " (last error: ", last,
          ")");
}

namespace {

// Inodes of the sockets in /proc/net/tcp{,6} whose local port is `port`: listening ones
// first (the usual holder), then any other state; with the uid owning each.
struct SocketEntry {
  unsigned long inode;
  unsigned uid;
};

std::vector<SocketEntry> sockets_on_port(int port) {
  std::vector<SocketEntry> listening, other;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, state, queues, timer, retr;
      unsigned uid = 0;
      unsigned long timeout = 0, inode = 0;
      if (!(ls >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos || std::strtol(local.c_str() + colon + 1, nullptr, 16) != port) continue;
      if (inode == 0) continue;  // TIME_WAIT and the like: no owner
      (state == "0A" ? listening : other).push_back({inode, uid});
    }
  }
  listening.insert(listening.end(), other.begin(), other.end());
  return listening;
}

std::string cmdline(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  std::replace(s.begin(), s.end(), '\0', ' ');
  return clip_for_message(s);
}

// The pid whose descriptors include socket `inode`, or "".
std::string owner_of(unsigned long inode) {
  const std::string target = "socket:[" + std::to_string(inode) + "]";
  DIR* proc = opendir("/proc");
  if (!proc) return "";
  std::string found;
  while (dirent* e = readdir(proc)) {
    if (!std::all_of(e->d_name, e->d_name + std::strlen(e->d_name), ::isdigit)) continue;
    const std::string fd_dir = std::string("/proc/") + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (!fds) continue;  // another user's process, or it just exited
    while (dirent* f = readdir(fds)) {
      char link[64];
      const std::string path = fd_dir + "/" + f->d_name;
      const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
      if (n > 0 && target.compare(0, std::string::npos, link, n) == 0) {
        found = e->d_name;
        break;
      }
    }
    closedir(fds);
    if (!found.empty()) break;
  }
  closedir(proc);
  return found;
}

}  // namespace

std::string port_holder(int port) {
  const auto entries = sockets_on_port(port);
  for (const auto& s : entries) {
    const std::string pid = owner_of(s.inode);
    if (pid.empty()) continue;
    const std::string cmd = cmdline(pid);
    return "pid " + pid + (cmd.empty() ? "" : " (" + cmd + ")");
  }
  if (!entries.empty()) return "a process of uid " + std::to_string(entries.front().uid) + " that this user cannot inspect";
  return "";
}

namespace {

// send() or recv() until n bytes have moved, waiting in poll() for the socket to be ready.
Io transfer(int fd, uint8_t* p, size_t n, Clock::time_point deadline, bool sending) {
  while (n > 0) {
    const ssize_t k = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if ((k == 0 && !sending) || errno == EPIPE || errno == ECONNRESET) return Io::closed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::failed;
    pollfd pf{fd, short(sending ? POLLOUT : POLLIN), 0};
    const int rc = ::poll(&pf, 1, poll_ms(deadline));
    if (rc == 0) return Io::timed_out;
    if (rc < 0 && errno != EINTR) return Io::failed;
  }
  return Io::ok;
}

}  // namespace

Io send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  // transfer() only reads through the pointer when sending.
  return transfer(fd, static_cast<uint8_t*>(const_cast<void*>(data)), n, deadline, true);
}

Io recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  return transfer(fd, static_cast<uint8_t*>(data), n, deadline, false);
}

std::string describe(Io r, int err) {
  switch (r) {
    case Io::ok: return "ok";
    case Io::closed: return "the connection was closed by the other side";
    case Io::timed_out: return "no answer in time";
    case Io::failed: return std::strerror(err);
  }
  return "?";
}

FrameWriter& FrameWriter::u8(uint8_t v) {
  buf_.push_back(v);
  return *this;
}

FrameWriter& FrameWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return *this;
}

FrameWriter& FrameWriter::str(std::string_view s) {
  RT_CHECK(s.size() <= kMaxFrame, "store: a key or value of ", s.size(), " bytes is over the ", kMaxFrame,
           "-byte limit");
  const auto n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<uint8_t>(n >> (8 * i)));
  buf_.insert(buf_.end(), s.begin(), s.end());
  return *this;
}

FrameWriter& FrameWriter::bytes(const std::vector<uint8_t>& b) {
  return str(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

const std::vector<uint8_t>& FrameWriter::finish() {
  const size_t n = buf_.size() - 4;
  RT_CHECK(n <= kMaxFrame, "store: a request of ", n, " bytes is over the ", kMaxFrame, "-byte frame limit");
  for (int i = 0; i < 4; ++i) buf_[i] = static_cast<uint8_t>(n >> (8 * i));
  return buf_;
}

uint32_t frame_length(const uint8_t* h) {
  return uint32_t(h[0]) | uint32_t(h[1]) << 8 | uint32_t(h[2]) << 16 | uint32_t(h[3]) << 24;
}

bool FrameReader::take(size_t n) {
  if (!ok_ || static_cast<size_t>(end_ - p_) < n) {
    ok_ = false;
    return false;
  }
  return true;
}

uint8_t FrameReader::u8() {
  if (!take(1)) return 0;
  return *p_++;
}

uint64_t FrameReader::u64() {
  if (!take(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p_[i]) << (8 * i);
  p_ += 8;
  return v;
}

std::string FrameReader::str() {
  if (!take(4)) return {};
  const uint32_t n = frame_length(p_);
  p_ += 4;
  if (!take(n)) return {};
  std::string s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

std::vector<uint8_t> FrameReader::bytes() {
  const std::string s = str();
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace rt::dist::net
