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

// Detaches from and reaps the threads of `pid` that a reading left traced by this process
// (Note [Threads a reader leaves traced] in stack_dump.cc). read_stacks() calls it; a parent
// waiting for `pid` to end calls it too (a thread may exit after the reading). Never throws.
void release_threads(pid_t pid);

// "distributed/work_queue.cc:41 (rt::dist::WorkQueue::wait)": the innermost frame of the main
// thread in ringtape's own code (a relative source path), or of any kind when there is none;
// "" when nothing was read.
std::string main_thread_where(const ProcessStacks& s);

// Note [Stacks of a rank without ringtape's launcher]
// Under torchrun or srun no launcher of ours reads a stuck rank's stacks
// (Note [Stacks of a stuck rank]). So a rank whose collective times out asks its peers for
// theirs, through the liveness links (PeerLiveness::ask_for_stacks), and each peer's liveness
// thread, which runs while its main thread is stuck, answers: a process cannot trace itself,
// so it starts `ringtape stacks <its pid>` (this program again, /proc/self/exe), which it
// allows to trace it (prctl PR_SET_PTRACER, where the Yama LSM asks for that), reads what the
// helper prints, writes it to its stderr (the rank log) and its flight records with the main
// thread's place (flight::answer_stacks_request). A rank stopped by SIGSTOP cannot answer: only
// a parent reads it. Under ringtape's launcher the ranks do not answer: the launcher reads every
// rank, stopped ones included, and two tracers would refuse each other.
struct OwnStacks {
  std::string main_thread;  // main_thread_where()
  std::string text;         // stacks_text()
  std::string error;        // why nothing was read, or ""
};
// Runs `program stacks <this pid>` (`program`: this process's executable, a ringtape binary) and
// waits at most `limit` for it. Never throws.
OwnStacks read_own_stacks(const std::string& program, int limit_ms = 10000);
// What `ringtape stacks PID` prints: "main thread: <where>\n" then stacks_text().
std::string stacks_report(const ProcessStacks& s);

}  // namespace rt::dist
