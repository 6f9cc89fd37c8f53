#include "distributed/communicator_liveness.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "base/error.h"

namespace rt::dist {

namespace {

constexpr uint8_t kGoodbye = 'B';
constexpr uint8_t kHeartbeat = 'H';
constexpr uint8_t kStacksPlease = 'S';  // Note [Stacks of a rank without ringtape's launcher]
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(500);  // Note [Silent peers]
constexpr char kMagic[4] = {'R', 'T', 'L', 'V'};

std::string key_of(const std::string& prefix, int rank) { return prefix + "/live/" + std::to_string(rank); }

// "host:port" (or "[v6]:port") -> host, port.
void split_endpoint(const std::string& ep, std::string* host, int* port) {
  const size_t colon = ep.rfind(':');
  RT_CHECK(colon != std::string::npos && colon + 1 < ep.size(), "bad liveness endpoint '", clip_for_message(ep),
           "' in the store: another program uses the same keys? Give this communicator its own prefix");
  *host = ep.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
  *port = std::stoi(ep.substr(colon + 1));
}

}  // namespace

std::string local_address_toward(const std::string& remote) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(remote.c_str(), "9", &hints, &list);
  RT_CHECK(rc == 0, "cannot resolve '", clip_for_message(remote), "' to find this machine's address toward it: ",
           gai_strerror(rc), ". Set CommOptions::host to the address peers should connect to");
  std::string out;
  for (addrinfo* a = list; a && out.empty(); a = a->ai_next) {
    net::Fd fd(::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr = ss.ss_family == AF_INET6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
    if (inet_ntop(ss.ss_family, addr, buf, sizeof buf)) out = buf;
  }
  freeaddrinfo(list);
  RT_CHECK(!out.empty(), "no route from this machine to '", clip_for_message(remote),
           "'. Set CommOptions::host to the address peers should connect to");
  return out;
}

PeerLiveness::PeerLiveness(Store& store, const std::string& prefix, int rank, int world, const std::string& host,
                           Millis timeout)
    : rank_(rank), world_(world) {
  if (world_ <= 1) return;
  connect_all(store, prefix, host, timeout);
  wake_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  RT_CHECK(wake_, "eventfd: ", std::strerror(errno));
  thread_ = std::thread([this] { loop(); });
}

void PeerLiveness::connect_all(Store& store, const std::string& prefix, const std::string& host, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  net::Fd listener = net::listen_tcp(host, 0);
  const std::string me = net::endpoint(host, net::local_port(listener.get()));
  store.set(key_of(prefix, rank_), Bytes(me.begin(), me.end()));

  for (int j = 0; j < rank_; ++j) {  // connect to every lower rank
    const Bytes b = store.get(key_of(prefix, j), std::chrono::ceil<Millis>(deadline - Clock::now()));
    std::string peer_host;
    int peer_port = 0;
    split_endpoint(std::string(b.begin(), b.end()), &peer_host, &peer_port);
    net::Fd fd = net::connect_tcp(peer_host, peer_port, std::chrono::ceil<Millis>(deadline - Clock::now()));
    uint8_t hello[8];
    std::memcpy(hello, kMagic, 4);
    for (int k = 0; k < 4; ++k) hello[4 + k] = uint8_t(uint32_t(rank_) >> (8 * k));
    const net::Io io = net::send_all(fd.get(), hello, sizeof hello, deadline);
    RT_CHECK(io == net::Io::ok, "rank ", rank_, ": liveness link to rank ", j, " at ", net::endpoint(peer_host, peer_port),
             ": ", net::describe(io, errno));
    peers_.push_back(Peer{j, std::move(fd)});
  }

  std::vector<bool> seen(size_t(world_), false);
  for (int accepted = 0; accepted < world_ - 1 - rank_;) {  // accept every higher rank
    pollfd pf{listener.get(), POLLIN, 0};
    const auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
    if (left <= 0 || ::poll(&pf, 1, int(std::min<int64_t>(left, 1 << 30))) == 0) {
      std::string missing;
      for (int j = rank_ + 1; j < world_; ++j)
        if (!seen[size_t(j)]) missing += (missing.empty() ? "" : ", ") + std::to_string(j);
      RT_FAIL("rank ", rank_, ": rank(s) ", missing, " did not connect within ", net::seconds(timeout),
              " while the communicator was set up (their processes did not start, failed, or cannot reach ", me,
              ")");
    }
    net::Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) continue;  // EAGAIN/ECONNABORTED: poll again
    uint8_t hello[8];
    if (net::recv_all(fd.get(), hello, sizeof hello, deadline) != net::Io::ok ||
        std::memcmp(hello, kMagic, 4) != 0)
      continue;  // not one of ours (a port scanner): ignore it
    int j = 0;
    for (int k = 0; k < 4; ++k) j |= int(hello[4 + k]) << (8 * k);
    if (j <= rank_ || j >= world_ || seen[size_t(j)]) continue;
    seen[size_t(j)] = true;
    peers_.push_back(Peer{j, std::move(fd)});
    ++accepted;
  }
}

