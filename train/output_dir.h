// --output-dir: a run never destroys another run's files.
//
// Note [One run per directory]
// A run holds an flock on <dir>/run.lock, which names its pid and host, for as long as it runs
// (a data-parallel run: rank 0); a second run into the same directory (the same --output-dir,
// or --resume of a checkpoint a live run is still writing) is refused naming the holder.
// Before, both ran, and metrics.jsonl and the checkpoints interleaved. The lock goes with its
// process, however that ends (kill -9 included).
#pragma once

#include <filesystem>
#include <string>

#include "train/train_config.h"

namespace rt::train {

// The lock of Note [One run per directory], held from construction to destruction.
class OutputDirLock {
 public:
  OutputDirLock() = default;
  // Throws UsageError naming the holder when another process holds `dir`'s lock.
  explicit OutputDirLock(const std::filesystem::path& dir);
  OutputDirLock(OutputDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  OutputDirLock& operator=(OutputDirLock&& o) noexcept;
  ~OutputDirLock();

 private:
  int fd_ = -1;
};

// Creates `dir` when needed and checks it is writable (rt::Error otherwise); takes its lock. It must not
// hold another run: checkpoint.safetensors or model.safetensors there is a UsageError
// for a new run (`resume` empty), and for a resumed one unless `dir` is the directory the
// checkpoint `resume` came from. Then removes the temporary files of saves that a killed
// process left (their process no longer runs), naming each on stdout.
OutputDirLock prepare_output_dir(const std::string& dir, const std::string& resume);

// The run's directory, prepared as above: --output-dir, else the --resume checkpoint's
// directory, else runs/<run_name>-<YYYYmmdd-HHMMSS>. "." when that is the current one.
// `lock` receives the directory's lock.
std::filesystem::path open_output_dir(const OutputConfig& out, const std::string& run_name, OutputDirLock& lock);

}  // namespace rt::train
