// The stacks of another process's threads, symbolised: what the launcher reads of a rank that
// hangs or is stopped when another rank failed (Note [The launcher's analysis] in
// distributed/local_launcher.cc).
//
// Note [Stacks of a stuck rank]
// A stuck rank cannot be asked for its stacks: it may be stopped (SIGSTOP, a debugger), or
// blocked where no handler runs in time. Its parent can read them: the launcher attaches with
// ptrace (allowed to a parent under the default kernel.yama.ptrace_scope 1) and unwinds every
// thread with elfutils' libdw (Debian's libdw1: dwfl_linux_proc_attach, dwfl_getthreads, the
// CFI of each module), which also gives each frame's function from the symbol table and its
// file:line from the line tables (the build keeps them: -g1 in .bazelrc). libdw rather than
// glibc's backtrace(): backtrace() sees only the calling thread of the calling process, and
// symbolises without file:line. The thread stopped before stays stopped after the detach.
// Where ptrace is refused (a container without CAP_SYS_PTRACE, ptrace_scope 2 or 3) the text
// says so instead of the stacks.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace rt::dist {

struct StackFrame {
  std::string function;  // demangled; "?" when unknown
  std::string file;      // as compiled (a path relative to the workspace for ringtape's own code); "" when unknown
  int line = 0;
};
struct ThreadStack {
  pid_t tid = 0;
  std::string name;                // /proc/<pid>/task/<tid>/comm
  std::vector<StackFrame> frames;  // innermost first
};
struct ProcessStacks {
  std::vector<ThreadStack> threads;  // the main thread (tid == pid) first
  std::string error;                 // why none could be read, or ""
};

// Attaches to `pid` (a child of the caller, or a process it may trace), reads every thread's
// stack (at most `max_frames` each) and detaches. Never throws.
ProcessStacks read_stacks(pid_t pid, int max_frames = 48);

// The stacks as text, a thread per paragraph ("thread 123 (ringtape): \n  #0 f at file:line").
std::string stacks_text(const ProcessStacks& s);

// "distributed/work_queue.cc:41 (rt::dist::WorkQueue::wait)": the innermost frame of the main
// thread in ringtape's own code (a relative source path), or of any kind when there is none;
// "" when nothing was read.
std::string main_thread_where(const ProcessStacks& s);

}  // namespace rt::dist
