// SIGINT and SIGTERM during `ringtape train`.
//
// Note [Interrupts]
// The handler only records the signal (an atomic; nothing else is async-signal-safe to do
// there). The training loop looks between steps (and evaluation between batches), stops,
// writes a final checkpoint (atomically, only if finite: Note [Non-finite steps]) and exits
// with 128 + the signal number (130 SIGINT, 143 SIGTERM), as a shell reports a process
// killed by it. A second signal ends the process at once: the handler unlinks the temporary
// file of a save in progress (its path was stored before the save began), restores the
// default disposition and re-raises the signal.
#pragma once

#include <string>

namespace rt::train {

// Installs the handlers for its lifetime (one at a time) and restores the previous ones.
class InterruptHandler {
 public:
  InterruptHandler();
  ~InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

  int signal() const;  // the first signal received (SIGINT or SIGTERM), 0 when none
};

// The temporary file being written now, for the second signal to remove ("" = none).
void set_save_in_progress(const std::string& tmp_path);

// For its lifetime, the save of `path` (to save_temp_path(path), engine/io/safetensors.h)
// is the one in progress.
class SaveInProgress {
 public:
  explicit SaveInProgress(const std::string& path);
  ~SaveInProgress() { set_save_in_progress(""); }
  SaveInProgress(const SaveInProgress&) = delete;
  SaveInProgress& operator=(const SaveInProgress&) = delete;
};

// "SIGINT", "SIGTERM".
const char* signal_name(int sig);

}  // namespace rt::train
