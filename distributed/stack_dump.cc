#include "distributed/stack_dump.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

namespace rt::dist {
namespace {

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

std::string thread_name(pid_t pid, pid_t tid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

struct Walk {
  Dwfl* dwfl;
  pid_t pid;
  int max_frames;
  ProcessStacks* out;
};

int on_frame(Dwfl_Frame* frame, void* arg) {
  Walk& w = *static_cast<Walk*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: look up the call itself.
  const Dwarf_Addr at = activation ? pc : pc - 1;
  StackFrame f;
  if (Dwfl_Module* m = dwfl_addrmodule(w.dwfl, at)) {
    f.function = demangle(dwfl_module_addrname(m, at));
    if (Dwfl_Line* l = dwfl_module_getsrc(m, at)) {
      int line = 0;
      if (const char* file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr)) {
        f.file = file;
        f.line = line;
      }
    }
  } else {
    f.function = "?";
  }
  std::vector<StackFrame>& frames = w.out->threads.back().frames;
  frames.push_back(std::move(f));
  return int(frames.size()) >= w.max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int on_thread(Dwfl_Thread* thread, void* arg) {
  Walk& w = *static_cast<Walk*>(arg);
  ThreadStack t;
  t.tid = dwfl_thread_tid(thread);
  t.name = thread_name(w.pid, t.tid);
  w.out->threads.push_back(std::move(t));
  dwfl_thread_getframes(thread, on_frame, &w);  // a walk that ends early keeps the frames it found
  return DWARF_CB_OK;
}

bool own_code(const StackFrame& f) {
  return !f.file.empty() && f.file[0] != '/' && f.file.rfind("external/", 0) != 0 && f.file.rfind("../", 0) != 0 &&
         f.file.rfind("./", 0) != 0;
}

}  // namespace

void release_threads(pid_t pid) {
  // Note [Threads a reader leaves traced]
  // libdw attaches to each thread as it walks it and detaches at dwfl_end, but a thread that
  // exits while attached (the process was ending as its stacks were read) stays this process's
  // tracee: its zombie waits for the tracer to reap it, and until then the kernel never
  // reports the whole process as ended to its parent (the launcher then waited for a rank that
  // had died, forever: 1 run in 20 of tests/train/restart_launch_test). So every thread still
  // listed is detached (ESRCH where it is not ours) and reaped where it ended (ECHILD where it
  // is not ours).
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const pid_t tid = pid_t(std::atoi(e.path().filename().c_str()));
    if (tid <= 0) continue;
    (void)::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    if (tid != pid) {
      int status = 0;
      (void)::waitpid(tid, &status, __WALL | WNOHANG);
    }
  }
}

ProcessStacks read_stacks(pid_t pid, int max_frames) {
  ProcessStacks out;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, nullptr};
  Dwfl* dwfl = dwfl_begin(&callbacks);
  if (!dwfl) {
    out.error = std::string("libdw: ") + dwfl_errmsg(-1);
    return out;
  }
  const int reported = dwfl_linux_proc_report(dwfl, pid);
  dwfl_report_end(dwfl, nullptr, nullptr);
  if (reported != 0) {
    out.error = "cannot read the modules of pid " + std::to_string(pid) + " (" +
                (reported > 0 ? std::string(std::strerror(reported)) : std::string(dwfl_errmsg(-1))) + ")";
  } else if (const int a = dwfl_linux_proc_attach(dwfl, pid, false); a != 0) {
    out.error = "cannot attach to pid " + std::to_string(pid) + " (" +
                (a > 0 ? std::string(std::strerror(a)) : std::string(dwfl_errmsg(-1))) +
                "): ptrace refused? (kernel.yama.ptrace_scope above 1, or a container without CAP_SYS_PTRACE)";
  } else {
    Walk w{dwfl, pid, max_frames, &out};
    if (dwfl_getthreads(dwfl, on_thread, &w) != 0 && out.threads.empty())
      out.error = std::string("cannot walk the threads: ") + dwfl_errmsg(-1);
  }
  dwfl_end(dwfl);  // detaches; a thread stopped before stays stopped
  release_threads(pid);
  for (size_t i = 0; i < out.threads.size(); ++i)
    if (out.threads[i].tid == pid && i > 0) std::swap(out.threads[0], out.threads[i]);
  return out;
}

