#include "distributed/tcp_store.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "base/error.h"

namespace rt::dist {

using net::Clock;

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3, kAdd = 4, kCheck = 5 };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kError = 2 };

// The longest wait honoured (a year): beyond it the deadline arithmetic would overflow.
constexpr uint64_t kMaxWaitMs = 365ull * 24 * 3600 * 1000;

uint64_t wait_ms(Millis t) { return std::min<uint64_t>(std::max<int64_t>(t.count(), 0), kMaxWaitMs); }

// "key 'a' was" / "keys 'a', 'b' and 3 more were", for messages.
std::string missing_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string s = keys.size() == 1 ? "key " : "keys ";
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) s += (i ? ", '" : "'") + clip_for_message(keys[i]) + "'";
  if (keys.size() > kShown) s += " and " + std::to_string(keys.size() - kShown) + " more";
  return s + (keys.size() == 1 ? " was" : " were");
}

std::vector<std::string> read_keys(net::FrameReader& r) {
  const uint64_t n = r.u64();
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str());
  return keys;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Server

struct TcpStoreServer::State {
  struct Client {
    net::Fd fd;
    std::vector<uint8_t> in;   // received, not yet a whole request
    std::vector<uint8_t> out;  // reply bytes not yet sent
    bool dead = false;
    // A parked GET or WAIT, answered when its keys are all set or at its deadline.
    bool parked = false;
    uint8_t op = 0;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  net::Fd listener;
  std::unordered_map<std::string, std::string> data;
  std::map<int, Client> clients;  // by descriptor

  void serve(int wake_fd);
  void accept_all();
  bool read_from(Client& c);
  bool flush(Client& c);
  bool step(Client& c, Clock::time_point now);
  void handle(Client& c, net::FrameReader& r);
  void answer_parked(Client& c, bool timed_out);
  bool all_set(const std::vector<std::string>& keys) const;
};

namespace {

void append(std::vector<uint8_t>& out, net::FrameWriter& w) {
  const auto& f = w.finish();
  out.insert(out.end(), f.begin(), f.end());
}

void reply_error(std::vector<uint8_t>& out, const std::string& msg) {
  net::FrameWriter w;
  w.u8(kError).str(msg);
  append(out, w);
}

}  // namespace

bool TcpStoreServer::State::all_set(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data.count(k) > 0; });
}

void TcpStoreServer::State::accept_all() {
  while (true) {
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN: no more; EMFILE and the like: try again on the next wakeup
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    clients[fd].fd = net::Fd(fd);
  }
}

