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
// Bazel would join the runs that wrote it, and an old build's launches could cover a new
// build's instantiation. Every line therefore names its run, one process: its first write
// starts with "run ID pid=PID build=BUILD program=PATH" (ID 16 random hex digits, new in
// every process and in a forked child, which starts a run of its own; BUILD the program's
// GNU build-id, a hash of the linked code, else the binary's mtime and size), and each line
// after it reads "ID compiled KEY" or "ID launched KEY". The tool counts a "launched" line
// only for a key its own run lists compiled, refuses a log in which one program's runs are
// of two builds (the reused FILE: remove it), and refuses a line of no run (the format
// before run ids, a line cut short) naming the file and line. Runs of different programs in
// one FILE are still joined, as a test's launcher and the programs it starts must be: a
// FILE reused across builds with different programs is caught only where some program ran
// in both. The cost is per process and per instantiation, not per launch: the header, the
// build-id and the id once, at the first line written.
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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
  std::string run;                // this process's run id, "" until its first line is written
  bool hooks = false;             // the exit and fork handlers are installed
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

// dl_iterate_phdr's callback: appends to *out (a std::string) the main program's GNU build-id
// in hex, nothing when it was linked without one. The linker hashes the linked code into it, so
// a rebuild that changes the program changes it, and a rerun of the same binary keeps it.
int find_build_id(dl_phdr_info* info, size_t, void* out) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;  // a note's name and descriptor are padded to it
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + (n->n_namesz + align - 1) / align * align;
      if (desc + n->n_descsz > end) break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
        std::string& hex = *static_cast<std::string*>(out);
        for (size_t b = 0; b < n->n_descsz; ++b) {
          char two[3];
          std::snprintf(two, sizeof two, "%02x", unsigned(static_cast<unsigned char>(desc[b])));
          hex += two;
        }
        return 1;
      }
      p = desc + (n->n_descsz + align - 1) / align * align;
    }
  }
  return 1;  // the first object is the main program: stop there
}

// The header of this process's run, which every later line's id refers to: the id, the pid,
// which build of which program (Note [Kernel coverage]).
std::string run_header(const std::string& run) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string program = n > 0 ? std::string(exe, size_t(n)) : "?";
  std::replace(program.begin(), program.end(), '\n', ' ');
  std::string build;
  dl_iterate_phdr(find_build_id, &build);
  struct stat st;
  if (build.empty() && ::stat("/proc/self/exe", &st) == 0)  // linked without a build-id: its file's age
    build = "mtime-" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + "-size-" +
            std::to_string(st.st_size);
  if (build.empty()) build = "?";
  return "run " + run + " pid=" + std::to_string(::getpid()) + " build=" + build + " program=" + program + "\n";
}

// 64 random bits in hex, not the pid: pids recur across the runs that a reused FILE holds.
std::string new_run_id() {
  uint64_t id = 0;
  if (::getrandom(&id, sizeof id, 0) != ssize_t(sizeof id)) {
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    id = (uint64_t(t.tv_sec) * 1000000007u + uint64_t(t.tv_nsec)) ^ (uint64_t(::getpid()) << 40);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  return hex;
}

// The run's header if nothing of this process is in the log yet, then the "compiled" lines
// not yet written; with r.mu held.
std::string pending_lines(Registry& r) {
  std::string out;
  if (r.run.empty()) {
    r.run = new_run_id();
    out = run_header(r.run);
  }
  for (; r.compiled_written < r.keys.size(); ++r.compiled_written)
    out += r.run + " compiled " + r.keys[r.compiled_written] + "\n";
  return out;
}

void write_at_exit() {
  Registry& r = registry();
  std::string out;
  {
    std::lock_guard<std::mutex> g(r.mu);
    if (r.compiled_written < r.keys.size()) out = pending_lines(r);
  }
  append(out);
}

// A forked child is a run of its own (its pid in the header, its launches under its id): it
// starts with nothing written and nothing launched. The registry's lock is held across the
// fork so that the child's copy is never locked by a thread the child does not have.
void before_fork() { registry().mu.lock(); }
void after_fork_in_parent() { registry().mu.unlock(); }
void after_fork_in_child() {
  Registry& r = registry();
  r.mu.unlock();
  r.run.clear();
  r.compiled_written = 0;
  std::fill(r.launched.begin(), r.launched.end(), 0);
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
  if (!r.hooks && !log_path().empty()) {
    r.hooks = true;
    std::atexit(write_at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
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
    out = pending_lines(r) + r.run + " launched " + r.keys[site.instantiation] + "\n";
  }
  append(out);
}

}  // namespace rt::emu
