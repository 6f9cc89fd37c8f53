// Composed, then fused (docs/extending.md, step 7): SiLU written as mul(x, sigmoid(x)) (two
// ops forward; backward: mul's two products, sigmoid's backward and a gradient sum) against
// the op table's fused silu (one pass forward, one pass backward), forward + backward on an
// activation of ResNet50's first stage, (8, 64, 56, 56) f32 NHWC, on the CPU. Checks first
// that both give the same values and gradients (within f32 rounding), then times them.
//   bazel run //bench:silu_fusion_bench -- [--steps N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "base/usage_error.h"
#include "bench/bench_util.h"
#include "cli/flags.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace {

using rt::Tensor;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// Median ms of forward + backward of f(x) with upstream gradient g.
template <typename F>
double time_ms(F&& f, const Tensor& x0, const Tensor& g, int steps) {
  std::vector<double> ms;
  for (int s = 0; s < steps + 2; ++s) {
    Tensor x = x0.detach();
    x.set_requires_grad(true);
    const auto t0 = std::chrono::steady_clock::now();
    f(x).backward(g);
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= 2) ms.push_back(t);  // two warm-up steps
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

const char* kUsage = "usage: silu_fusion_bench [--steps N]";

std::vector<rt::cli::Flag> flag_table() {
  return {{"steps", rt::cli::FlagType::integer, "20",
           "timed steps of each version, after two warm-up steps; the median is reported", {}, rt::cli::Topic::output,
           rt::bench::int_at_least(1)}};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 0;
  try {
    steps = int(rt::bench::parse_flags(argc, argv, flag_table(), kUsage).integer("steps"));
  } catch (const rt::UsageError& e) {
    return rt::bench::usage_failure("silu_fusion_bench", e, flag_table(), kUsage);
  }
  rt::Generator gen(1);
  const auto fmt = rt::MemoryFormat::channels_last;
  const Tensor x0 = rt::randn({8, 64, 56, 56}, gen, rt::DType::f32, rt::Device::cpu(), fmt);
  const Tensor g = rt::randn({8, 64, 56, 56}, gen, rt::DType::f32, rt::Device::cpu(), fmt);
  auto composed = [](const Tensor& x) { return rt::mul(x, rt::sigmoid(x)); };
  auto fused = [](const Tensor& x) { return rt::silu(x); };

  // The same function: values and gradients within f32 rounding.
  Tensor a = x0.detach(), b = x0.detach();
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  const Tensor ya = composed(a), yb = fused(b);
  ya.backward(g);
  yb.backward(g);
  const double dy = max_abs_diff(ya, yb), dg = max_abs_diff(a.grad(), b.grad());
  if (dy > 1e-5 || dg > 1e-5) {
    std::fprintf(stderr, "silu_fusion_bench: composed and fused differ: y by %g, dx by %g\n", dy, dg);
    return 1;
  }
  const double tc = time_ms(composed, x0, g, steps), tf = time_ms(fused, x0, g, steps);
  std::printf("{\"shape\": \"8x64x56x56 f32 NHWC\", \"composed_ms\": %.3f, \"fused_ms\": %.3f, \"speedup\": %.2f, "
              "\"max_diff_y\": %.2e, \"max_diff_dx\": %.2e}\n",
              tc, tf, tc / tf, dy, dg);
  return 0;
}