bool TcpStoreServer::State::read_from(Client& c) {
  uint8_t buf[64 * 1024];
  while (true) {
    const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, 0);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      // Clients send one request and wait; more than a request's worth is not our protocol.
      if (c.in.size() > 2 * (size_t(net::kMaxFrame) + 4)) return false;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

bool TcpStoreServer::State::flush(Client& c) {
  size_t sent = 0;
  while (sent < c.out.size()) {
    const ssize_t k = ::send(c.fd.get(), c.out.data() + sent, c.out.size() - sent, MSG_NOSIGNAL);
    if (k > 0) {
      sent += size_t(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else {
      if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
      break;
    }
  }
  c.out.erase(c.out.begin(), c.out.begin() + sent);
  return true;
}

void TcpStoreServer::State::answer_parked(Client& c, bool timed_out) {
  net::FrameWriter w;
  if (timed_out) {
    std::vector<std::string> missing;
    for (const auto& k : c.keys)
      if (!data.count(k)) missing.push_back(k);
    w.u8(kTimedOut).u64(missing.size());
    for (const auto& k : missing) w.str(k);
  } else {
    w.u8(kOk);
    if (c.op == kGet) w.str(data.at(c.keys[0]));
  }
  append(c.out, w);
  c.parked = false;
  c.keys.clear();
}

void TcpStoreServer::State::handle(Client& c, net::FrameReader& r) {
  const uint8_t op = r.u8();
  std::vector<std::string> keys;
  std::string value;
  uint64_t number = 0;
  switch (op) {
    case kSet:
      keys.push_back(r.str());
      value = r.str();
      break;
    case kGet:
      keys.push_back(r.str());
      number = r.u64();
      break;
    case kWait:
      keys = read_keys(r);
      number = r.u64();
      break;
    case kAdd:
      keys.push_back(r.str());
      number = r.u64();
      break;
    case kCheck:
      keys = read_keys(r);
      break;
    default:
      c.dead = true;  // not our protocol: there is nobody to explain it to
      return;
  }
  if (!r.ok() || !r.at_end()) {
    c.dead = true;
    return;
  }
  net::FrameWriter w;
  if (op == kSet) {
    data[keys[0]] = std::move(value);
    w.u8(kOk);
  } else if (op == kGet || op == kWait) {
    c.parked = true;  // answered by step(), now if the keys are set, else later
    c.op = op;
    c.keys = std::move(keys);
    c.deadline = Clock::now() + Millis(std::min(number, kMaxWaitMs));
    return;
  } else if (op == kAdd) {
    int64_t old = 0;
    auto it = data.find(keys[0]);
    if (it != data.end()) {
      const std::string& s = it->second;
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), old);
      if (ec != std::errc() || end != s.data() + s.size()) {
        reply_error(c.out, "key '" + clip_for_message(keys[0]) + "' holds " + std::to_string(s.size()) +
                               " bytes that are not an integer: add() works only on keys that add() writes");
        return;
      }
    }
    int64_t now = 0;
    if (__builtin_add_overflow(old, static_cast<int64_t>(number), &now)) {
      reply_error(c.out, "add() on key '" + clip_for_message(keys[0]) + "' overflows int64 (" + std::to_string(old) +
                             " + " + std::to_string(static_cast<int64_t>(number)) + ")");
      return;
    }
    data[keys[0]] = std::to_string(now);
    w.u8(kOk).u64(static_cast<uint64_t>(now));
  } else {
    w.u8(kOk).u8(all_set(keys) ? 1 : 0);
  }
  append(c.out, w);
}

bool TcpStoreServer::State::step(Client& c, Clock::time_point now) {
  bool any = false;
  if (c.parked && (all_set(c.keys) || now >= c.deadline)) {
    answer_parked(c, !all_set(c.keys));
    any = true;
  }
  while (!c.parked && !c.dead && c.in.size() >= 4) {
    const uint32_t n = net::frame_length(c.in.data());
    if (n > net::kMaxFrame) {
      c.dead = true;
      break;
    }
    if (c.in.size() < 4 + size_t(n)) break;
    net::FrameReader r(c.in.data() + 4, n);
    handle(c, r);
    c.in.erase(c.in.begin(), c.in.begin() + 4 + n);
    any = true;
  }
  return any;
}

void TcpStoreServer::State::serve(int wake_fd) {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listener.get(), POLLIN, 0});
    auto next = Clock::time_point::max();
    for (auto& [fd, c] : clients) {
      fds.push_back({fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      if (c.parked) next = std::min(next, c.deadline);
    }
    int timeout = -1;  // no parked waits: sleep until a request comes
    if (next != Clock::time_point::max()) {
      timeout = int(std::clamp<int64_t>(std::chrono::ceil<Millis>(next - Clock::now()).count(), 0, 1 << 30));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      std::fprintf(stderr, "TcpStoreServer: poll failed (%s); the store stops serving\n", std::strerror(errno));
      return;
    }
    if (fds[0].revents) return;  // the destructor asks us to stop
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Client& c = clients.at(fds[i].fd);
      if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !read_from(c)) c.dead = true;
    }
    // A SET may answer clients parked earlier in the map's order, whose next requests may
    // answer others: repeat until nothing moves.
    const auto now = Clock::now();
    for (bool any = true; any;) {
      any = false;
      for (auto& [fd, c] : clients)
        if (!c.dead) any |= step(c, now);
    }
    for (auto it = clients.begin(); it != clients.end();) {
      Client& c = it->second;
      if (!c.dead && !c.out.empty() && !flush(c)) c.dead = true;
      it = c.dead ? clients.erase(it) : std::next(it);
    }
  }
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port) : state_(std::make_unique<State>()) {
  state_->listener = net::listen_tcp(host, port);
  port_ = net::local_port(state_->listener.get());
  wake_ = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  RT_CHECK(wake_, "TcpStoreServer: eventfd: ", std::strerror(errno));
  thread_ = std::thread([this] {
    try {
      state_->serve(wake_.get());
    } catch (const std::exception& e) {  // out of memory: nobody to throw to on this thread
      std::fprintf(stderr, "TcpStoreServer on port %d stopped: %s\n", port_, e.what());
    }
    state_->clients.clear();  // clients see the connection close instead of a silent store
  });
}

TcpStoreServer::~TcpStoreServer() {
  const uint64_t one = 1;
  // An eventfd write cannot fail short of a counter overflow; the loop wakes on any value.
  [[maybe_unused]] const ssize_t k = ::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable()) thread_.join();
}

