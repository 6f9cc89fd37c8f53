// Which kernel instantiations the program has and which it launched, for the CI check that
// every one the emulated suites compile is run by some test (tools/emu_kernel_coverage.py).
//
// Note [Kernel coverage]
// A kernel template instantiated for a type that no test launches is CUDA code that CI has
// compiled but never run, and a launch site that no test reaches (a fallback, a tail) is a
// path no check has seen. RT_LAUNCH (cuda_emu/simt.h) makes one Instantiation per launch
// site and argument types, i.e. per kernel instantiation as the site launches it; its
// static member is initialised before main in every program the code is linked into, so
// the program knows all of them whether or not it runs them. With
// RINGTAPE_EMU_KERNEL_LOG=FILE the program appends to FILE one "compiled KEY" line per
// instantiation (at its first launch, and at exit for a program that launched nothing) and
// one "launched KEY" line at the first launch of each. KEY is the site and the kernel's
// instantiated name ("kernels/cuda/cast.cu:57 rt::cuda::cast_kernel<float, __half>"), or,
// where GCC cannot name it from the launch (template arguments deduced from the call), the
// kernel as written with the argument types. A relative FILE is taken in the test's
// undeclared-outputs folder when Bazel runs the test ($TEST_UNDECLARED_OUTPUTS_DIR), so
// every test's log comes back in bazel-testlogs/.../test.outputs; CI sets it for the
// emulated runs (.bazelrc) and tools/emu_kernel_coverage.py joins the logs: a compiled
// instantiation that no test launched fails CI, named. Several processes of one test (the
// multi-process suites) append to one file; lines are written whole with O_APPEND. The file
// is never truncated (no process of a group knows it is the first), so a FILE reused outside
// Bazel joins the runs that wrote it: remove it before a run whose log is to be read alone.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cuda_emu/internal.h"
#include "cuda_emu/ptxas.h"

namespace rt::emu {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::string> keys;  // [instantiation]
  std::vector<char> launched;     // [instantiation]: launched in this process
  size_t compiled_written = 0;    // keys[0, compiled_written) are in the log
  bool at_exit = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the exit handler uses it
  return *r;
}

// The value after "A = " in argument_types' pretty name: "{long int, float*}" or "long int".
std::string argument_list(const char* pretty) {
  if (!pretty) return "";
  std::string_view p(pretty);
  const size_t at = p.find("A = ");
  if (at == std::string_view::npos) return "()";  // no arguments: GCC prints no "[with ...]"
  p.remove_prefix(at + 4);
  if (!p.empty() && p.back() == ']') p.remove_suffix(1);
  if (p.size() >= 2 && p.front() == '{' && p.back() == '}') p = p.substr(1, p.size() - 2);
  return "(" + std::string(p) + ")";
}

std::string key_of(const LaunchSite& s) {
  std::string_view file(s.file);
  if (file.substr(0, 2) == "./") file.remove_prefix(2);  // a header included as "./kernels/..."
  std::string key = std::string(file) + ":" + std::to_string(s.line) + " ";
  const bool resolved = s.pretty && !std::strstr(s.pretty, "= (&");  // as perf.cc: GCC named it
  key += resolved ? instance_from_pretty(s.pretty) : std::string(s.kernel) + " " + argument_list(s.args);
  for (char& c : key)
    if (c == '\n') c = ' ';
  return key;
}

// The log's path, or "" when there is none (read once).
const std::string& log_path() {
  static const std::string path = [] {
    const char* p = std::getenv("RINGTAPE_EMU_KERNEL_LOG");
    if (!p || !*p) return std::string();
    const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
    if (p[0] != '/' && dir && *dir) return std::string(dir) + "/" + p;
    return std::string(p);
  }();
  return path;
}

void append(const std::string& text) {
  if (text.empty()) return;
  const int fd = ::open(log_path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "cuda-emu: RINGTAPE_EMU_KERNEL_LOG: cannot open '%s': %s\n", log_path().c_str(),
                 std::strerror(errno));
    return;
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += size_t(n);
  }
  ::close(fd);
}

// The "compiled" lines not yet written; with r.mu held.
std::string compiled_lines(Registry& r) {
  std::string out;
  for (; r.compiled_written < r.keys.size(); ++r.compiled_written)
    out += "compiled " + r.keys[r.compiled_written] + "\n";
  return out;
}

void write_at_exit() {
  Registry& r = registry();
  std::string out;
  {
    std::lock_guard<std::mutex> g(r.mu);
    out = compiled_lines(r);
  }
  append(out);
}

}  // namespace

int register_instantiation(const LaunchSite& site) noexcept {
  Registry& r = registry();
  std::string key;
  try {
    key = key_of(site);
  } catch (...) {
    return -1;  // out of memory before main: the launch still runs, unlogged
  }
  std::lock_guard<std::mutex> g(r.mu);
  r.keys.push_back(std::move(key));
  r.launched.push_back(0);
  if (!r.at_exit && !log_path().empty()) {
    r.at_exit = true;
    std::atexit(write_at_exit);
  }
  return int(r.keys.size()) - 1;
}

void note_launched(const LaunchSite& site) {
  if (site.instantiation < 0 || log_path().empty()) return;
  Registry& r = registry();
  std::string out;
  {
    std::lock_guard<std::mutex> g(r.mu);
    if (size_t(site.instantiation) >= r.launched.size() || r.launched[site.instantiation]) return;
    r.launched[site.instantiation] = 1;
    out = compiled_lines(r) + "launched " + r.keys[site.instantiation] + "\n";
  }
  append(out);
}

}  // namespace rt::emu
