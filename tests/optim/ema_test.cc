// The model EMA (optim/ema.h) against torchvision's ExponentialMovingAverage driven by
// torchvision's training loop (ema_golden.safetensors, written by gen_ema_golden.py), bit
// for bit in f64 and f32; the decay adjustment against train.py's formula; the update
// schedule; the checkpoint state; errors.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "optim/ema.h"

namespace json = rt::json;
using rt::DType;
using rt::Tensor;
using rt::nn::NamedTensors;
using rt::optim::ModelEma;
using rt::optim::ModelEmaOptions;

namespace {

// Bitwise equality of two CPU tensors of one dtype, reporting the first differences. The
// tolerance is 0 in every dtype on purpose (Note [EMA rounding] in optim/ema.h): ringtape
// performs PyTorch's operations in PyTorch's order, so an FMA or a scalar kept in double
// instead of rounded to f32 moves elements by one ULP and must be caught here.
void check_identical(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what, ": shape ", rt::shape_str(got.shape()), " vs ",
                  rt::shape_str(want.shape()));
  REQUIRE_MESSAGE(got.dtype() == want.dtype(), what, ": dtype ", rt::dtype_name(got.dtype()), " vs ",
                  rt::dtype_name(want.dtype()));
  const Tensor g = got.to(rt::MemoryFormat::contiguous), w = want.to(rt::MemoryFormat::contiguous);
  const size_t size = rt::dtype_size(g.dtype());
  const auto* a = static_cast<const unsigned char*>(g.raw_data());
  const auto* b = static_cast<const unsigned char*>(w.raw_data());
  const std::vector<double> av = g.to_vector<double>(), bv = w.to_vector<double>();
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(a + i * size, b + i * size, size) == 0) continue;
    if (bad < 5) os << "  [" << i << "] got " << av[i] << ", want " << bv[i] << "\n";
    ++bad;
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", g.numel(), " elements differ\n", os.str());
}

Tensor randn(const rt::Shape& s, uint64_t seed, DType t) {
  rt::Generator g(seed);
  return rt::randn(s, g, DType::f64).to(t);
}

// ---- the golden file -------------------------------------------------------------

struct Golden {
  std::map<std::string, Tensor> tensors;
  json::Value settings, updates, decays;

  Tensor get(const std::string& key) const {
    auto it = tensors.find(key);
    if (it == tensors.end()) RT_FAIL("ema_golden.safetensors has no tensor '", key, "'");
    return it->second.clone();
  }
};

const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    std::map<std::string, std::string> meta;
    // Bazel runs tests in the runfiles root, where data files keep their workspace paths.
    out.tensors = rt::load_safetensors("tests/optim/ema_golden.safetensors", &meta);
    out.settings = json::parse(meta.at("settings"));
    out.updates = json::parse(meta.at("updates"));
    out.decays = json::parse(meta.at("decays"));
    return out;
  }();
  return g;
}

// torch's state_dict order of the golden's model: conv, batch norm (2 parameters, 3
// buffers), linear.
const char* const kNames[] = {"0.weight",      "1.weight",           "1.bias",   "1.running_mean",
                              "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"};

int64_t setting(const char* key) { return golden().settings.find(key)->as_int(); }

ModelEmaOptions golden_options() {
  const json::Value& s = golden().settings;
  ModelEmaOptions o;
  o.decay = rt::optim::ema_decay_for(s.find("model_ema_decay")->as_double(), setting("world_size"),
                                     setting("batch_size"), setting("model_ema_steps"), setting("epochs"));
  o.steps = setting("model_ema_steps");
  o.warmup_epochs = setting("lr_warmup_epochs");
  return o;
}

