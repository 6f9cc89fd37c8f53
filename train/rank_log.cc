#include "train/rank_log.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace rt::train {
namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= size_t(w);
  }
}

// What the fatal-signal handler drains (Note [Whole rank logs]): set while a RankLog copies.
std::atomic<int> g_read[2] = {-1, -1}, g_saved[2] = {-1, -1}, g_file{-1};
constexpr int kFatal[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
struct sigaction g_previous[sizeof kFatal / sizeof kFatal[0]];

// Async-signal-safe: reads what is left in the pipes without blocking, copies it, then lets
// the signal do what it did before (the default: end the process, dump core).
void drain_on_fatal_signal(int sig) {
  char buf[4096];
  for (int s = 0; s < 2; ++s) {
    const int fd = g_read[s].load();
    if (fd < 0) continue;
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    for (ssize_t k; (k = ::read(fd, buf, sizeof buf)) > 0;) {
      if (const int f = g_file.load(); f >= 0) write_all(f, buf, size_t(k));
      if (const int o = g_saved[s].load(); o >= 0) write_all(o, buf, size_t(k));
    }
  }
  for (size_t i = 0; i < sizeof kFatal / sizeof kFatal[0]; ++i)
    if (kFatal[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);
}

}  // namespace

RankLog::RankLog() {
  std::fflush(nullptr);
  for (int s = 0; s < 2; ++s) {
    const int fd = s == 0 ? STDOUT_FILENO : STDERR_FILENO;
    int fds[2];
    RT_CHECK(pipe2(fds, O_CLOEXEC) == 0, "rank log: pipe: ", std::strerror(errno));
    saved_[s] = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    dup2(fds[1], fd);
    close(fds[1]);
    read_[s] = fds[0];
    g_read[s] = read_[s];
    g_saved[s] = saved_[s];
  }
  struct sigaction sa = {};
  sa.sa_handler = drain_on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof kFatal / sizeof kFatal[0]; ++i) ::sigaction(kFatal[i], &sa, &g_previous[i]);
  copier_ = std::thread([this] {
    pollfd p[2] = {{read_[0], POLLIN, 0}, {read_[1], POLLIN, 0}};
    int open = 2;
    char buf[8192];
    while (open > 0) {
      if (poll(p, 2, -1) < 0 && errno != EINTR) return;
      for (int s = 0; s < 2; ++s) {
        if (p[s].fd < 0 || !(p[s].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t k = read(p[s].fd, buf, sizeof buf);
        if (k <= 0) {  // every writer closed: the stream was put back
          p[s].fd = -1;
          --open;
          continue;
        }
        write_copy(buf, size_t(k));
        write_all(saved_[s], buf, size_t(k));
      }
    }
  });
}

void RankLog::write_copy(const char* data, size_t n) {
  std::lock_guard<std::mutex> g(mu_);
  if (file_ >= 0) write_all(file_, data, n);
  else early_.append(data, n);
}

void RankLog::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  RT_CHECK(fd >= 0, "cannot open the rank log ", path, ": ", std::strerror(errno));
  std::fflush(nullptr);
  std::lock_guard<std::mutex> g(mu_);
  if (file_ >= 0) ::close(file_);
  file_ = fd;
  write_all(file_, early_.data(), early_.size());
  early_.clear();
  early_.shrink_to_fit();
  g_file = file_;
}

RankLog::~RankLog() {
  std::fflush(nullptr);
  for (size_t i = 0; i < sizeof kFatal / sizeof kFatal[0]; ++i) ::sigaction(kFatal[i], &g_previous[i], nullptr);
  g_file = -1;
  for (auto& r : g_read) r = -1;
  for (auto& s : g_saved) s = -1;
  // Putting stdout and stderr back closes the pipes' last writers: the copier drains and ends.
  dup2(saved_[0], STDOUT_FILENO);
  dup2(saved_[1], STDERR_FILENO);
  if (copier_.joinable()) copier_.join();
  for (int s = 0; s < 2; ++s) {
    close(read_[s]);
    close(saved_[s]);
  }
  if (file_ >= 0) ::close(file_);
}

}  // namespace rt::train
