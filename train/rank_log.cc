#include "train/rank_log.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace rt::train {

RankLog::RankLog(const std::string& path) {
  file_ = std::fopen(path.c_str(), "a");
  RT_CHECK(file_, "cannot open the rank log ", path, ": ", std::strerror(errno));
  std::fflush(nullptr);
  for (int s = 0; s < 2; ++s) {
    const int fd = s == 0 ? STDOUT_FILENO : STDERR_FILENO;
    int fds[2];
    RT_CHECK(pipe2(fds, O_CLOEXEC) == 0, "rank log: pipe: ", std::strerror(errno));
    saved_[s] = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    dup2(fds[1], fd);
    close(fds[1]);
    read_[s] = fds[0];
  }
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
        std::fwrite(buf, 1, size_t(k), file_);
        std::fflush(file_);
        for (ssize_t off = 0; off < k;) {
          const ssize_t w = write(saved_[s], buf + off, size_t(k - off));
          if (w <= 0) break;
          off += w;
        }
      }
    }
  });
}

RankLog::~RankLog() {
  std::fflush(nullptr);
  // Putting stdout and stderr back closes the pipes' last writers: the copier drains and ends.
  dup2(saved_[0], STDOUT_FILENO);
  dup2(saved_[1], STDERR_FILENO);
  if (copier_.joinable()) copier_.join();
  for (int s = 0; s < 2; ++s) {
    close(read_[s]);
    close(saved_[s]);
  }
  std::fclose(file_);
}

}  // namespace rt::train