// Replays torchvision's loop in one dtype: the model takes the golden state at each update's
// iteration (and junk at the others, which the EMA must not see); after every update the
// EMA and its count equal torch's.
void run_golden(const std::string& dt) {
  const Golden& g = golden();
  NamedTensors model, ema;
  for (const char* n : kNames) {
    const Tensor init = g.get(dt + ".init." + n);
    model.emplace_back(n, init.clone());
    ema.emplace_back(n, Tensor::zeros(init.shape(), init.dtype()));
  }
  const ModelEmaOptions opt = golden_options();
  CHECK(opt.decay == g.settings.find("decay")->as_double());
  ModelEma averager(model, ema, opt);
  for (size_t i = 0; i < ema.size(); ++i)
    check_identical(ema[i].second, model[i].second, dt + " copied at construction " + ema[i].first);
  std::map<std::pair<int64_t, int64_t>, int> update_at;
  const json::Array& updates = g.updates.as_array();
  for (size_t k = 0; k < updates.size(); ++k)
    update_at[{updates[k].as_array()[0].as_int(), updates[k].as_array()[1].as_int()}] = int(k);
  int done = 0;
  for (int64_t epoch = 0; epoch < setting("train_epochs"); ++epoch) {
    for (int64_t i = 0; i < setting("iterations"); ++i) {
      auto it = update_at.find({epoch, i});
      const bool due = it != update_at.end();
      for (auto& [n, t] : model) {
        if (due) t.copy_(g.get(dt + ".model" + std::to_string(it->second) + "." + n));
        else t.fill_(t.dtype() == DType::i64 ? 12345.0 : 1e6);
      }
      CAPTURE(epoch);
      CAPTURE(i);
      CHECK(averager.after_optimizer_step(epoch, i) == due);
      if (!due) continue;
      const std::string k = std::to_string(it->second);
      for (const auto& [n, t] : ema) check_identical(t, g.get(dt + ".ema" + k + "." + n), dt + " ema" + k + "." + n);
      CHECK(averager.n_averaged() == int64_t(g.get(dt + ".n_averaged" + k).item()));
      ++done;
    }
  }
  CHECK(done == int(updates.size()));
}

TEST_CASE("golden: torchvision's ExponentialMovingAverage and training loop, bit for bit in f64 and f32") {
  // The file must still exercise what this suite promises: averaging after a warmup reset,
  // more than one update per epoch, and a batch counter above 2^24 (inexact in f32).
  CHECK(setting("model_ema_steps") > 1);
  CHECK(setting("lr_warmup_epochs") >= 1);
  CHECK(golden().get("f64.init.1.num_batches_tracked").item() > double(1 << 24) - 8);
  for (const char* dt : {"f64", "f32"}) {
    SUBCASE(dt) { run_golden(dt); }
  }
}

TEST_CASE("ema_decay_for is torchvision train.py's adjustment, exactly") {
  const json::Array& cases = golden().decays.as_array();
  REQUIRE(cases.size() >= 5);
  for (const json::Value& c : cases) {
    const json::Array& a = c.as_array();
    CAPTURE(a[0].as_double());
    CAPTURE(a[4].as_int());
    CHECK(rt::optim::ema_decay_for(a[0].as_double(), a[1].as_int(), a[2].as_int(), a[3].as_int(), a[4].as_int()) ==
          a[5].as_double());
  }
  // torchvision's defaults on 8 GPUs x 32 for 600 epochs: alpha 2e-5 * 8 * 32 * 32 / 600.
  CHECK(rt::optim::ema_decay_for(0.99998, 8, 32, 32, 600) == doctest::Approx(1.0 - 2e-5 * 8 * 32 * 32 / 600));
  CHECK(rt::optim::ema_decay_for(0.5, 4, 4, 4, 1) == 0.0);  // alpha clipped to 1: the EMA copies
  CHECK_THROWS_WITH_AS(rt::optim::ema_decay_for(0.9, 1, 0, 1, 1), doctest::Contains("must be >= 1"), rt::Error);
}

// ---- behaviour -----------------------------------------------------------------

NamedTensors make_tensors(DType t, uint64_t seed, bool with_count = true) {
  NamedTensors out = {{"conv.weight", randn({4, 3, 3, 3}, seed, t)},
                      {"bn.running_mean", randn({4}, seed + 1, t)},
                      {"fc.weight", randn({40000}, seed + 2, t)}};  // above the CPU loop's parallel threshold
  if (with_count) out.emplace_back("bn.num_batches_tracked", Tensor::full({}, 7.0, DType::i64));
  return out;
}

NamedTensors clones(const NamedTensors& ts) {
  NamedTensors out;
  for (const auto& [n, t] : ts) out.emplace_back(n, t.clone());
  return out;
}

void perturb(NamedTensors& ts, uint64_t seed) {
  for (auto& [n, t] : ts) {
    if (t.dtype() == DType::i64) t.copy_(Tensor::full({}, t.item() + 3.0, DType::i64));
    else t.copy_(randn(t.shape(), seed++, t.dtype()));
  }
}

