#include "cli/plot_files.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"

extern char** environ;

namespace rt::cli {

using detail::cat;

std::string find_on_path(const std::string& name) {
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end > start ? path.substr(start, end - start) : ".";  // POSIX: "" is "."
    const std::string file = dir + "/" + name;
    struct stat st;
    if (::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(file.c_str(), X_OK) == 0) return file;
    start = end + 1;
  }
  return "";
}

TempFile::TempFile(const std::string& path, const std::string& suffix) {
  const std::string tmp = cat(path, ".tmp.", ::getpid(), suffix);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  RT_CHECK(fd >= 0, "cannot create '", tmp, "' (the temporary file for '", path, "'): ", std::strerror(errno),
           errno == EEXIST ? " (left by an earlier plot: remove it)" : " (is its directory writable?)");
  ::close(fd);
  path_ = tmp;
}

TempFile::~TempFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  TempFile tmp(path);
  const int fd = ::open(tmp.path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  RT_CHECK(fd >= 0, "cannot open '", tmp.path(), "': ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(cat("writing '", tmp.path(), "' failed: ", std::strerror(err), " (disk full?)"));
    }
    done += size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  RT_CHECK(synced, "writing '", tmp.path(), "' failed: ", std::strerror(err));
  RT_CHECK(::rename(tmp.path().c_str(), path.c_str()) == 0, "cannot rename '", tmp.path(), "' to '", path,
           "': ", std::strerror(errno));
  tmp.release();  // renamed: nothing to remove
}

void svg_to_png(const std::string& rsvg, const std::string& svg_path, const std::string& png_path) {
  // At twice the SVG's size: sharp on high-density screens and when zoomed in.
  TempFile tmp(png_path);
  std::vector<std::string> args = {rsvg, "--format", "png", "--zoom", "2", "--output", tmp.path(), svg_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, rsvg.c_str(), nullptr, nullptr, argv.data(), environ);
  RT_CHECK(rc == 0, "cannot run '", rsvg, "': ", std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    RT_CHECK(errno == EINTR, "waiting for '", rsvg, "' failed: ", std::strerror(errno));
  RT_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "'", rsvg, "' could not render '", svg_path, "' as PNG (",
           WIFEXITED(status) ? cat("exit status ", WEXITSTATUS(status)) : cat("signal ", WTERMSIG(status)),
           "; its message, if any, is above); the SVG is fine to open in a browser");
  RT_CHECK(::rename(tmp.path().c_str(), png_path.c_str()) == 0, "cannot rename '", tmp.path(), "' to '", png_path,
           "': ", std::strerror(errno));
  tmp.release();
}

}  // namespace rt::cli
