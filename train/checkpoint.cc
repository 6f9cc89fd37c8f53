#include "train/checkpoint.h"

#include <cstdio>
#include <fstream>

#include "base/usage_error.h"
#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "train/nonfinite.h"

namespace rt::train {
namespace {

constexpr const char* kFormat = "ringtape-checkpoint-1";
// A checkpoint older than its architecture record (Note [Settings before tensors]) that does not fit.
constexpr const char* kShapeHint =
    "was it written with another --model, --width, --num-classes or --small-stem? (--width and --small-stem "
    "auto follow --train-crop-size for imagenet and webdataset, also in eval)";

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  RT_CHECK(it != meta.end(), "checkpoint '", path, "' has no '", key, "' entry: not a complete ringtape checkpoint");
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  RT_CHECK(!it->second.empty() && *end == '\0' && v >= 0, "checkpoint '", path, "': '", key,
           "' is not a non-negative integer: '", it->second, "'");
  return v;
}

// A file holding NaN/Inf never replaces what is at `path` (Note [Non-finite steps]).
void refuse_nonfinite(const std::string& path, const std::map<std::string, Tensor>& tensors, const std::string& when) {
  nn::NamedTensors all(tensors.begin(), tensors.end());
  if (const auto bad = first_nonfinite(all))
    RT_FAIL("not writing '", path, "': '", *bad, "' holds NaN or Inf", when,
            ". Training diverged: lower --lr, add --lr-warmup-epochs, or pass --skip-nonfinite to skip such steps. ",
            "The file at '", path, "' (if any) is unchanged");
}

bool is_checkpoint(const std::map<std::string, std::string>& meta) {
  return meta.count("format") && meta.at("format") == kFormat;
}

// The "flags" metadata entry as a map (string values only).
std::map<std::string, std::string> flags_entry(const std::map<std::string, std::string>& meta,
                                               const std::string& path) {
  std::map<std::string, std::string> flags;
  if (!meta.count("flags")) return flags;
  const json::Value f = json::parse(meta.at("flags"));
  RT_CHECK(f.is_object(), "checkpoint '", path, "': malformed flags entry");
  for (const auto& [k, v] : f.as_object())
    if (v.is_string()) flags[k] = v.as_string();
  return flags;
}

// The entries of a checkpoint under `prefix` ("model." or the EMA's "model_ema.module."),
// without it.
std::map<std::string, Tensor> model_part(const std::map<std::string, Tensor>& all,
                                         const std::string& prefix = "model.") {
  std::map<std::string, Tensor> out;
  for (const auto& [k, t] : all)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = t;
  return out;
}

// Loads `state` into `model`; `what` names the source in messages ("--init-weights FILE").
// Weights that do not fit are a bad argument (UsageError, exit status 2), raised before
// anything is copied; `hint` says what to try instead.
void load_model_state(const std::string& what, const std::map<std::string, Tensor>& state, nn::Module& model,
                      bool strict, const std::string& hint) {
  const nn::Module::LoadReport r = model.match_state_dict(state);
  if (!r.wrong_kind.empty())
    throw UsageError(what + " does not fit the model: " + r.problems() +
                     "; a floating-point tensor does not load into an integer one or back (is the file damaged "
                     "or written by another program?)");
  if (strict && !r.exact()) throw UsageError(what + " does not match the model: " + r.problems() + "; " + hint);
  model.load_state_dict(state, strict);
  if (!r.exact()) {
    const size_t total = model.state_dict().size(), loaded = total - r.missing.size() - r.mismatched.size();
    std::printf("%s (non-strict): loaded %zu of the model's %zu tensors; skipped %s\n", what.c_str(), loaded, total,
                r.problems().c_str());
  }
  if (!r.converted.empty()) std::printf("%s: %s\n", what.c_str(), r.conversions().c_str());
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const Progress& p, const std::map<std::string, std::string>& flags,
                     const std::map<std::string, Tensor>& scaler, const std::map<std::string, Tensor>& ema) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [k, t] : model.state_dict()) tensors["model." + k] = t;
  for (const auto& [k, t] : opt.state()) tensors["optimizer." + k] = t;
  for (const auto& [k, t] : scaler) tensors["grad_scaler." + k] = t;
  for (const auto& [k, t] : ema) tensors["model_ema." + k] = t;
  json::Value f = json::Value::object();
  for (const auto& [k, v] : flags) f.set(k, v);
  const std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"epoch", std::to_string(p.epoch)},
      {"batch", std::to_string(p.batch)},
      {"step", std::to_string(p.step)},
      {"samples_seen", std::to_string(p.samples_seen)},
      {"flags", json::dump(f)},
  };
  refuse_nonfinite(path, tensors, " after step " + std::to_string(p.step));
  save_safetensors(path, tensors, meta);
}

