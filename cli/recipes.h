// Named training recipes (--recipe): each is a list of flags, put before the command line's
// own so that any flag given on the command line overrides the recipe's (a later value of a
// flag replaces an earlier one). The README's Recipes section gives each one's source,
// published accuracy and epochs.
#pragma once

#include <string>
#include <vector>

#include "cli/flags.h"

namespace rt::cli {

struct Recipe {
  std::string name;
  std::string source;                // where its values come from, printed with it
  std::vector<std::string> flags;    // as typed: {"--model", "resnet50", "--lr", "0.5", ...}
};

const std::vector<Recipe>& recipes();
std::vector<std::string> recipe_names();  // "none" first

// `args` with the --recipe's flags (the last --recipe given; "none" or absent: none) put in
// front, keeping only flags `table` has (eval takes the recipe's evaluation sizes and model,
// not its training flags). Writes to `out` what the recipe sets and which of those the
// command line overrides. An unknown recipe is a UsageError listing the names.
std::vector<std::string> expand_recipe(const std::vector<std::string>& args, const std::vector<Flag>& table,
                                       std::string* out);

// The command line `args` parsed into `flags` as expand_recipe puts it together, with the
// recipe's values marked as the recipe's (Flags::recipe_of), so that a message about one of
// them can say the recipe set it and how to override it. `out` as expand_recipe's.
void parse_with_recipe(Flags& flags, const std::vector<std::string>& args, std::string* out);

}  // namespace rt::cli