TEST_CASE("the CPU loop is decay * avg + (1 - decay) * p with f32 scalars and roundings, in parallel too") {
  ModelEmaOptions o;
  o.decay = 0.9;
  NamedTensors model = make_tensors(DType::f32, 1), ema = make_tensors(DType::f32, 50);
  ModelEma averager(model, ema, o);
  averager.update();  // copies
  const std::vector<float> before = ema[2].second.to_vector<float>();
  perturb(model, 9);
  averager.update();
  const std::vector<float> p = model[2].second.to_vector<float>(), after = ema[2].second.to_vector<float>();
  const float d = 0.9f, omd = float(1.0 - 0.9);
  int bad = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    // volatile: no contraction into an FMA whatever this file's flags.
    volatile float kept = d * before[i];
    volatile float taken = omd * p[i];
    bad += std::bit_cast<uint32_t>(float(kept + taken)) != std::bit_cast<uint32_t>(after[i]);
  }
  CHECK(bad == 0);
  // The count: (0.9f * 7 + 0.1f * 10) in f32 = 7.3 -> 7.
  CHECK(ema[3].second.to_vector<int64_t>()[0] == 7);
}

TEST_CASE("after_optimizer_step: every steps-th iteration, copying through the warmup epochs") {
  ModelEmaOptions o;
  o.decay = 0.5;
  o.steps = 3;
  o.warmup_epochs = 2;
  NamedTensors model = make_tensors(DType::f64, 1, false), ema = make_tensors(DType::f64, 2, false);
  ModelEma averager(model, ema, o);
  std::vector<int64_t> counts;
  for (int64_t epoch = 0; epoch < 4; ++epoch)
    for (int64_t i = 0; i < 7; ++i) {
      CHECK(averager.after_optimizer_step(epoch, i) == (i % 3 == 0));
      if (i % 3 == 0) counts.push_back(averager.n_averaged());
    }
  CHECK(counts == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6});
  averager.reset_count();
  CHECK(averager.n_averaged() == 0);
}

TEST_CASE("state() and load_state() resume bit-identically, under AveragedModel's keys") {
  for (DType dt : {DType::f64, DType::f32}) {
    CAPTURE(rt::dtype_name(dt));
    ModelEmaOptions o;
    o.decay = 0.97;
    NamedTensors model = make_tensors(dt, 1), ema = make_tensors(dt, 2);
    ModelEma a(model, ema, o);
    for (int k = 0; k < 3; ++k) {
      perturb(model, 100 + 10 * k);
      a.update();
    }
    const std::map<std::string, Tensor> saved = a.state();
    std::set<std::string> keys;
    for (const auto& [k, t] : saved) keys.insert(k);
    CHECK(keys == std::set<std::string>{"module.bn.num_batches_tracked", "module.bn.running_mean",
                                        "module.conv.weight", "module.fc.weight", "n_averaged"});
    CHECK(saved.at("n_averaged").dtype() == DType::i64);
    CHECK(saved.at("n_averaged").item() == 3.0);

    // A fresh EMA over another copy of the model, loaded, then both go on the same way.
    NamedTensors model2 = clones(model), ema2 = make_tensors(dt, 3);
    ModelEma b(model2, ema2, o);
    b.load_state(saved);
    CHECK(b.n_averaged() == 3);
    for (int k = 0; k < 2; ++k) {
      perturb(model, 500 + 10 * k);
      perturb(model2, 500 + 10 * k);
      a.update();
      b.update();
    }
    for (size_t i = 0; i < ema.size(); ++i) check_identical(ema2[i].second, ema[i].second, "resumed " + ema[i].first);
    CHECK(a.n_averaged() == b.n_averaged());
    // state() is a snapshot.
    const Tensor before = saved.at("module.conv.weight");
    CHECK_FALSE(std::memcmp(before.raw_data(), ema[0].second.raw_data(), before.nbytes()) == 0);
  }
}

