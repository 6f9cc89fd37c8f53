// ringtape's ops against PyTorch (torch.nn.functional, float32): forward values and the
// gradients of sum(out * gout), in both memory formats for image inputs. The golden files
// and their key scheme come from gen_golden.py (see its docstring).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/json.h"
#include "engine/io/safetensors.h"
#include "engine/ops.h"
#include "engine/tensor.h"

namespace json = rt::json;
using rt::MemoryFormat;
using rt::Tensor;

namespace {

// Both sides compute in fp32 but sum in different orders (Eigen's blocked GEMM and
// OpenMP splits here, ATen's loops there), and the golden values are themselves rounded
// fp32. A reduction over K terms can differ by up to ~K * 2^-24 of the sum of |terms|;
// the largest reductions here have ~200 terms of magnitude <= ~10, so real differences
// stay near 1e-5 absolute worst case and far below that typically. The absolute part
// covers results near zero after cancellation (batch-norm gradients), the relative part
// large values (the large-logit loss). Bugs (a wrong index, a missing term, an off-by-one
// window) show up as errors of 1e-2 and more.
constexpr double kAbsTol = 1e-5;
constexpr double kRelTol = 1e-4;
constexpr int kMaxReported = 5;  // mismatching elements printed per tensor

// One op's golden file: tensors by "<case>.<name>" and the cases' parameters.
struct Golden {
  std::string op;
  std::map<std::string, Tensor> tensors;
  json::Value cases;  // {case: {params}} in generation order

  bool has(const std::string& c, const std::string& name) const { return tensors.count(c + "." + name) > 0; }
  // A fresh copy: runs mutate their inputs (requires_grad, running stats).
  Tensor get(const std::string& c, const std::string& name) const {
    auto it = tensors.find(c + "." + name);
    if (it == tensors.end()) RT_FAIL("golden file ", op, ".safetensors has no tensor '", c, ".", name, "'");
    return it->second.clone();
  }
};

Golden load_golden(const std::string& op) {
  Golden g;
  g.op = op;
  std::map<std::string, std::string> meta;
  // Bazel runs tests in the workspace's runfiles root, where data files keep their paths.
  g.tensors = rt::load_safetensors("tests/golden/" + op + ".safetensors", &meta);
  REQUIRE(meta.count("cases") == 1);
  CHECK(meta.at("op") == op);
  g.cases = json::parse(meta.at("cases"));
  REQUIRE(g.cases.is_object());
  REQUIRE(!g.cases.as_object().empty());
  return g;
}

std::string index_str(const rt::Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return rt::shape_str(idx);
}

// What one run is: "<op> case <case> (<format>)".
struct Run {
  std::string op, case_name, format;
  std::string str() const { return op + " case " + case_name + " (" + format + ")"; }
};

int g_compared = 0;       // tensors compared, so a test cannot pass by comparing nothing
double g_worst_ratio = 0;  // largest |diff| / tolerance seen: how much margin the tolerance has

void compare(const Run& run, const std::string& name, const Tensor& got, const Tensor& want) {
  ++g_compared;
  if (!got.defined()) {
    FAIL_CHECK(run.str(), ": ", name, " is undefined (expected ", want.str(), ")");
    return;
  }
  if (got.shape() != want.shape()) {
    FAIL_CHECK(run.str(), ": ", name, " has shape ", rt::shape_str(got.shape()), ", expected ",
               rt::shape_str(want.shape()));
    return;
  }
  const std::vector<float> a = got.to_vector<float>();  // logical NCHW order, any format
  const std::vector<float> b = want.to_vector<float>();
  int bad = 0;
  double worst = 0;
  std::ostringstream report;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::fabs(double(a[i]) - double(b[i]));
    const double tol = kAbsTol + kRelTol * std::fabs(double(b[i]));
    g_worst_ratio = std::max(g_worst_ratio, err / tol);
    if (!(err <= tol)) {  // NaN fails too
      if (bad < kMaxReported)
        report << "\n  " << name << index_str(want.shape(), int64_t(i)) << " (flat " << i << "): got " << a[i]
               << ", expected " << b[i] << " (|diff| " << err << ", tolerance " << tol << ")";
      ++bad;
      worst = std::max(worst, err);
    }
  }
  if (bad) {
    FAIL_CHECK(run.str(), ": ", name, " differs from PyTorch in ", bad, " of ", a.size(), " elements (largest |diff| ",
               worst, ")", report.str());
  }
}

