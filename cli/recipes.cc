#include "cli/recipes.h"

#include <algorithm>
#include <cstddef>
#include <set>

#include "base/usage_error.h"

namespace rt::cli {

// The flags' values where they differ from ringtape's defaults or where the recipe states
// them; the per-process batch sizes are the published runs' (8 processes for torchvision's).
const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {
      {"torchvision-v1",
       "torchvision's ResNet50 IMAGENET1K_V1 recipe (references/classification, 8 processes x batch 32)",
       {"--model", "resnet50", "--epochs", "90", "--batch-size", "32", "--optimizer", "sgd", "--lr", "0.1",
        "--momentum", "0.9", "--weight-decay", "1e-4", "--lr-scheduler", "step", "--lr-step-size", "30", "--lr-gamma",
        "0.1", "--train-crop-size", "224", "--val-resize-size", "256", "--val-crop-size", "224", "--interpolation",
        "bilinear"}},
      {"torchvision-v2",
       "torchvision's ResNet50 IMAGENET1K_V2 recipe (the 'How to train state-of-the-art models' recipe, 8 processes "
       "x batch 128)",
       {"--model", "resnet50", "--epochs", "600", "--batch-size", "128", "--optimizer", "sgd", "--lr", "0.5",
        "--momentum", "0.9", "--lr-scheduler", "cosine", "--lr-warmup-epochs", "5", "--lr-warmup-method", "linear",
        "--lr-warmup-decay", "0.01", "--auto-augment", "ta_wide", "--random-erase", "0.1", "--weight-decay", "2e-05",
        "--norm-weight-decay", "0.0", "--label-smoothing", "0.1", "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0",
        "--train-crop-size", "176", "--model-ema", "true", "--val-resize-size", "232", "--val-crop-size", "224",
        "--ra-sampler", "true", "--ra-reps", "4", "--interpolation", "bilinear"}},
      {"mlperf",
       "MLPerf Training's ResNet-50 v1.5 reference with LARS (poly_rate_schedule's values for a global batch "
       "below 8192)",
       {"--model", "resnet50", "--epochs", "40", "--batch-size", "256", "--optimizer", "lars", "--lr", "5.0",
        "--momentum", "0.9", "--weight-decay", "5e-5", "--lars-eta", "0.001", "--lars-exclude-bn-bias", "true",
        "--lr-scheduler", "poly", "--lr-power", "2", "--lr-min", "1e-4", "--lr-warmup-epochs", "5",
        "--lr-warmup-method", "mlperf", "--label-smoothing", "0.1", "--train-crop-size", "224",
        "--val-resize-size", "256", "--val-crop-size", "224"}},
  };
  return all;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> names = {"none"};
  for (const Recipe& r : recipes()) names.push_back(r.name);
  return names;
}

namespace {

// The flag name of an argument "--name" or "--name=value"; "" for a value.
std::string flag_name(const std::string& a) {
  if (a.rfind("--", 0) != 0) return "";
  return a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
}

// The recipe of the last --recipe in `args`; null for none.
const Recipe* chosen_recipe(const std::vector<std::string>& args) {
  std::string name = "none";
  for (size_t i = 0; i < args.size(); ++i) {
    if (flag_name(args[i]) != "recipe") continue;
    const size_t eq = args[i].find('=');
    if (eq != std::string::npos) name = args[i].substr(eq + 1);
    else if (i + 1 < args.size()) name = args[i + 1];
    else throw UsageError("flag --recipe needs a value: one of none, torchvision-v1, torchvision-v2, mlperf");
  }
  if (name == "none") return nullptr;
  const auto r = std::find_if(recipes().begin(), recipes().end(), [&](const Recipe& x) { return x.name == name; });
  if (r == recipes().end()) {
    std::string names;
    for (const std::string& n : recipe_names()) names += (names.empty() ? "" : ", ") + n;
    throw UsageError("flag --recipe: '" + name + "' is not one of: " + names);
  }
  return &*r;
}

}  // namespace

std::vector<std::string> expand_recipe(const std::vector<std::string>& args, const std::vector<Flag>& table,
                                       std::string* out) {
  const Recipe* r = chosen_recipe(args);
  if (!r) return args;
  const std::string& name = r->name;
  std::set<std::string> given;  // the command line's own flags
  for (const std::string& a : args)
    if (!flag_name(a).empty()) given.insert(flag_name(a));
  auto takes = [&](const std::string& f) {
    return std::any_of(table.begin(), table.end(), [&](const Flag& t) { return t.name == f; });
  };
  std::vector<std::string> expanded;
  std::string sets, overridden;
  for (size_t i = 0; i + 1 < r->flags.size(); i += 2) {
    const std::string f = flag_name(r->flags[i]);
    if (!takes(f)) continue;
    expanded.push_back(r->flags[i]);
    expanded.push_back(r->flags[i + 1]);
    if (given.count(f)) overridden += " " + r->flags[i] + " (the recipe's " + r->flags[i + 1] + ")";
    else sets += " " + r->flags[i] + " " + r->flags[i + 1];
  }
  if (out) {
    *out = "recipe " + name + " (" + r->source + "):" + sets;
    if (!overridden.empty()) *out += "\n  overridden by the command line:" + overridden;
  }
  expanded.insert(expanded.end(), args.begin(), args.end());
  return expanded;
}

void parse_with_recipe(Flags& flags, const std::vector<std::string>& args, std::string* out) {
  const std::vector<std::string> expanded = expand_recipe(args, flags.table(), out);
  const Recipe* r = chosen_recipe(args);
  // expand_recipe put the recipe's flags in front of the command line's.
  const std::vector<std::string> from_recipe(expanded.begin(), expanded.end() - std::ptrdiff_t(args.size()));
  flags.parse(from_recipe, r ? r->name : "");
  flags.parse(args);
}

}  // namespace rt::cli