TEST_CASE("errors name the tensor, and load_state changes nothing when it fails") {
  ModelEmaOptions o;
  o.decay = 0.9;
  auto make = [&](NamedTensors m, NamedTensors e) { ModelEma x(std::move(m), std::move(e), o); };
  const NamedTensors m = make_tensors(DType::f32, 1);
  auto bad_ema = [&](auto&& edit) {
    NamedTensors e = clones(m);
    edit(e);
    return e;
  };
  CHECK_THROWS_WITH_AS(make(m, bad_ema([](NamedTensors& e) { e.pop_back(); })),
                       doctest::Contains("the model has 4 tensors but the EMA model has 3"), rt::Error);
  CHECK_THROWS_WITH_AS(make(m, bad_ema([](NamedTensors& e) { std::swap(e[0], e[1]); })),
                       doctest::Contains("'conv.weight' in the model but 'bn.running_mean'"), rt::Error);
  CHECK_THROWS_WITH_AS(make(m, bad_ema([](NamedTensors& e) { e[2].second = Tensor::zeros({39999}); })),
                       doctest::Contains("'fc.weight' has shape [39999]"), rt::Error);
  CHECK_THROWS_WITH_AS(make(m, bad_ema([](NamedTensors& e) { e[1].second = e[1].second.to(DType::f64); })),
                       doctest::Contains("'bn.running_mean' is f64 in the EMA model but f32 in the model"), rt::Error);
  CHECK_THROWS_WITH_AS(
      make(m, bad_ema([](NamedTensors& e) { e[0].second = e[0].second.to(rt::MemoryFormat::channels_last); })),
      doctest::Contains("'conv.weight' differs in memory format"), rt::Error);
  CHECK_THROWS_WITH_AS(make(m, bad_ema([&](NamedTensors& e) { e[2].second = m[2].second; })),
                       doctest::Contains("'fc.weight' of the EMA model shares its memory"), rt::Error);
  NamedTensors half = {{"w", Tensor::zeros({3}, DType::bf16)}};
  CHECK_THROWS_WITH_AS(make(half, clones(half)), doctest::Contains("'w' is bf16; expected f32, f64 or i64"), rt::Error);
  CHECK_THROWS_WITH_AS(make({}, {}), doctest::Contains("empty tensor list"), rt::Error);
  o.decay = 1.5;
  CHECK_THROWS_WITH_AS(make(m, clones(m)), doctest::Contains("decay must be in [0, 1]"), rt::Error);
  o.decay = 0.9;
  o.steps = 0;
  CHECK_THROWS_WITH_AS(make(m, clones(m)), doctest::Contains("steps"), rt::Error);
  o.steps = 1;

  NamedTensors model = clones(m), ema = clones(m);
  ModelEma x(model, ema, o);
  x.update();
  const std::map<std::string, Tensor> good = x.state();
  const std::vector<float> kept = ema[0].second.to_vector<float>();
  auto bad_state = [&](auto&& edit, const char* message) {
    std::map<std::string, Tensor> s;
    for (const auto& [k, t] : good) s[k] = t.clone();
    s["module.conv.weight"] = Tensor::zeros({4, 3, 3, 3});  // would change the EMA if applied
    edit(s);
    CHECK_THROWS_WITH_AS(x.load_state(s), doctest::Contains(message), rt::Error);
    CHECK(ema[0].second.to_vector<float>() == kept);
    CHECK(x.n_averaged() == 1);
  };
  bad_state([](auto& s) { s.erase("module.fc.weight"); }, "no 'module.fc.weight'");
  bad_state([](auto& s) { s.erase("n_averaged"); }, "no 'n_averaged'");
  bad_state([](auto& s) { s["module.fc.bias"] = Tensor::zeros({5}); }, "unexpected state entry 'module.fc.bias'");
  bad_state([](auto& s) { s["module.bn.running_mean"] = Tensor::zeros({5}); },
            "'module.bn.running_mean' has shape [5]");
  bad_state([](auto& s) { s["module.bn.num_batches_tracked"] = Tensor::zeros({}); },
            "'module.bn.num_batches_tracked' is f32 but the model's tensor is i64");
  bad_state([](auto& s) { s["n_averaged"] = Tensor::full({}, -1.0, DType::i64); }, "must be >= 0");
  bad_state([](auto& s) { s["n_averaged"] = Tensor::full({}, 1.0, DType::f32); }, "must be one integer");
  // Another float dtype converts.
  std::map<std::string, Tensor> wide = good;
  wide["module.fc.weight"] = good.at("module.fc.weight").to(DType::f64);
  x.load_state(wide);
  check_identical(ema[2].second, good.at("module.fc.weight"), "converted from f64");

  // A pair that drifts apart after construction (a Module::to of one model) is caught at update().
  ema[1].second.impl().dtype = DType::f64;  // what Module::to(DType) does to the handle
  ema[1].second.impl().storage = Tensor::zeros({4}, DType::f64).impl().storage;
  CHECK_THROWS_WITH_AS(x.update(), doctest::Contains("'bn.running_mean' is f64 in the EMA model"), rt::Error);
}

}  // namespace
