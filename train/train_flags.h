// The flags of `ringtape train` and `ringtape eval`: torchvision's
// references/classification/train.py names where one exists.
#pragma once

#include <vector>

#include "cli/flags.h"

namespace rt::train {

std::vector<cli::Flag> train_flags();
std::vector<cli::Flag> eval_flags();

}  // namespace rt::train