PeerLiveness::~PeerLiveness() {
  if (!thread_.joinable()) return;
  // Goodbye only from an orderly end: destroyed while an exception unwinds, this rank failed,
  // and its peers must see it as lost (named at once) rather than wait out their timeout and
  // call every process alive.
  if (std::uncaught_exceptions() == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Peer& p : peers_)
      if (p.open) (void)::send(p.fd.get(), &kGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  const uint64_t one = 1;
  const ssize_t w = ::write(wake_.get(), &one, sizeof one);  // cannot fail on an eventfd below its limit
  (void)w;
  thread_.join();
}

bool PeerLiveness::poll_peers(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Peer*> who;
  for (Peer& p : peers_)
    if (p.open) {
      fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      who.push_back(&p);
    }
  if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return false;
  bool newly_lost = false;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    uint8_t buf[64];
    const ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k > 0) {
      who[i]->last_heard = Clock::now();
      if (std::memchr(buf, kStacksPlease, size_t(k))) stacks_asked_by_.push_back(who[i]->rank);
      if (std::memchr(buf, kGoodbye, size_t(k))) who[i]->open = false;  // an orderly shutdown
      continue;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    who[i]->open = false;  // closed (0) or reset: the process is gone
    lost_.push_back(Loss{who[i]->rank, Clock::now()});
    newly_lost = true;
  }
  return newly_lost;
}

void PeerLiveness::on_loss(std::function<void()> f) {
  bool already;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_loss_ = std::move(f);
    already = !lost_.empty();
  }
  if (already) notify_loss();
}

void PeerLiveness::ask_for_stacks() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Peer& p : peers_)
    if (p.open) (void)::send(p.fd.get(), &kStacksPlease, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void PeerLiveness::on_stacks_request(std::function<void(int)> f) {
  std::lock_guard<std::mutex> lock(mu_);
  on_stacks_ = std::move(f);
}

void PeerLiveness::notify_loss() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    f = on_loss_;
  }
  if (f) f();
}

void PeerLiveness::loop() {
  auto last_beat = Clock::time_point();
  for (;;) {
    std::vector<pollfd> fds{pollfd{wake_.get(), POLLIN, 0}};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Clock::now() - last_beat >= kHeartbeatEvery) {  // a full buffer (a stopped peer) drops it
        for (Peer& p : peers_)
          if (p.open) (void)::send(p.fd.get(), &kHeartbeat, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        last_beat = Clock::now();
      }
      for (const Peer& p : peers_)
        if (p.open) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
    }
    // Descriptors stay open until the destructor, after this thread ends: polling them
    // without the lock is safe.
    const int rc = ::poll(fds.data(), fds.size(), int(kHeartbeatEvery.count()));
    if (rc < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // the destructor
    bool newly_lost;
    std::vector<int> asked;
    std::function<void(int)> answer;
    {
      std::lock_guard<std::mutex> lock(mu_);
      newly_lost = poll_peers(0);
      asked.swap(stacks_asked_by_);
      answer = on_stacks_;
    }
    // A request is answered here, on this thread (the rank's main thread may be the stuck one).
    for (int from : asked)
      if (answer) answer(from);
    if (newly_lost) notify_loss();
  }
}

std::vector<PeerLiveness::Loss> PeerLiveness::lost(Millis grace) {
  const auto deadline = Clock::now() + grace;
  std::vector<Loss> out;
  bool newly_lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    newly_lost = poll_peers(0);
    while (lost_.empty() && Clock::now() < deadline)
      newly_lost |= poll_peers(int(std::chrono::ceil<Millis>(deadline - Clock::now()).count()));
    out = lost_;
  }
  if (newly_lost) notify_loss();
  return out;
}

std::string PeerLiveness::describe_silent(Millis after) {
  std::string out;
  bool newly_lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    newly_lost = poll_peers(0);
    const auto now = Clock::now();
    for (const Peer& p : peers_)
      if (p.open && now - p.last_heard >= after)
        out += detail::cat(out.empty() ? "" : "; ", "rank ", p.rank, " (its process is alive but sent nothing for ",
                           net::seconds(now - p.last_heard), ": stopped, e.g. by SIGSTOP or a debugger, or hung)");
  }
  if (newly_lost) notify_loss();
  return out;
}

std::string PeerLiveness::describe_lost(Millis grace) {
  std::string out;
  const std::vector<Loss> losses = lost(grace);
  const auto now = Clock::now();
  for (const Loss& l : losses)
    out += detail::cat(out.empty() ? "" : "; ", "rank ", l.rank, " (its connection closed ", net::seconds(now - l.when),
                       " ago: the process exited or was killed)");
  return out;
}

}  // namespace rt::dist
