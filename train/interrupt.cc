#include "train/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstring>

#include "base/error.h"
#include "engine/io/safetensors.h"

namespace rt::train {
namespace {

// Lock-free atomics are the only shared state a signal handler may touch.
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_tmp_set{false};
char g_tmp[PATH_MAX];  // written only while g_tmp_set is false
struct sigaction g_old_int, g_old_term;

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

void write_stderr(const char* s) {
  const ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;  // nothing to do about a failed write in a signal handler
}

void on_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    write_stderr(sig == SIGINT ? "\nringtape: SIGINT: stopping after this step and saving a checkpoint "
                                 "(press Ctrl-C again to quit at once)\n"
                               : "\nringtape: SIGTERM: stopping after this step and saving a checkpoint\n");
    return;
  }
  // The second signal: quit now, without leaving a half-written file behind.
  if (g_tmp_set.load()) ::unlink(g_tmp);
  write_stderr("\nringtape: second signal: quitting without a final checkpoint\n");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

InterruptHandler::InterruptHandler() {
  RT_CHECK(!g_installed.exchange(true), "InterruptHandler: one is already installed");
  g_signal = 0;
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and waits in other threads carry on
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptHandler::~InterruptHandler() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  set_save_in_progress("");
  g_installed = false;
}

int InterruptHandler::signal() const { return g_signal.load(); }

void set_save_in_progress(const std::string& tmp_path) {
  g_tmp_set = false;
  if (tmp_path.empty() || tmp_path.size() >= sizeof g_tmp) return;  // too long: not removed, still atomic
  std::memcpy(g_tmp, tmp_path.c_str(), tmp_path.size() + 1);
  g_tmp_set = true;
}

SaveInProgress::SaveInProgress(const std::string& path) { set_save_in_progress(save_temp_path(path)); }

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace rt::train
