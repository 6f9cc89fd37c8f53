// Elementwise ops from the one op table (kernels/elementwise_ops.h,
// Note [Elementwise op table]): unary (relu, square, sqrt, exp, log, sigmoid, tanh, neg,
// silu, pow), binary (add, sub, mul, div, add_relu) over shapes that broadcast, the scalar
// affine ops (mul/add by a double), and in-place add_/mul_ for gradient accumulation and
// optimizers.
//
// Each backward is one kernel of the table's formula, reading only the tensors the formula
// needs (and only those are saved); a broadcast operand's gradient is then summed over its
// broadcast dims (ops::sum_to).
#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"

#include "engine/ops.h"
#include "engine/ops/broadcast.h"
#include "engine/ops/op_util.h"

namespace rt {

using ops::data_or_null;
using ops::raw_or_null;
namespace {

using ew::Binary;
using ew::Unary;

// ---- unary -----------------------------------------------------------------------------

Tensor unary_raw(Unary kind, const Tensor& x, double p, const char* op) {
  check_defined(x, op, "x");
  Tensor y = ops::empty_like(x);
  if (x.device().is_cuda()) {
    cuda::unary(kind, x.dtype(), x.numel(), x.raw_data(), y.raw_data(), p, ops::stream_of(x));
    return y;
  }
  ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::unary<T>(kind, x.numel(), x.data<T>(), y.data<T>(), p);
  });
  return y;
}

// dx = the table's backward of `kind`, from the saved x and/or y (whichever the formula
// reads), in their format.
Tensor unary_grad(Unary kind, double p, const Tensor& x, const Tensor& y, const Tensor& g) {
  const Tensor& like = x.defined() ? x : y.defined() ? y : g;
  const Tensor gg = ops::in_format(g, like.format());
  Tensor dx = ops::empty_like(like);
  if (gg.device().is_cuda()) {
    cuda::unary_backward(kind, gg.dtype(), gg.numel(), raw_or_null(x), raw_or_null(y), gg.raw_data(), dx.raw_data(), p,
                         ops::stream_of(gg));
    return dx;
  }
  ops::dispatch_float(gg.dtype(), ew::name(kind), [&](auto z) {
    using T = decltype(z);
    cpu::unary_backward<T>(kind, gg.numel(), data_or_null<T>(x), data_or_null<T>(y), gg.data<T>(), dx.data<T>(), p);
  });
  return dx;
}

Tensor unary_op(Unary kind, const Tensor& x, double p = 0.0) {
  const char* op = ew::name(kind);
  Tensor y = unary_raw(kind, x, p, op);
  const unsigned uses = ew::info(kind).uses;
  const Tensor sx = uses & ew::kX ? x.detach() : Tensor(), sy = uses & ew::kY ? y.detach() : Tensor();
  record(op, y, {x}, [kind, p, sx, sy](const Tensor& g, const std::vector<bool>&) {
    return std::vector<Tensor>{unary_grad(kind, p, sx, sy, g)};
  });
  return y;
}

// Forward: the table's FLOPs, x read and y written; backward: dy and the saved tensors read,
// dx written.
prof::OpCost unary_cost(Unary kind, const Tensor& x) {
  const ew::UnaryInfo in = ew::info(kind);
  const int saved = int(bool(in.uses & ew::kX)) + int(bool(in.uses & ew::kY));
  return ops::elementwise_cost(x, 1, 1, in.flops, 1 + saved, 1, in.bwd_flops);
}

// ---- binary ----------------------------------------------------------------------------

// What a binary op's backward keeps.
struct BinarySaved {
  Binary kind;
  ew::BroadcastPlan plan;  // the walk over y (dense) and a, b as saved
  Tensor a, b, y;          // only those the wanted formulas read (ew::BinaryInfo)
  MemoryFormat fmt;        // y's
  Shape a_shape, b_shape;
  MemoryFormat a_fmt, b_fmt;
  bool a_full, b_full;  // the operand has y's shape: its gradient needs no sum
};

