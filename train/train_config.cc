#include "train/train_config.h"

#include "train/train_flags.h"

namespace rt::train {

// Each row's setter puts its flag's value into its field (Note [One row per flag]); the
// checks ran first (cli::Flags::parse: types, choices, ranges; check_combinations: the rest),
// so nothing here re-checks a value.
TrainConfig parse_train_config(const cli::Flags& f) {
  check_combinations(f);
  TrainConfig c;
  for (const FlagRow& r : flag_rows()) {
    const FlagValue v{f, r.flag.name};
    if (r.common) r.common(v, c);
    if (r.train) r.train(v, c);
  }
  c.recorded_flags = f.effective();
  return c;
}

EvalConfig parse_eval_config(const cli::Flags& f) {
  check_combinations(f);
  if (f.str("checkpoint").empty() && f.str("init-weights").empty())
    throw cli::UsageError("ringtape eval needs weights: --init-weights FILE.safetensors or --checkpoint FILE");
  EvalConfig c;
  for (const FlagRow& r : flag_rows()) {
    const FlagValue v{f, r.flag.name};
    if (r.common) r.common(v, c);
    if (r.eval) r.eval(v, c);
  }
  return c;
}

}  // namespace rt::train
