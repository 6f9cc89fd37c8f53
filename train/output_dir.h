// --output-dir: a run never destroys another run's files.
#pragma once

#include <filesystem>
#include <string>

#include "train/train_config.h"

namespace rt::train {

// Creates `dir` when needed and checks it is writable (rt::Error otherwise). It must not
// hold another run: checkpoint.safetensors or model.safetensors there is a cli::UsageError
// for a new run (`resume` empty), and for a resumed one unless `dir` is the directory the
// checkpoint `resume` came from. Then removes the temporary files of saves that a killed
// process left (their process no longer runs), naming each on stdout.
void prepare_output_dir(const std::string& dir, const std::string& resume);

// The run's directory, prepared as above: --output-dir, else the --resume checkpoint's
// directory, else runs/<run_name>-<YYYYmmdd-HHMMSS>. "." when that is the current one.
std::filesystem::path open_output_dir(const OutputConfig& out, const std::string& run_name);

}  // namespace rt::train
