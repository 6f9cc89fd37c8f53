// Errors of the emulated runtime: the per-thread last error, the per-device sticky fault
// (Note [Sticky faults] in internal.h) and its report, and source lines for a faulting
// instruction.
#include <dlfcn.h>
#include <elf.h>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu/internal.h"

namespace rt::emu {
namespace {

thread_local cudaError_t tls_last_error = cudaSuccess;

struct Sticky {
  std::mutex mu;
  std::atomic<int> code[64] = {};
  std::string last_report;
};
Sticky& sticky() {
  static auto* s = new Sticky;  // leaked: read by workers until the process ends
  return *s;
}

bool abort_on_fault() {
  static const bool v = [] {
    const char* e = std::getenv("RINGTAPE_EMU_ABORT");
    return e && *e && *e != '0';
  }();
  return v;
}

// ELF type of a loaded file: relative addresses for addr2line in shared objects and PIEs.
bool is_position_independent(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return true;
  Elf64_Ehdr eh{};
  const bool ok = std::fread(&eh, sizeof eh, 1, f) == 1;
  std::fclose(f);
  return !ok || eh.e_type == ET_DYN;
}

}  // namespace

void set_last_error(cudaError_t e) {
  if (e != cudaSuccess) tls_last_error = e;
}
cudaError_t peek_last_error() { return tls_last_error; }

cudaError_t sticky_error(int device) {
  if (device < 0 || device >= 64) return cudaSuccess;
  return cudaError_t(sticky().code[device].load(std::memory_order_acquire));
}

void set_sticky(int device, cudaError_t e, const std::string& report) {
  Sticky& s = sticky();
  {
    std::lock_guard<std::mutex> g(s.mu);
    s.last_report = report;
  }
  int expected = 0;
  s.code[device].compare_exchange_strong(expected, int(e));
  std::fprintf(stderr, "%s\n", report.c_str());
  std::fflush(stderr);
  if (abort_on_fault()) std::abort();
}

namespace {
// addr2line's lines for `a` in the loaded file holding it, with `flags` ("", "-f -C", "-i").
std::vector<std::string> addr2line(const void* a, const char* flags) {
  Dl_info info{};
  if (!a || !dladdr(a, &info) || !info.dli_fname) return {};
  const auto v = reinterpret_cast<uintptr_t>(a);
  const uintptr_t addr = is_position_independent(info.dli_fname) ? v - reinterpret_cast<uintptr_t>(info.dli_fbase) : v;
  char cmd[1200];
  std::snprintf(cmd, sizeof cmd, "addr2line %s -e '%s' %#" PRIxPTR " 2>/dev/null", flags, info.dli_fname, addr);
  FILE* p = popen(cmd, "r");
  if (!p) return {};
  std::vector<std::string> lines;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), int(buf.size()), p)) {
    std::string line = buf.data();
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    if (line.empty() || line[0] == '?') break;
    lines.push_back(line);
  }
  pclose(p);
  return lines;
}

// A line of addr2line as a repository path (Bazel compiles in /proc/self/cwd), without the
// discriminator (which tells apart code of one line, copies included).
std::string source_line(std::string line) {
  for (const char* prefix : {"/proc/self/cwd/", "/execroot/ringtape/"}) {
    const size_t k = line.rfind(prefix);
    if (k != std::string::npos) line = line.substr(k + std::strlen(prefix));
  }
  if (line.rfind("./", 0) == 0) line = line.substr(2);
  if (const size_t d = line.find(" (discriminator"); d != std::string::npos) line.resize(d);
  return line;
}
}  // namespace

std::vector<std::string> inline_chain(const void* pc) {
  static std::mutex mu;
  static std::map<const void*, std::vector<std::string>> cache;
  {
    std::lock_guard<std::mutex> g(mu);
    if (auto it = cache.find(pc); it != cache.end()) return it->second;
  }
  // The return address points after the call: the instruction is the one before.
  std::vector<std::string> chain = pc ? addr2line(static_cast<const char*>(pc) - 1, "-i") : std::vector<std::string>{};
  for (std::string& l : chain) l = source_line(l);
  std::lock_guard<std::mutex> g(mu);
  return cache.emplace(pc, std::move(chain)).first->second;
}

std::string symbolize(const void* pc) {
  // The innermost line outside the device header (an atomic's or a shuffle's is the kernel's call).
  const std::vector<std::string> chain = inline_chain(pc);
  for (const std::string& l : chain)
    if (l.rfind("cuda_emu/simt.h:", 0) != 0) return l;
  return chain.empty() ? "" : chain.front();
}

std::string function_name(const void* fn) {
  const std::vector<std::string> lines = addr2line(fn, "-f -C");
  return lines.empty() ? "" : lines.front();
}

std::string last_fault() {
  Sticky& s = sticky();
  std::lock_guard<std::mutex> g(s.mu);
  return s.last_report;
}

void clear_faults() {
  Sticky& s = sticky();
  std::lock_guard<std::mutex> g(s.mu);
  s.last_report.clear();
  for (auto& c : s.code) c.store(0);
  tls_last_error = cudaSuccess;
}

}  // namespace rt::emu

// cudaGetLastError is in runtime_api.cc; it clears tls_last_error through this.
namespace rt::emu {
cudaError_t take_last_error() {
  const cudaError_t e = tls_last_error;
  tls_last_error = cudaSuccess;
  return e;
}
}  // namespace rt::emu
