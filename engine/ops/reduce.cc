// Reductions: sum and mean to a 0-D tensor; sum, mean, max and argmax over chosen
// dims (Note [Reductions over dims]).
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduce_dims.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/reduce_dims.h"

#include <algorithm>

#include "engine/ops.h"
#include "engine/ops/op_util.h"
#include "engine/ops/strided.h"

namespace rt {
namespace {

// On CUDA the result and its gradient stay on the device: no host read anywhere.
Tensor reduce_cuda(const Tensor& x, double scale, const char* op) {
  Tensor y = Tensor::empty({}, x.dtype(), x.device());
  Tensor partials = Tensor::empty({cuda::kSumBlocks}, DType::f64, x.device());  // scratch, 8 bytes a slot
  cuda::sum(x.dtype(), x.numel(), x.raw_data(), scale, y.raw_data(), partials.raw_data(), ops::stream_of(x));
  record(op, y, {x}, [shape = x.shape(), fmt = x.format(), scale](const Tensor& g, const std::vector<bool>&) {
    // Every input element receives g * scale, broadcast from the device scalar.
    Tensor dx = Tensor::empty(shape, g.dtype(), g.device(), fmt);
    cuda::fill_from_scalar(g.dtype(), dx.numel(), g.raw_data(), scale, dx.raw_data(), ops::stream_of(g));
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor reduce(const Tensor& x, double scale, const char* op) {
  check_defined(x, op, "x");
  // Cost: an add per element reading x; back: dx written.
  RT_PROFILE_OP(op, (prof::OpCost{{double(x.numel()), ops::nbytes_of(x.numel(), x.dtype())},
                                  {0, ops::nbytes_of(x.numel(), x.dtype())}}), &x);
  if (x.device().is_cuda()) return reduce_cuda(x, scale, op);
  const double s = ops::dispatch_float(x.dtype(), op, [&](auto z) {
    using T = decltype(z);
    return cpu::sum<T>(x.numel(), x.data<T>());
  });
  Tensor y = Tensor::full({}, s * scale, x.dtype(), x.device());
  record(op, y, {x}, [shape = x.shape(), fmt = x.format(), scale](const Tensor& g, const std::vector<bool>&) {
    // Every input element receives g * scale. (Host read of a CPU scalar.)
    return std::vector<Tensor>{Tensor::full(shape, g.item() * scale, g.dtype(), g.device(), fmt)};
  });
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce(x, 1.0, "sum"); }

Tensor mean(const Tensor& x) {
  RT_CHECK(x.defined() && x.numel() > 0, "mean of an empty tensor");
  return reduce(x, 1.0 / double(x.numel()), "mean");
}

// ---- reductions over dims ------------------------------------------------------------
//
// Note [Reductions over dims]
// x's memory is a row-major array over its dims in memory order
// (Note [Memory order of logical dims] in engine/ops/strided.h). After dropping size-1 dims
// and merging neighbours that are both reduced or both kept, each reduced block is one
// (outer, n, inner) pass of the kernels (kernels/cpu/reduce_dims.h,
// kernels/cuda/reduce_dims.h), innermost block first; a reduction over H, W of an NCHW or
// an NHWC tensor is a single pass, so is any reduction over adjacent dims. What remains is
// the kept dims in x's memory order: with keepdim a 4-D result is exactly a tensor in x's
// format; otherwise the result is contiguous and, when the kept dims' memory order is not
// their logical order (NHWC reduced over W: (N, H, C) in memory), one strided copy puts them
// in order. Between passes the partial sums are stored in x's dtype (rounded once more per
// pass), except that bf16/f16 reduce in f32 when there is more than one pass.

namespace {

struct DimsPlan {
  std::vector<bool> reduced;  // by logical dim
  Shape out_shape;
  MemoryFormat out_format = MemoryFormat::contiguous;
  int64_t count = 1;  // elements reduced into each output
};

DimsPlan plan_dims(const Tensor& x, const std::vector<int>& dims, bool keepdim, const char* op) {
  check_defined(x, op, "x");
  RT_CHECK(!dims.empty(), op, ": dims is empty; name the dims to reduce (or call ", op, "(x) for all of them)");
  DimsPlan p;
  const int n = x.ndim();
  p.reduced.assign(size_t(n), false);
  for (int d : dims) {
    const int w = ops::wrap_dim(d, n, op);
    RT_CHECK(!p.reduced[size_t(w)], op, ": dim ", w, " appears more than once in dims");
    p.reduced[size_t(w)] = true;
    p.count *= x.size(w);
  }
  for (int d = 0; d < n; ++d) {
    if (!p.reduced[size_t(d)]) p.out_shape.push_back(x.size(d));
    else if (keepdim) p.out_shape.push_back(1);
  }
  if (keepdim && n == 4) p.out_format = x.format();
  return p;
}

void check_reduce_dtype(const Tensor& x, const char* op) {
  if (x.device().is_cuda()) {
    RT_CHECK(is_floating(x.dtype()), op, ": x must be f32, f64, bf16 or f16 on CUDA, got ", dtype_name(x.dtype()));
  } else {
    check_float(x, op, "x");
  }
}

// The kept dims in x's memory order, size-1 dims included.
std::vector<int> kept_in_memory_order(const Tensor& x, const std::vector<bool>& reduced) {
  std::vector<int> kept;
  for (int d : ops::memory_order(x))
    if (!reduced[size_t(d)]) kept.push_back(d);
  return kept;
}

// For each logical dim of x: its index among the result's dims (-1 for a dropped one).
std::vector<int> out_index(const std::vector<bool>& reduced, bool keepdim) {
  std::vector<int> at(reduced.size(), -1);
  int k = 0;  // the next result dim
  for (size_t d = 0; d < reduced.size(); ++d) {
    if (!reduced[d]) at[d] = k;
    if (!reduced[d] || keepdim) ++k;
  }
  return at;
}

// Whether a result in the plan's shape and format has the memory of `buf`: the kept dims,
// size-1 ones aside, appear in the same order in both.
bool buffer_is_result(const Tensor& x, const DimsPlan& p, bool keepdim) {
  if (keepdim && x.ndim() == 4) return true;  // the result is in x's format (Note [Reductions over dims])
  int last = -1;
  for (int d : kept_in_memory_order(x, p.reduced)) {
    if (x.size(d) == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// The result tensor from buf, a dense array over the kept dims in x's memory order.
Tensor place_result(const Tensor& buf, const Tensor& x, const DimsPlan& p, bool keepdim) {
  if (buffer_is_result(x, p, keepdim)) return buf.subview(0, p.out_shape, p.out_format);
  // A strided read of buf in the result's logical order.
  const std::vector<int> kept = kept_in_memory_order(x, p.reduced);
  const std::vector<int> at = out_index(p.reduced, keepdim);
  std::vector<int64_t> src(p.out_shape.size(), 0);
  int64_t stride = 1;
  for (size_t k = kept.size(); k-- > 0;) {
    src[size_t(at[size_t(kept[k])])] = stride;
    stride *= x.size(kept[k]);
  }
  return ops::gather_copy(buf, p.out_shape, 0, src, MemoryFormat::contiguous);
}

// y = scale * x elementwise over memory (any format); a pass of the reduction kernel with
// n = 1, so the backward needs no other op.
Tensor scaled(const Tensor& g, double scale) {
  if (scale == 1.0) return g;
  Tensor y = ops::empty_like(g);
  if (g.device().is_cuda()) {
    cuda::sum_dim(g.dtype(), g.numel(), 1, 1, g.raw_data(), scale, y.raw_data(), ops::stream_of(g));
  } else {
    ops::dispatch_float(g.dtype(), "sum backward", [&](auto z) {
      using T = decltype(z);
      cpu::sum_dim<T>(g.numel(), 1, 1, g.data<T>(), scale, y.data<T>());
    });
  }
  return y;
}

void sum_pass(const Tensor& in, int64_t outer, int64_t n, int64_t inner, double scale, const Tensor& out) {
  if (in.device().is_cuda()) {
    cuda::sum_dim(in.dtype(), outer, n, inner, in.raw_data(), scale, out.raw_data(), ops::stream_of(in));
    return;
  }
  ops::dispatch_float(in.dtype(), "sum", [&](auto z) {
    using T = decltype(z);
    cpu::sum_dim<T>(outer, n, inner, in.data<T>(), scale, out.data<T>());
  });
}

// sum over the plan's dims times scale, as a dense buffer over the kept dims in x's memory
// order (Note [Reductions over dims]).
Tensor reduce_dims_buffer(const Tensor& x, const DimsPlan& p, double scale) {
  int64_t kept_numel = 1;
  struct Block {
    int64_t size;
    bool reduced;
  };
  std::vector<Block> blocks;
  for (int d : ops::memory_order(x)) {
    const bool r = p.reduced[size_t(d)];
    if (!r) kept_numel *= x.size(d);
    if (x.size(d) == 1) continue;
    if (!blocks.empty() && blocks.back().reduced == r) blocks.back().size *= x.size(d);
    else blocks.push_back({x.size(d), r});
  }
  if (x.numel() == 0) {  // an empty sum is 0; an empty mean 0 * inf = NaN, like PyTorch
    return Tensor::full({kept_numel}, kept_numel == 0 ? 0.0 : 0.0 * scale, x.dtype(), x.device());
  }
  int passes = 0;
  for (const Block& b : blocks) passes += b.reduced;
  if (passes == 0) {  // only size-1 dims reduced: a scaled copy
    Tensor out = Tensor::empty({kept_numel}, x.dtype(), x.device());
    sum_pass(x, x.numel(), 1, 1, scale, out);
    return out;
  }
  // bf16/f16 partial sums between passes would be rounded to 8 or 11 bits: reduce in f32
  // and round the result once.
  const bool widen = passes > 1 && (x.dtype() == DType::bf16 || x.dtype() == DType::f16);
  Tensor cur = widen ? x.to(DType::f32) : x;
  while (passes > 0) {
    size_t g = blocks.size();
    while (!blocks[--g].reduced) {
    }
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < g; ++k) outer *= blocks[k].size;
    for (size_t k = g + 1; k < blocks.size(); ++k) inner *= blocks[k].size;
    Tensor next = Tensor::empty({outer * inner}, cur.dtype(), x.device());
    sum_pass(cur, outer, blocks[g].size, inner, --passes == 0 ? scale : 1.0, next);
    blocks.erase(blocks.begin() + std::ptrdiff_t(g));
    cur = next;
  }
  return cur.to(x.dtype());
}

Tensor reduce_dims(const Tensor& x, const std::vector<int>& dims, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  DimsPlan p = plan_dims(x, dims, keepdim, op);
  check_reduce_dtype(x, op);
  // Cost: an add per input element, x read and y written; back: y read, dx written.
  const auto cost = [&] {
    const double xb = ops::nbytes_of(x.numel(), x.dtype()), yb = ops::nbytes_of(shape_numel(p.out_shape), x.dtype());
    return prof::OpCost{{double(x.numel()), xb + yb}, {0, xb + yb}};
  };
  RT_PROFILE_OP(op, cost(), &x);
  const double scale = is_mean ? 1.0 / double(p.count) : 1.0;
  Tensor y = place_result(reduce_dims_buffer(x, p, scale), x, p, keepdim);
  // The backward broadcasts g * scale back over the reduced dims (a zero stride).
  record(op, y, {x}, [in_shape = x.shape(), in_fmt = x.format(), p, keepdim, scale](const Tensor& g,
                                                                                   const std::vector<bool>&) {
    const Tensor gs = scaled(g, scale);
    const std::vector<int64_t> gst = ops::strides(gs);
    const std::vector<int> at = out_index(p.reduced, keepdim);
    std::vector<int64_t> src(in_shape.size(), 0);
    for (size_t d = 0; d < in_shape.size(); ++d)
      if (!p.reduced[d]) src[d] = gst[size_t(at[d])];
    return std::vector<Tensor>{ops::gather_copy(gs, in_shape, 0, src, in_fmt)};
  });
  return y;
}

// max over one dim: values (and the first index of each, i64) placed like a sum's result.
struct MaxResult {
  Tensor values, indices;  // indices: the buffer (kept dims in x's memory order)
  DimsPlan plan;
  ops::Around around;
};

MaxResult max_buffers(const Tensor& x, int dim, bool keepdim, const char* op) {
  check_defined(x, op, "x");
  MaxResult r;
  r.plan = plan_dims(x, {dim}, keepdim, op);
  check_reduce_dtype(x, op);
  const int d = ops::wrap_dim(dim, x.ndim(), op);
  RT_CHECK(x.size(d) > 0, op, ": cannot reduce dim ", d, " of ", x.str(), ": it has no elements");
  r.around = ops::around_dim(x, d);
  const int64_t kept = r.around.outer * r.around.inner;
  r.values = Tensor::empty({kept}, x.dtype(), x.device());
  r.indices = Tensor::empty({kept}, DType::i64, x.device());
  if (kept == 0) return r;
  const ops::Around a = r.around;
  if (x.device().is_cuda()) {
    cuda::max_dim(x.dtype(), a.outer, a.n, a.inner, x.raw_data(), r.values.raw_data(), r.indices.data<int64_t>(),
                  ops::stream_of(x));
  } else {
    ops::dispatch_float(x.dtype(), op, [&](auto z) {
      using T = decltype(z);
      cpu::max_dim<T>(a.outer, a.n, a.inner, x.data<T>(), r.values.data<T>(), r.indices.data<int64_t>());
    });
  }
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) { return reduce_dims(x, dims, keepdim, false); }

Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) { return reduce_dims(x, dims, keepdim, true); }

Tensor max(const Tensor& x, int dim, bool keepdim) {
  const char* op = "max";
  // Cost: a comparison per input element, x read, y and the indices written; back: dy and
  // the indices read, dx written (zeros and the scatter).
  const auto cost = [&] {
    const double xb = ops::nbytes_of(x.numel(), x.dtype());
    const int64_t ny = x.numel() / std::max<int64_t>(x.size(dim), 1);
    const double yb = ops::nbytes_of(ny, x.dtype()), ib = ops::nbytes_of(ny, DType::i64);
    return prof::OpCost{{double(x.numel()), xb + yb + ib}, {0, yb + ib + xb}};
  };
  check_defined(x, op, "x");
  ops::wrap_dim(dim, x.ndim(), op);
  RT_PROFILE_OP(op, cost(), &x);
  MaxResult r = max_buffers(x, dim, keepdim, op);
  Tensor y = place_result(r.values, x, r.plan, keepdim);
  if (!any_requires_grad({x})) return y;
  const bool direct = buffer_is_result(x, r.plan, keepdim);
  record(op, y, {x},
         [in_shape = x.shape(), in_fmt = x.format(), order = ops::memory_order(x), plan = r.plan, keepdim, direct,
          idx = r.indices, a = r.around](const Tensor& g, const std::vector<bool>&) {
           // g as a dense array over the kept dims in x's memory order, like the index buffer.
           Tensor gb = g;
           if (!direct || (g.ndim() == 4 && g.format() != plan.out_format)) {
             const std::vector<int64_t> gst = ops::strides(g);
             const std::vector<int> at = out_index(plan.reduced, keepdim);
             Shape shape;
             std::vector<int64_t> src;
             for (int d : order) {
               if (plan.reduced[size_t(d)]) continue;
               shape.push_back(in_shape[size_t(d)]);
               src.push_back(gst[size_t(at[size_t(d)])]);
             }
             gb = ops::gather_copy(g, shape, 0, src, MemoryFormat::contiguous);
           }
           Tensor dx = Tensor::empty(in_shape, g.dtype(), g.device(), in_fmt);
           if (g.device().is_cuda()) {
             cuda::max_dim_backward(g.dtype(), a.outer, a.n, a.inner, gb.raw_data(), idx.data<int64_t>(), dx.raw_data(),
                                    ops::stream_of(g));
           } else {
             ops::dispatch_float(g.dtype(), "max backward", [&](auto z) {
               using T = decltype(z);
               cpu::max_dim_backward<T>(a.outer, a.n, a.inner, gb.data<T>(), idx.data<int64_t>(), dx.data<T>());
             });
           }
           return std::vector<Tensor>{dx};
         });
  return y;
}

Tensor argmax(const Tensor& x, int dim, bool keepdim) {
  const char* op = "argmax";
  check_defined(x, op, "x");
  ops::wrap_dim(dim, x.ndim(), op);
  // Cost: a comparison per input element, x read, the values and indices written.
  const auto cost = [&] {
    const int64_t ny = x.numel() / std::max<int64_t>(x.size(dim), 1);
    return prof::OpCost{{double(x.numel()), ops::nbytes_of(x.numel(), x.dtype()) + ops::nbytes_of(ny, x.dtype()) +
                                                ops::nbytes_of(ny, DType::i64)},
                        {}};
  };
  RT_PROFILE_OP(op, cost(), &x);
  MaxResult r = max_buffers(x, dim, keepdim, op);
  return place_result(r.indices, x, r.plan, keepdim);  // i64: not differentiable, never recorded
}

}  // namespace rt