std::string stacks_text(const ProcessStacks& s) {
  if (!s.error.empty()) return "no stacks: " + s.error + "\n";
  std::ostringstream o;
  for (const ThreadStack& t : s.threads) {
    o << "thread " << t.tid << " (" << t.name << ")\n";
    for (size_t i = 0; i < t.frames.size(); ++i) {
      const StackFrame& f = t.frames[i];
      o << "  #" << i << " " << f.function;
      if (!f.file.empty()) o << " at " << f.file << ":" << f.line;
      o << "\n";
    }
  }
  return o.str();
}

std::string stacks_report(const ProcessStacks& s) {
  return "main thread: " + main_thread_where(s) + "\n" + stacks_text(s);
}

OwnStacks read_own_stacks(const std::string& program, int limit_ms) {
  OwnStacks out;
  int output[2] = {-1, -1}, go[2] = {-1, -1};
  if (::pipe2(output, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0) {
    out.error = std::string("pipe: ") + std::strerror(errno);
    for (int fd : {output[0], output[1], go[0], go[1]})
      if (fd >= 0) ::close(fd);
    return out;
  }
  const std::string self = std::to_string(::getpid());
  const pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe calls until exec: the parent has other threads
    ::dup2(output[1], STDOUT_FILENO);
    ::dup2(output[1], STDERR_FILENO);
    char byte;
    if (::read(go[0], &byte, 1) != 1) ::_exit(126);  // the parent gave up
    ::execl(program.c_str(), program.c_str(), "stacks", self.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(output[1]);
  ::close(go[0]);
  if (child < 0) {
    out.error = std::string("fork: ") + std::strerror(errno);
    ::close(output[0]);
    ::close(go[1]);
    return out;
  }
  (void)::prctl(PR_SET_PTRACER, child, 0, 0, 0);  // EINVAL without Yama: then nothing is needed
  const char byte = 1;
  (void)!::write(go[1], &byte, 1);
  ::close(go[1]);
  std::string text;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  for (;;) {
    const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())
                             .count());
    if (left <= 0) {
      out.error = "the stack reader took longer than " + std::to_string(limit_ms) + " ms";
      ::kill(child, SIGKILL);
      break;
    }
    pollfd p{output[0], POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) continue;
    char buf[8192];
    const ssize_t k = ::read(output[0], buf, sizeof buf);
    if (k > 0) text.append(buf, size_t(k));
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
  ::close(output[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  (void)::prctl(PR_SET_PTRACER, 0, 0, 0, 0);
  const std::string head = "main thread: ";
  if (text.rfind(head, 0) == 0) {
    const size_t nl = text.find('\n');
    out.main_thread = text.substr(head.size(), nl - head.size());
    out.text = nl == std::string::npos ? "" : text.substr(nl + 1);
  } else if (out.error.empty()) {
    out.error = "the stack reader (" + program + " stacks " + self + ") said: " + text;
  }
  return out;
}

std::string main_thread_where(const ProcessStacks& s) {
  if (s.threads.empty() || s.threads[0].frames.empty()) return "";
  const std::vector<StackFrame>& frames = s.threads[0].frames;
  const StackFrame* pick = &frames[0];
  for (const StackFrame& f : frames)
    if (own_code(f)) {
      pick = &f;
      break;
    }
  std::string fn = pick->function;
  if (fn.size() > 120) fn = fn.substr(0, 117) + "...";  // a template's or a lambda's whole type
  if (pick->file.empty()) return fn;
  return pick->file + ":" + std::to_string(pick->line) + " (" + fn + ")";
}

}  // namespace rt::dist