void check_format(const Run& run, const Tensor& y, MemoryFormat want) {
  if (y.ndim() == 4 && y.format() != want)
    FAIL_CHECK(run.str(), ": output is ", rt::format_name(y.format()), ", expected the input's format ",
               rt::format_name(want));
}

// A leaf that requires grad, in `f` when 4-D.
Tensor leaf(Tensor t, MemoryFormat f = MemoryFormat::contiguous) {
  if (t.ndim() == 4) t = t.to(f);
  t.set_requires_grad(true);
  return t;
}

// The seed for backward, in the output's own layout.
Tensor seed_like(const Tensor& gout, const Tensor& y) { return gout.ndim() == 4 ? gout.to(y.format()) : gout; }

std::vector<MemoryFormat> formats_for(const Tensor& x) {
  if (x.ndim() == 4) return {MemoryFormat::contiguous, MemoryFormat::channels_last};
  return {MemoryFormat::contiguous};
}

// A case parameter; a missing one is a generator/test mismatch, reported as such.
const json::Value& field(const json::Value& p, const char* key) {
  const json::Value* v = p.find(key);
  RT_CHECK(v, "golden case parameters have no \"", key, "\": regenerate with gen_golden.py");
  return *v;
}
int param(const json::Value& p, const char* key, int i) { return int(field(p, key).as_array().at(i).as_int()); }

// Runs `body` for every case and format; an exception fails that run only.
template <typename Body>
void for_each_run(const Golden& g, const char* first_input, Body body) {
  int runs = 0;
  g_worst_ratio = 0;
  for (const json::Member& c : g.cases.as_object()) {
    const Tensor x = g.get(c.first, first_input);
    for (MemoryFormat f : formats_for(x)) {
      const Run run{g.op, c.first, rt::format_name(f)};
      try {
        body(run, c.first, c.second, f);
      } catch (const std::exception& e) {
        FAIL_CHECK(run.str(), " threw: ", e.what());
      }
      ++runs;
    }
  }
  MESSAGE(g.op, ": ", runs, " runs over ", g.cases.as_object().size(), " cases; largest |diff|/tolerance ",
          g_worst_ratio);
  CHECK(runs > 0);
}

}  // namespace

TEST_CASE("golden: conv2d") {
  const Golden g = load_golden("conv2d");
  const int before = g_compared;
  for_each_run(g, "x", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat f) {
    const rt::Conv2dParams cp{param(p, "stride", 0),   param(p, "stride", 1),   param(p, "padding", 0),
                              param(p, "padding", 1),  param(p, "dilation", 0), param(p, "dilation", 1),
                              int(field(p, "groups").as_int())};
    const bool bias = field(p, "bias").as_bool();
    Tensor x = leaf(g.get(c, "x"), f);
    Tensor w = leaf(g.get(c, "weight"));
    Tensor b = bias ? leaf(g.get(c, "bias")) : Tensor();
    Tensor y = rt::conv2d(x, w, b, cp);
    check_format(run, y, f);
    compare(run, "out", y, g.get(c, "out"));
    y.backward(seed_like(g.get(c, "gout"), y));
    compare(run, "grad_x", x.grad(), g.get(c, "grad_x"));
    compare(run, "grad_weight", w.grad(), g.get(c, "grad_weight"));
    if (bias) compare(run, "grad_bias", b.grad(), g.get(c, "grad_bias"));
  });
  CHECK(g_compared > before);
}