std::vector<Tensor> binary_grads(const BinarySaved& s, const Tensor& g, const std::vector<bool>& needs) {
  const ew::BinaryInfo in = ew::info(s.kind);
  const bool run_a = needs[0] && !in.da_is_dy;
  const bool run_b = needs[1] && !in.db_is_dy && !(run_a && in.db_is_da);
  // dy as the kernels and sums read it: dense in y's format. (Passed on as is otherwise.)
  const bool relayout = run_a || run_b || (needs[0] && !s.a_full) || (needs[1] && !s.b_full);
  const Tensor gg = relayout ? ops::in_format(g, s.fmt) : g;
  // Output-shaped gradients, before any sum over broadcast dims.
  Tensor ga = needs[0] && in.da_is_dy ? gg : Tensor();
  Tensor gb = needs[1] && in.db_is_dy ? gg : Tensor();
  if (run_a) ga = ops::empty_like(gg);
  if (run_b) gb = ops::empty_like(gg);
  if ((run_a || run_b) && gg.numel() > 0) {
    if (gg.device().is_cuda()) {
      cuda::binary_backward(s.kind, gg.dtype(), s.plan, raw_or_null(s.a), raw_or_null(s.b), raw_or_null(s.y),
                            gg.raw_data(), run_a ? ga.raw_data() : nullptr, run_b ? gb.raw_data() : nullptr,
                            ops::stream_of(gg));
    } else {
      ops::dispatch_float(gg.dtype(), ew::name(s.kind), [&](auto z) {
        using T = decltype(z);
        cpu::binary_backward<T>(s.kind, s.plan, data_or_null<T>(s.a), data_or_null<T>(s.b), data_or_null<T>(s.y),
                                gg.data<T>(), run_a ? ga.data<T>() : nullptr, run_b ? gb.data<T>() : nullptr);
      });
    }
  }
  if (needs[1] && !gb.defined()) gb = ga;  // db == da (add_relu)
  Tensor da, db;
  if (needs[0]) da = s.a_full ? ga : ops::sum_to(ga, s.plan, 0, s.a_shape, s.a_fmt);
  if (needs[1]) db = s.b_full ? gb : ops::sum_to(gb, s.plan, 1, s.b_shape, s.b_fmt);
  return {da, db};
}

// Checks the operands; y = op(a, b) over their broadcast shape, recorded.
Tensor binary_op(Binary kind, const Tensor& a, const Tensor& b) {
  const char* op = ew::name(kind);
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  const Shape out = ops::broadcast_shape(a.shape(), b.shape(), op);
  check_same_dtype(a, b, op);
  check_same_device(a, b, op);
  BinarySaved s{kind, {}, {}, {}, {}, {}, a.shape(), b.shape(), a.format(), b.format(), a.shape() == out,
                b.shape() == out};
  Tensor bb = b;
  if (a.shape() == b.shape()) {
    // The common case: b in a's format, one dense pass (as fast as without broadcasting).
    bb = ops::in_format(b, a.format());
    s.fmt = a.format();
    s.plan = ew::BroadcastPlan::dense(a.numel());
  } else {
    s.fmt = ops::broadcast_format(a, b, out);
    s.plan = ops::broadcast_plan(out, s.fmt, a.shape(), a.format(), b.shape(), b.format());
  }
  Tensor y = Tensor::empty(out, a.dtype(), a.device(), s.fmt);
  if (y.numel() > 0) {
    if (a.device().is_cuda()) {
      cuda::binary_broadcast(kind, a.dtype(), s.plan, a.raw_data(), bb.raw_data(), y.raw_data(), ops::stream_of(a));
    } else {
      ops::dispatch_float(a.dtype(), op, [&](auto z) {
        using T = decltype(z);
        cpu::binary_broadcast<T>(kind, s.plan, a.data<T>(), bb.data<T>(), y.data<T>());
      });
    }
  }
  // Save only what the wanted gradients' formulas read.
  const ew::BinaryInfo in = ew::info(kind);
  const unsigned uses = (a.requires_grad() ? in.da_uses : 0u) | (b.requires_grad() ? in.db_uses : 0u);
  if (uses & ew::kA) s.a = a.detach();
  if (uses & ew::kB) s.b = bb.detach();
  if (uses & ew::kY) s.y = y.detach();
  record(op, y, {a, b}, [s = std::move(s)](const Tensor& g, const std::vector<bool>& needs) {
    return binary_grads(s, g, needs);
  });
  return y;
}

// Forward: the table's FLOPs per result element, a and b read, y written; backward: dy and
// the saved tensors read, the gradients that are not dy itself written (the sums over
// broadcast dims not counted). Zero when the shapes do not broadcast (the op reports it).
prof::OpCost binary_cost(Binary kind, const Tensor& a, const Tensor& b) {
  Shape out;
  if (!a.defined() || !b.defined() || !ops::try_broadcast_shape(a.shape(), b.shape(), out)) return {};
  const ew::BinaryInfo in = ew::info(kind);
  const double n = double(shape_numel(out)), es = double(dtype_size(a.dtype()));
  const unsigned reads = in.da_uses | in.db_uses;
  const int writes = int(!in.da_is_dy) + int(!in.db_is_dy && !in.db_is_da);
  const int bwd_reads = writes == 0 ? 0 : 1 + int(bool(reads & ew::kA)) + int(bool(reads & ew::kB)) +
                                              int(bool(reads & ew::kY));
  return {{in.flops * n, (double(a.numel()) + double(b.numel()) + n) * es},
          {in.bwd_flops * n, double(bwd_reads + writes) * n * es}};
}

// ---- scalar affine -----------------------------------------------------------------------

Tensor affine_raw(const Tensor& a, double s, double t, const char* op) {
  check_defined(a, op, "a");
  Tensor y = ops::empty_like(a);
  if (a.device().is_cuda()) {
    cuda::affine(a.dtype(), a.numel(), a.raw_data(), s, t, y.raw_data(), ops::stream_of(a));
    return y;
  }
  ops::dispatch_float(a.dtype(), op, [&](auto z) {
    using T = decltype(z);
    cpu::affine<T>(a.numel(), a.data<T>(), s, t, y.data<T>());
  });
  return y;
}

