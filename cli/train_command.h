// The commands `ringtape train` and `ringtape eval`: the parsed flags become the typed
// configuration (cli/train_flags.h), then train/trainer.h runs it. `train` runs in this
// process, or as a rank of a data-parallel run when the environment says so (torchrun's
// contract, distributed/launch_env.h), or with --nproc-per-node / --nnodes starts and
// supervises the workers (distributed/local_launcher.h), passing them `args` (the command
// line's flags) without the launcher's own.
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"

namespace rt::cli {

int run_train(const Flags& flags, const std::vector<std::string>& args = {});
int run_eval(const Flags& flags);

}  // namespace rt::cli
