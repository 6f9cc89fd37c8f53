// Loading weights into a model (PyTorch's load_state_dict): strict by default, non-strict
// for fine-tuning, ringtape checkpoints as --init-weights, and dtype conversion only where
// PyTorch converts. Small models (width-2 ResNets) keep it quick.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "cli/flags.h"
#include "engine/io/safetensors.h"
#include "models/registry.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"

namespace rt {
namespace {

namespace fs = std::filesystem;

std::string tmpfile(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  return (fs::path(base ? base : "/tmp") / ("weights_test_" + name + ".safetensors")).string();
}

std::shared_ptr<nn::Module> model(const std::string& name, int64_t classes = 10, uint64_t seed = 0) {
  models::ModelOptions o;
  o.num_classes = classes;
  o.in_channels = 1;
  o.width = 2;
  o.small_stem = true;
  o.seed = seed;
  return models::make_model(name, o);
}

std::map<std::string, Tensor> state_of(const nn::Module& m) {
  std::map<std::string, Tensor> s;
  for (const auto& [k, t] : m.state_dict()) s[k] = t;
  return s;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.to(DType::f64).to_vector<double>() == b.to(DType::f64).to_vector<double>();
}

// Weights of `src` written to a file; the model it loads into starts from another seed, so
// a tensor that was not loaded differs.
std::string saved(const nn::Module& src, const std::string& name) {
  const std::string path = tmpfile(name);
  train::save_weights(path, src);
  return path;
}

TEST_CASE("strict: another model's weights are a UsageError listing the keys, and change nothing") {
  auto r18 = model("resnet18"), r34 = model("resnet34", 10, 1);
  const Tensor before = r34->state_dict()[0].second.clone();
  const std::string w18 = saved(*r18, "r18");
  CHECK_THROWS_WITH_AS(train::load_weights(w18, *r34), doctest::Contains("96 missing"), UsageError);
  CHECK_THROWS_WITH_AS(train::load_weights(w18, *r34), doctest::Contains("layer1.2.conv1.weight"), UsageError);
  CHECK_THROWS_WITH_AS(train::load_weights(w18, *r34), doctest::Contains("... and 86 more"), UsageError);
  CHECK_THROWS_WITH_AS(train::load_weights(w18, *r34), doctest::Contains("--init-weights-non-strict"),
                       UsageError);
  CHECK(same_values(r34->state_dict()[0].second, before));
  // The other way round: unexpected keys.
  CHECK_THROWS_WITH_AS(train::load_weights(saved(*r34, "r34"), *r18), doctest::Contains("96 unexpected"),
                       UsageError);
  // Another shape names the key and both shapes.
  auto r18_7 = model("resnet18", 7);
  CHECK_THROWS_WITH_AS(train::load_weights(w18, *r18_7),
                       doctest::Contains("fc.weight: [10, 16] in the file, [7, 16] in the model"), UsageError);
}

TEST_CASE("strict: very long keys and long lists are clipped") {
  auto m = model("resnet18");
  std::map<std::string, Tensor> s = state_of(*m);
  for (int i = 0; i < 30; ++i) s[std::string(500, 'k') + std::to_string(i)] = Tensor::zeros({1});
  const nn::Module::LoadReport r = m->match_state_dict(s);
  CHECK(r.unexpected.size() == 30);
  const std::string text = r.problems();
  CHECK(text.find("... and 20 more") != std::string::npos);
  CHECK(text.find("(501 bytes)") != std::string::npos);
  CHECK(text.size() < 2000);
  CHECK_THROWS_WITH_AS(m->load_state_dict(s), doctest::Contains("30 unexpected"), Error);
}

TEST_CASE("non-strict: loads what matches (a new head), reports what it skipped") {
  auto src = model("resnet18", 10, 0), dst = model("resnet18", 7, 1);
  const Tensor fc_before = state_of(*dst).at("fc.weight").clone();
  train::load_weights(saved(*src, "head"), *dst, /*strict=*/false);
  const auto s = state_of(*src), d = state_of(*dst);
  CHECK(same_values(d.at("conv1.weight"), s.at("conv1.weight")));
  CHECK(same_values(d.at("layer4.1.bn2.running_var"), s.at("layer4.1.bn2.running_var")));
  CHECK(same_values(d.at("fc.weight"), fc_before));  // skipped: kept its initial value
  const nn::Module::LoadReport r = dst->match_state_dict(s);
  CHECK(r.mismatched.size() == 2);  // fc.weight, fc.bias
  // resnet34 from resnet18 weights: the shared stages load, the extra blocks stay.
  auto r34 = model("resnet34", 10, 1);
  train::load_weights(saved(*src, "r18b"), *r34, false);
  CHECK(same_values(state_of(*r34).at("layer1.0.conv1.weight"), s.at("layer1.0.conv1.weight")));
}

TEST_CASE("a ringtape checkpoint passed as --init-weights loads its model part") {
  auto src = model("resnet18", 10, 0), dst = model("resnet18", 10, 1);
  optim::SgdOptions so;
  so.momentum = 0.9;
  auto opt = optim::make_sgd(src->named_parameters(), so);
  const std::string ckpt = tmpfile("ckpt");
  train::save_checkpoint(ckpt, *src, *opt, train::Progress{0, 3, 3, 24}, {{"model", "resnet18"}});
  CHECK_FALSE(same_values(state_of(*dst).at("conv1.weight"), state_of(*src).at("conv1.weight")));
  train::load_weights(ckpt, *dst);
  for (const auto& [k, t] : state_of(*src)) CHECK_MESSAGE(same_values(state_of(*dst).at(k), t), k);
  // And eval --checkpoint with a weights file points to --init-weights.
  CHECK_THROWS_WITH_AS(train::load_checkpoint_model(saved(*src, "plain"), *dst),
                       doctest::Contains("--init-weights"), UsageError);
  // A checkpoint of another model is refused, naming the keys it does not know.
  auto r34 = model("resnet34");
  auto opt34 = optim::make_sgd(r34->named_parameters(), so);
  const std::string ckpt34 = tmpfile("ckpt34");
  train::save_checkpoint(ckpt34, *r34, *opt34, train::Progress{}, {});
  CHECK_THROWS_WITH_AS(train::load_checkpoint_model(ckpt34, *dst), doctest::Contains("96 unexpected"),
                       UsageError);
}

TEST_CASE("dtypes: floating converts (and says so), floating <-> integer is refused") {
  auto src = model("resnet18", 10, 0), dst = model("resnet18", 10, 1);
  std::map<std::string, Tensor> half;
  int64_t floats = 0;
  for (const auto& [k, t] : src->state_dict()) {
    half[k] = is_floating(t.dtype()) ? t.to(DType::f16) : t;
    floats += is_floating(t.dtype());
  }
  const std::string path = tmpfile("f16");
  save_safetensors(path, half, {});
  const nn::Module::LoadReport r = dst->match_state_dict(half);
  CHECK(r.exact());
  CHECK(r.conversions() == "converted " + std::to_string(floats) + " tensors from f16 to f32");
  train::load_weights(path, *dst);
  const Tensor w = state_of(*dst).at("conv1.weight");
  CHECK(w.dtype() == DType::f32);
  CHECK(same_values(w, half.at("conv1.weight")));

  // An integer where a float belongs, and a float counter.
  std::map<std::string, Tensor> bad = state_of(*src);
  bad["fc.weight"] = bad["fc.weight"].to(DType::i64);
  save_safetensors(path, bad, {});
  CHECK_THROWS_WITH_AS(train::load_weights(path, *dst, false),
                       doctest::Contains("fc.weight: i64 in the file, f32 in the model"), UsageError);
  bad = state_of(*src);
  bad["bn1.num_batches_tracked"] = bad["bn1.num_batches_tracked"].to(DType::f32);
  save_safetensors(path, bad, {});
  CHECK_THROWS_WITH_AS(train::load_weights(path, *dst), doctest::Contains("bn1.num_batches_tracked"),
                       UsageError);
  // Integer to integer is a conversion PyTorch makes too.
  bad = state_of(*src);
  bad["bn1.num_batches_tracked"] = bad["bn1.num_batches_tracked"].to(DType::i32);
  CHECK(dst->load_state_dict(bad).conversions() == "converted 1 tensor from i32 to i64");
}

}  // namespace
}  // namespace rt
