#include "train/output_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "base/usage_error.h"
#include "distributed/net_util.h"
#include "base/error.h"
#include "engine/io/safetensors.h"

namespace rt::train {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunFiles[] = {"checkpoint.safetensors", "model.safetensors"};

// The pid of a save's temporary file "<name>.safetensors.tmp.<pid>", or 0 for other files.
pid_t temp_file_pid(const std::string& name) {
  const std::string mark = std::string(".safetensors") + kSaveTempMark;
  const size_t at = name.rfind(mark);
  if (at == std::string::npos || at + mark.size() == name.size()) return 0;
  const std::string digits = name.substr(at + mark.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return pid_t(std::stol(digits));
}

// A kill -9 or a crash in the middle of a save leaves its temporary file (up to a
// checkpoint's size). The pid in the name tells whether its writer still runs.
void remove_stale_temp_files(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const pid_t pid = temp_file_pid(name);
    if (pid <= 0 || !e.is_regular_file(ec)) continue;
    // Our own pid: a recycled one (containers reuse pids), as this process has saved nothing yet.
    if (pid != ::getpid() && (::kill(pid, 0) == 0 || errno != ESRCH)) {
      std::printf("%s: left as it is: process %d, which may be writing it, still runs (another run writing to "
                  "this --output-dir?)\n",
                  e.path().c_str(), int(pid));
      continue;
    }
    if (fs::remove(e.path(), ec))
      std::printf("removed %s: the temporary file of a save that process %d (no longer running) did not finish\n",
                  e.path().c_str(), int(pid));
    else
      std::fprintf(stderr, "cannot remove the stale temporary file %s: %s\n", e.path().c_str(), ec.message().c_str());
  }
}

// "20240131-235959", local time.
std::string timestamp() {
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&t));
  return stamp;
}

}  // namespace

OutputDirLock::OutputDirLock(const fs::path& dir) {
  const fs::path path = dir / "run.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  RT_CHECK(fd_ >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    std::string who = n > 0 ? std::string(holder, size_t(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    ::close(fd_);
    fd_ = -1;
    RT_CHECK(err == EWOULDBLOCK, "cannot lock ", path.string(), ": ", std::strerror(err));
    throw UsageError("--output-dir '" + dir.string() + "' is in use by a run that is still going (" + who +
                     "): two runs writing one directory would interleave its files. Wait for that run to "
                     "end (or stop it: it saves a checkpoint), or choose another --output-dir");
  }
  const std::string me = "pid " + std::to_string(getpid()) + " on " + dist::net::host_name() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
    std::fprintf(stderr, "warning: cannot write %s (%s); the lock holds all the same\n", path.c_str(),
                 std::strerror(errno));
}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

OutputDirLock prepare_output_dir(const std::string& dir_arg, const std::string& resume) {
  const fs::path dir = dir_arg.empty() ? fs::path(".") : fs::path(dir_arg);
  std::error_code ec;
  fs::create_directories(dir, ec);
  RT_CHECK(!ec, "cannot create --output-dir '", dir.string(), "': ", ec.message());
  RT_CHECK(::access(dir.c_str(), W_OK) == 0, "--output-dir '", dir.string(), "' is not writable");
  OutputDirLock lock(dir);
  std::string existing;
  for (const char* f : kRunFiles)
    if (existing.empty() && fs::exists(dir / f, ec)) existing = (dir / f).string();
  if (!existing.empty() && resume.empty())
    throw UsageError("--output-dir '" + dir.string() + "' already holds a checkpoint of another run (" + existing +
                     "): pass --resume " + (dir / "checkpoint.safetensors").string() +
                     " to continue it, or choose another --output-dir (nothing is overwritten)");
  // Like any file that cannot be read (--init-weights, --data-path): status 1.
  RT_CHECK(resume.empty() || fs::is_regular_file(resume, ec), "--resume '", resume,
           "': no such file (expected a checkpoint.safetensors)");
  if (!existing.empty()) {
    const fs::path from = fs::path(resume).parent_path().empty() ? fs::path(".") : fs::path(resume).parent_path();
    if (!fs::equivalent(dir, from, ec))
      throw UsageError("--output-dir '" + dir.string() + "' holds another run (" + existing + "); resuming " +
                            resume + " there would overwrite it. Resume into the checkpoint's own directory (leave "
                            "out --output-dir) or into an empty one");
  }
  remove_stale_temp_files(dir);
  return lock;
}

fs::path open_output_dir(const OutputConfig& out, const std::string& run_name, OutputDirLock& lock) {
  std::string dir = out.output_dir;
  if (dir.empty())
    dir = out.resume.empty() ? "runs/" + run_name + "-" + timestamp() : fs::path(out.resume).parent_path().string();
  lock = prepare_output_dir(dir, out.resume);
  return dir.empty() ? fs::path(".") : fs::path(dir);
}

}  // namespace rt::train
