#include "train/checkpoint.h"

#include <cstdio>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"

namespace rt::train {
namespace {

constexpr const char* kFormat = "ringtape-checkpoint-1";

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  RT_CHECK(it != meta.end(), "checkpoint '", path, "' has no '", key, "' entry: not a complete ringtape checkpoint");
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  RT_CHECK(!it->second.empty() && *end == '\0' && v >= 0, "checkpoint '", path, "': '", key,
           "' is not a non-negative integer: '", it->second, "'");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const Progress& p, const std::map<std::string, std::string>& flags,
                     const std::map<std::string, Tensor>& scaler) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [k, t] : model.state_dict()) tensors["model." + k] = t;
  for (const auto& [k, t] : opt.state()) tensors["optimizer." + k] = t;
  for (const auto& [k, t] : scaler) tensors["grad_scaler." + k] = t;
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
  save_safetensors(path, tensors, meta);
}

Progress load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                         std::map<std::string, std::string>* flags, std::map<std::string, Tensor>* scaler) {
  std::map<std::string, std::string> meta;
  const std::map<std::string, Tensor> all = load_safetensors(path, &meta);
  RT_CHECK(meta.count("format") && meta.at("format") == kFormat, "'", path,
           "' is not a ringtape checkpoint (no format tag '", kFormat,
           "'); to start from weights only, use --init-weights");
  std::map<std::string, Tensor> model_state, opt_state, scaler_state;
  for (const auto& [k, t] : all) {
    if (k.rfind("model.", 0) == 0) model_state[k.substr(6)] = t;
    else if (k.rfind("optimizer.", 0) == 0) opt_state[k.substr(10)] = t;
    else if (k.rfind("grad_scaler.", 0) == 0) scaler_state[k.substr(12)] = t;
    else RT_FAIL("checkpoint '", path, "': unexpected tensor '", k, "'");
  }
  if (scaler) *scaler = std::move(scaler_state);
  const nn::Module::LoadReport r = model.load_state_dict(model_state);
  RT_CHECK(r.missing.empty() && r.unexpected.empty(), "checkpoint '", path, "' does not match the model: ",
           r.missing.size(), " missing keys (first: ", r.missing.empty() ? "-" : r.missing[0], "), ",
           r.unexpected.size(), " unexpected (first: ", r.unexpected.empty() ? "-" : r.unexpected[0],
           "); was it written with another --model?");
  opt.load_state(opt_state);
  if (flags) {
    flags->clear();
    if (meta.count("flags")) {
      const json::Value f = json::parse(meta.at("flags"));
      RT_CHECK(f.is_object(), "checkpoint '", path, "': malformed flags entry");
      for (const auto& [k, v] : f.as_object())
        if (v.is_string()) (*flags)[k] = v.as_string();
    }
  }
  Progress p;
  p.epoch = meta_int(meta, "epoch", path);
  p.batch = meta_int(meta, "batch", path);
  p.step = meta_int(meta, "step", path);
  p.samples_seen = meta_int(meta, "samples_seen", path);
  return p;
}

void load_checkpoint_model(const std::string& path, nn::Module& model) {
  std::map<std::string, std::string> meta;
  std::map<std::string, Tensor> state;
  for (const auto& [k, t] : load_safetensors(path, &meta))
    if (k.rfind("model.", 0) == 0) state[k.substr(6)] = t;
  RT_CHECK(meta.count("format") && meta.at("format") == kFormat, "'", path,
           "' is not a ringtape checkpoint; for a weights file use --init-weights");
  const nn::Module::LoadReport r = model.load_state_dict(state);
  RT_CHECK(r.missing.empty(), "checkpoint '", path, "' lacks ", r.missing.size(), " of the model's tensors (first: ",
           r.missing[0], "); was it written with another --model?");
}

void save_weights(const std::string& path, const nn::Module& model) {
  std::map<std::string, Tensor> tensors;
  for (const auto& [k, t] : model.state_dict()) tensors[k] = t;
  save_safetensors(path, tensors, {{"format", "pt"}});
}

void load_weights(const std::string& path, nn::Module& model) {
  const nn::Module::LoadReport r = model.load_state_dict(load_safetensors(path));
  for (const auto& k : r.missing) std::fprintf(stderr, "--init-weights %s: missing key %s (kept its initial value)\n", path.c_str(), k.c_str());
  for (const auto& k : r.unexpected) std::fprintf(stderr, "--init-weights %s: unexpected key %s (ignored)\n", path.c_str(), k.c_str());
}

}  // namespace rt::train
