// `ringtape train` and `ringtape eval`: everything between parsed flags and a trained,
// saved model.
#pragma once

#include "cli/flags.h"

namespace rt::train {

int run_train(const cli::Flags& flags);
int run_eval(const cli::Flags& flags);

}  // namespace rt::train
