#include "data/pack/pack_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/error.h"

namespace rt::data {

namespace {

// The "host pid" line the holder wrote; "an unknown process" when it has not yet written it.
std::string holder_of(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, size_t(n > 0 ? n : 0));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

PackOutputLock::PackOutputLock(const std::string& output) {
  const std::string path = output + ".lock";
  // The path must still name the file we locked: someone may have deleted it meanwhile (pack
  // never does; Note [Pack output lock]), and a lock on an unlinked file keeps nobody out.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    RT_CHECK(fd >= 0, "pack: cannot create the lock file '", path, "': ", std::strerror(errno),
             "; --output must be in a folder this user can write");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      // The holder writes its line right after locking: give it a moment to appear.
      std::string holder = e == EWOULDBLOCK ? holder_of(fd) : std::string();
      for (int wait = 0; e == EWOULDBLOCK && holder.empty() && wait < 100; ++wait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        holder = holder_of(fd);
      }
      ::close(fd);
      RT_CHECK(e != EWOULDBLOCK, "pack: '", output, "' is being written by another pack (",
               holder.empty() ? std::string("a process that has not yet written its host and pid") :
                                "host and pid: " + holder,
               ", holding '", path, "'); wait for it to finish or stop it (kill <pid> on that host), then run this ",
               "again (it resumes after that pack's finished shards), or choose another --output");
      RT_FAIL("pack: cannot lock '", path, "': ", std::strerror(e), "; put --output on a local file system");
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
      char host[256] = "unknown-host";
      ::gethostname(host, sizeof host - 1);
      const std::string line = std::string(host) + " " + std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) != ssize_t(line.size())) {
        const int e = errno;
        ::close(fd);
        RT_FAIL("pack: cannot write the lock file '", path, "': ", std::strerror(e));
      }
      fd_ = fd;
      return;
    }
    ::close(fd);  // locked a file that is no longer at `path`: lock the one that is
  }
  RT_FAIL("pack: the lock file '", path, "' keeps being replaced while pack locks it; stop whatever deletes it");
}

PackOutputLock::~PackOutputLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace rt::data