TEST_CASE("golden: batch_norm") {
  const Golden g = load_golden("batch_norm");
  const int before = g_compared;
  for_each_run(g, "x", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat f) {
    const bool training = field(p, "training").as_bool();
    const bool affine = field(p, "affine").as_bool();
    const bool stats = field(p, "running_stats").as_bool();
    Tensor x = leaf(g.get(c, "x"), f);
    Tensor w = affine ? leaf(g.get(c, "weight")) : Tensor();
    Tensor b = affine ? leaf(g.get(c, "bias")) : Tensor();
    Tensor rm = stats ? g.get(c, "running_mean") : Tensor();
    Tensor rv = stats ? g.get(c, "running_var") : Tensor();
    Tensor y = rt::batch_norm(x, w, b, rm, rv, training, field(p, "momentum").as_double(), field(p, "eps").as_double());
    check_format(run, y, f);
    compare(run, "out", y, g.get(c, "out"));
    if (stats) {  // updated in place in training, untouched in eval
      compare(run, "running_mean_after", rm, g.get(c, "running_mean_after"));
      compare(run, "running_var_after", rv, g.get(c, "running_var_after"));
    }
    y.backward(seed_like(g.get(c, "gout"), y));
    compare(run, "grad_x", x.grad(), g.get(c, "grad_x"));
    if (affine) {
      compare(run, "grad_weight", w.grad(), g.get(c, "grad_weight"));
      compare(run, "grad_bias", b.grad(), g.get(c, "grad_bias"));
    }
  });
  CHECK(g_compared > before);
}

TEST_CASE("golden: max_pool2d") {
  const Golden g = load_golden("max_pool2d");
  const int before = g_compared;
  for_each_run(g, "x", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat f) {
    const rt::Pool2dParams pp{param(p, "kernel", 0),   param(p, "kernel", 1),   param(p, "stride", 0),
                              param(p, "stride", 1),   param(p, "padding", 0),  param(p, "padding", 1),
                              param(p, "dilation", 0), param(p, "dilation", 1), field(p, "ceil_mode").as_bool()};
    Tensor x = leaf(g.get(c, "x"), f);
    Tensor y = rt::max_pool2d(x, pp);
    check_format(run, y, f);
    compare(run, "out", y, g.get(c, "out"));
    y.backward(seed_like(g.get(c, "gout"), y));
    compare(run, "grad_x", x.grad(), g.get(c, "grad_x"));
  });
  CHECK(g_compared > before);
}

TEST_CASE("golden: adaptive_avg_pool2d") {
  const Golden g = load_golden("adaptive_avg_pool2d");
  const int before = g_compared;
  for_each_run(g, "x", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat f) {
    Tensor x = leaf(g.get(c, "x"), f);
    Tensor y = rt::adaptive_avg_pool2d(x, param(p, "output_size", 0), param(p, "output_size", 1));
    check_format(run, y, f);
    compare(run, "out", y, g.get(c, "out"));
    y.backward(seed_like(g.get(c, "gout"), y));
    compare(run, "grad_x", x.grad(), g.get(c, "grad_x"));
  });
  CHECK(g_compared > before);
}

TEST_CASE("golden: linear") {
  const Golden g = load_golden("linear");
  const int before = g_compared;
  for_each_run(g, "x", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat) {
    const bool bias = field(p, "bias").as_bool();
    Tensor x = leaf(g.get(c, "x"));
    Tensor w = leaf(g.get(c, "weight"));
    Tensor b = bias ? leaf(g.get(c, "bias")) : Tensor();
    Tensor y = rt::linear(x, w, b);
    compare(run, "out", y, g.get(c, "out"));
    y.backward(g.get(c, "gout"));
    compare(run, "grad_x", x.grad(), g.get(c, "grad_x"));
    compare(run, "grad_weight", w.grad(), g.get(c, "grad_weight"));
    if (bias) compare(run, "grad_bias", b.grad(), g.get(c, "grad_bias"));
  });
  CHECK(g_compared > before);
}

TEST_CASE("golden: cross_entropy") {
  const Golden g = load_golden("cross_entropy");
  const int before = g_compared;
  for_each_run(g, "logits", [&](const Run& run, const std::string& c, const json::Value& p, MemoryFormat) {
    Tensor logits = leaf(g.get(c, "logits"));
    const Tensor target = g.get(c, "target");
    REQUIRE(target.dtype() == rt::DType::i64);
    Tensor y = rt::cross_entropy(logits, target, field(p, "label_smoothing").as_double());
    compare(run, "out", y, g.get(c, "out"));
    y.backward(g.get(c, "gout"));
    compare(run, "grad_logits", logits.grad(), g.get(c, "grad_logits"));
  });
  CHECK(g_compared > before);
}
