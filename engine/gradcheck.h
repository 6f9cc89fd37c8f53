// gradcheck: compares an op's (or a whole module's) backward with central finite
// differences in f64. Public: every op's tests use it, and so can anyone adding a layer.
//
// For f(inputs) -> y, it draws a fixed random cotangent r (shape of y) and checks, for
// every element x_j of every input that requires grad,
//     d/dx_j sum(r * f(x))  ~=  (L(x_j + eps) - L(x_j - eps)) / (2 eps)
// against the analytic gradient from y.backward(r). A random r makes every output
// element count, so a wrong entry anywhere in the Jacobian shows.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace rt {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;  // |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;
  std::string message;  // the first mismatches, naming input and element
};

// Inputs must be f64 leaves, CPU or CUDA (a CUDA op's own kernels, also under the emulator);
// those with requires_grad are checked.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& opt = {});

// ---- one line in a test ------------------------------------------------------------------
// The values gradcheck_leaves draws: normal, or |v| + 0.25 (the inputs of log, sqrt, a
// fractional pow, a division's denominator).
enum class GradcheckValues { normal, positive };

// f64 CPU leaves that require grad, one per shape, seeded random values; formats[i] for a
// 4-D input i (missing entries: contiguous).
std::vector<Tensor> gradcheck_leaves(const std::vector<Shape>& shapes, uint64_t seed = 1,
                                     GradcheckValues values = GradcheckValues::normal,
                                     const std::vector<MemoryFormat>& formats = {});

// gradcheck on gradcheck_leaves(shapes, ...); on failure the message starts with the inputs
// (shape, format), the seed and the values, so a test needs one line:
//   const auto r = gradcheck_shapes([](const std::vector<Tensor>& x) { return silu(x[0]); }, {{2, 3, 4, 5}});
//   CHECK_MESSAGE(r.ok, r.message);
GradcheckResult gradcheck_shapes(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                 const std::vector<Shape>& shapes, uint64_t seed = 1,
                                 GradcheckValues values = GradcheckValues::normal,
                                 const std::vector<MemoryFormat>& formats = {}, const GradcheckOptions& opt = {});

}  // namespace rt