Progress load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                         std::map<std::string, std::string>* flags, std::map<std::string, Tensor>* scaler,
                         std::map<std::string, Tensor>* ema) {
  std::map<std::string, std::string> meta;
  const std::map<std::string, Tensor> all = load_safetensors(path, &meta);
  if (!is_checkpoint(meta))
    throw UsageError("'" + path + "' is not a ringtape checkpoint (no format tag '" + kFormat +
                     "'); to start from weights only, use --init-weights " + path);
  std::map<std::string, Tensor> opt_state, scaler_state, ema_state;
  for (const auto& [k, t] : all) {
    if (k.rfind("model.", 0) == 0) continue;
    if (k.rfind("optimizer.", 0) == 0) opt_state[k.substr(10)] = t;
    else if (k.rfind("grad_scaler.", 0) == 0) scaler_state[k.substr(12)] = t;
    else if (k.rfind("model_ema.", 0) == 0) ema_state[k.substr(10)] = t;
    else RT_FAIL("checkpoint '", path, "': unexpected tensor '", clip_for_message(k), "'");
  }
  if (scaler) *scaler = std::move(scaler_state);
  if (ema) *ema = std::move(ema_state);
  load_model_state("checkpoint '" + path + "'", model_part(all), model, true, kShapeHint);
  opt.load_state(opt_state);
  if (flags) *flags = flags_entry(meta, path);
  Progress p;
  p.epoch = meta_int(meta, "epoch", path);
  p.batch = meta_int(meta, "batch", path);
  p.step = meta_int(meta, "step", path);
  p.samples_seen = meta_int(meta, "samples_seen", path);
  return p;
}

std::map<std::string, std::string> read_checkpoint_flags(const std::string& path) {
  // The safetensors layout: an 8-byte little-endian header length, the JSON header, the data.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  in.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(in.tellg());
  if (n > size - 8 || n > (uint64_t(1) << 28)) return {};  // not a safetensors file: loading it says so
  std::string header(size_t(n), '\0');
  in.seekg(8);
  if (!in.read(header.data(), std::streamsize(n))) return {};
  try {
    const SafetensorsHeader h = parse_safetensors_header(header, size - 8 - n, path);
    return is_checkpoint(h.metadata) ? flags_entry(h.metadata, path) : std::map<std::string, std::string>{};
  } catch (const Error&) {
    return {};
  }
}

void load_checkpoint_model(const std::string& path, nn::Module& model, bool ema) {
  std::map<std::string, std::string> meta;
  const std::map<std::string, Tensor> all = load_safetensors(path, &meta);
  if (!is_checkpoint(meta))
    throw UsageError("'" + path + "' is not a ringtape checkpoint (no format tag '" + kFormat +
                     "'): it looks like a weights file; evaluate it with --init-weights " + path);
  const std::map<std::string, Tensor> part = model_part(all, ema ? "model_ema.module." : "model.");
  if (ema && part.empty())
    throw UsageError("checkpoint '" + path + "' holds no EMA weights: it was trained without --model-ema");
  load_model_state(std::string(ema ? "the EMA weights of " : "") + "checkpoint '" + path + "'", part, model, true,
                   kShapeHint);
}

void save_weights(const std::string& path, const nn::Module& model) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [k, t] : model.state_dict()) tensors[k] = t;
  refuse_nonfinite(path, tensors, "");
  save_safetensors(path, tensors, {{"format", "pt"}});
}

void load_weights(const std::string& path, nn::Module& model, bool strict) {
  std::map<std::string, std::string> meta;
  std::map<std::string, Tensor> state = load_safetensors(path, &meta);
  const std::string what = "--init-weights " + path;
  if (is_checkpoint(meta)) {
    std::printf("%s: a ringtape checkpoint (step %s); loading its model part (not its optimizer state or progress: "
                "--resume continues a run)\n",
                path.c_str(), meta.count("step") ? meta.at("step").c_str() : "?");
    state = model_part(state);
  }
  load_model_state(what, state, model, strict,
                   "was it written for another --model, --width, --num-classes or --small-stem? "
                   "--init-weights-non-strict loads only the entries that match (fine-tuning with a new head)");
}

}  // namespace rt::train