// ---------------------------------------------------------------------------------------
// Client

TcpStore::TcpStore(const std::string& host, int port, Millis timeout) : host_(host), port_(port), timeout_(timeout) {
  try {
    fd_ = net::connect_tcp(host, port, timeout);
  } catch (const Error& e) {
    RT_FAIL("TcpStore: ", e.what(),
            ". Rank 0 hosts the store: check that rank 0 is running and got to its rendezvous, that MASTER_ADDR and "
            "MASTER_PORT are the same on every rank and reachable from this host, or give rank 0 more time (a longer "
            "rendezvous timeout)");
  }
}

std::vector<uint8_t> TcpStore::request(const char* op, net::FrameWriter& req, Millis wait) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string where = net::endpoint(host_, port_);
  RT_CHECK(broken_.empty(), "TcpStore ", op, " on ", where, ": the connection failed earlier (", broken_,
           "); the store cannot be used any more");
  const auto start = Clock::now();
  const auto& frame = req.finish();
  // The server answers a wait by its deadline; timeout_ is the slack for the round trip.
  const auto deadline = start + Millis(wait_ms(wait)) + timeout_;
  net::Io io = net::send_all(fd_.get(), frame.data(), frame.size(), start + timeout_);
  uint8_t header[4];
  std::vector<uint8_t> body;
  if (io == net::Io::ok) io = net::recv_all(fd_.get(), header, 4, deadline);
  if (io == net::Io::ok) {
    const uint32_t n = net::frame_length(header);
    RT_CHECK(n >= 1 && n <= net::kMaxFrame, "TcpStore ", op, " on ", where, ": the reply is not the store's protocol (",
             n, " bytes announced): is MASTER_PORT another service's port?");
    body.resize(n);
    io = net::recv_all(fd_.get(), body.data(), n, deadline);
  }
  if (io != net::Io::ok) {
    broken_ = net::describe(io, errno) + " after " + net::seconds(Clock::now() - start);
    fd_.reset();
    RT_FAIL("TcpStore ", op, " on ", where, ": ", broken_,
            ". The store lives in rank 0's process: rank 0 exited or crashed (see its log), or the network to it "
            "failed");
  }
  net::FrameReader r(body.data(), body.size());
  const uint8_t status = r.u8();
  if (status == kTimedOut) {
    const auto missing = read_keys(r);
    RT_FAIL("TcpStore ", op, ": ", missing_keys(missing), " not set within ", net::seconds(Clock::now() - start),
            " (store ", where,
            "). Whichever rank sets ", missing.size() == 1 ? "it" : "them", " has not got there: check that every rank started and none failed first (their "
            "logs), that all ranks have the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise the timeout for a "
            "slow rank");
  }
  RT_CHECK(status != kError, "TcpStore ", op, " on ", where, ": ", r.str());
  return std::vector<uint8_t>(body.begin() + 1, body.end());
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  net::FrameWriter w;
  w.u8(kSet).str(key).bytes(value);
  request("set", w, Millis(0));
}

Bytes TcpStore::get(const std::string& key, Millis timeout) {
  net::FrameWriter w;
  w.u8(kGet).str(key).u64(wait_ms(timeout));
  const auto body = request("get", w, timeout);
  net::FrameReader r(body.data(), body.size());
  Bytes value = r.bytes();
  RT_CHECK(r.ok(), "TcpStore get on ", net::endpoint(host_, port_), ": a truncated reply");
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  net::FrameWriter w;
  w.u8(kWait).u64(keys.size());
  for (const auto& k : keys) w.str(k);
  w.u64(wait_ms(timeout));
  request("wait", w, timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  net::FrameWriter w;
  w.u8(kAdd).str(key).u64(static_cast<uint64_t>(delta));
  const auto body = request("add", w, Millis(0));
  net::FrameReader r(body.data(), body.size());
  const auto v = static_cast<int64_t>(r.u64());
  RT_CHECK(r.ok(), "TcpStore add on ", net::endpoint(host_, port_), ": a truncated reply");
  return v;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  net::FrameWriter w;
  w.u8(kCheck).u64(keys.size());
  for (const auto& k : keys) w.str(k);
  const auto body = request("check", w, Millis(0));
  net::FrameReader r(body.data(), body.size());
  const bool set = r.u8() != 0;
  RT_CHECK(r.ok(), "TcpStore check on ", net::endpoint(host_, port_), ": a truncated reply");
  return set;
}

}  // namespace rt::dist