// Checks an in-place update's operands (same shape: no broadcasting in place); returns b
// in a's memory format.
Tensor check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  RT_CHECK(a.shape() == b.shape(), op, ": shapes differ: ", a.str(), " and ", b.str(),
           " (an in-place update takes an operand of the destination's shape)");
  check_same_dtype(a, b, op);
  check_same_device(a, b, op);
  return ops::in_format(b, a.format());
}

}  // namespace

// ---- binary ----------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("add", binary_cost(Binary::add, a, b), &a, &b);
  return binary_op(Binary::add, a, b);
}

Tensor sub(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("sub", binary_cost(Binary::sub, a, b), &a, &b);
  return binary_op(Binary::sub, a, b);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("mul", binary_cost(Binary::mul, a, b), &a, &b);
  return binary_op(Binary::mul, a, b);
}

Tensor div(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("div", binary_cost(Binary::div, a, b), &a, &b);
  return binary_op(Binary::div, a, b);
}

Tensor add_relu(const Tensor& a, const Tensor& b) {
  RT_PROFILE_OP("add_relu", binary_cost(Binary::add_relu, a, b), &a, &b);
  return binary_op(Binary::add_relu, a, b);
}

// ---- scalar ----------------------------------------------------------------------------

Tensor mul(const Tensor& a, double s) {
  RT_PROFILE_OP("mul_scalar", ops::elementwise_cost(a, 1, 1, 1), &a);
  Tensor y = affine_raw(a, s, 0.0, "mul");
  record("mul_scalar", y, {a}, [s](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{mul(g, s)}; });
  return y;
}

Tensor add(const Tensor& a, double s) {
  RT_PROFILE_OP("add_scalar", ops::elementwise_cost(a, 1, 1, 1), &a);
  Tensor y = affine_raw(a, 1.0, s, "add");
  record("add_scalar", y, {a}, [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; });
  return y;
}

// ---- unary -----------------------------------------------------------------------------

Tensor relu(const Tensor& x) {
  RT_PROFILE_OP("relu", unary_cost(Unary::relu, x), &x);
  return unary_op(Unary::relu, x);
}

Tensor square(const Tensor& x) {
  RT_PROFILE_OP("square", unary_cost(Unary::square, x), &x);
  return unary_op(Unary::square, x);
}

Tensor sqrt(const Tensor& x) {
  RT_PROFILE_OP("sqrt", unary_cost(Unary::sqrt, x), &x);
  return unary_op(Unary::sqrt, x);
}

Tensor exp(const Tensor& x) {
  RT_PROFILE_OP("exp", unary_cost(Unary::exp, x), &x);
  return unary_op(Unary::exp, x);
}

Tensor log(const Tensor& x) {
  RT_PROFILE_OP("log", unary_cost(Unary::log, x), &x);
  return unary_op(Unary::log, x);
}

Tensor sigmoid(const Tensor& x) {
  RT_PROFILE_OP("sigmoid", unary_cost(Unary::sigmoid, x), &x);
  return unary_op(Unary::sigmoid, x);
}

Tensor tanh(const Tensor& x) {
  RT_PROFILE_OP("tanh", unary_cost(Unary::tanh, x), &x);
  return unary_op(Unary::tanh, x);
}

Tensor neg(const Tensor& x) {
  RT_PROFILE_OP("neg", unary_cost(Unary::neg, x), &x);
  return unary_op(Unary::neg, x);
}

Tensor silu(const Tensor& x) {
  RT_PROFILE_OP("silu", unary_cost(Unary::silu, x), &x);
  return unary_op(Unary::silu, x);
}

Tensor pow(const Tensor& x, double p) {
  RT_PROFILE_OP("pow", unary_cost(Unary::pow, x), &x);
  return unary_op(Unary::pow, x, p);
}

// ---- in place --------------------------------------------------------------------------

void add_(Tensor a, const Tensor& b, double alpha) {
  RT_PROFILE_OP("add_", ops::elementwise_cost(a, 2, 1, 2), &a, &b);
  Tensor bb = check_same_shape(a, b, "add_");
  if (a.device().is_cuda()) {
    cuda::axpy(a.dtype(), a.numel(), alpha, bb.raw_data(), a.raw_data(), ops::stream_of(a));
    return;
  }
  ops::dispatch_float(a.dtype(), "add_", [&](auto z) {
    using T = decltype(z);
    cpu::axpy<T>(a.numel(), alpha, bb.data<T>(), a.data<T>());
  });
}

void mul_(Tensor a, double s) {
  RT_PROFILE_OP("mul_", ops::elementwise_cost(a, 1, 1, 1), &a);
  check_defined(a, "mul_", "a");
  if (a.device().is_cuda()) {
    cuda::affine(a.dtype(), a.numel(), a.raw_data(), s, 0.0, a.raw_data(), ops::stream_of(a));
    return;
  }
  ops::dispatch_float(a.dtype(), "mul_", [&](auto z) {
    using T = decltype(z);
    cpu::affine<T>(a.numel(), a.data<T>(), s, 0.0, a.data<T>());
  });
}

}  // namespace rt
