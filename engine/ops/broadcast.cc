#include "engine/ops/broadcast.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/elementwise.h"

#include "engine/ops/op_util.h"

namespace rt::ops {

bool try_broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  const size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {  // i-th dim from the end
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return false;
    r[n - 1 - i] = da == 1 ? db : da;
  }
  out = std::move(r);
  return true;
}

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  Shape out;
  if (try_broadcast_shape(a, b, out)) return out;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      RT_FAIL(op, ": shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast: dim ", -int64_t(i) - 1,
              " (counted from the end) is ", da, " vs ", db, ". Sizes aligned at the last dim must be equal or 1, as "
              "in PyTorch; reshape one operand (e.g. to (1, C, 1, 1) for a per-channel value)");
  }
  RT_FAIL(op, ": shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
}

MemoryFormat broadcast_format(const Tensor& a, const Tensor& b, const Shape& out) {
  if (a.shape() == out) return a.format();
  if (b.shape() == out) return b.format();
  if (out.size() == 4) {
    if (a.ndim() == 4) return a.format();
    if (b.ndim() == 4) return b.format();
  }
  return MemoryFormat::contiguous;
}

ew::BroadcastPlan broadcast_plan(const Shape& out, MemoryFormat f, const Shape& a, MemoryFormat fa, const Shape& b,
                                 MemoryFormat fb) {
  const int nd = int(out.size());
  // The result's dims in memory order.
  std::vector<int> order(static_cast<size_t>(nd));
  for (int d = 0; d < nd; ++d) order[size_t(d)] = d;
  if (nd == 4 && f == MemoryFormat::channels_last) order = {0, 2, 3, 1};
  const Shape* shapes[2] = {&a, &b};
  std::vector<int64_t> strides[2] = {strides_of(a, fa), strides_of(b, fb)};
  struct Dim {
    int64_t size, stride[2];
  };
  std::vector<Dim> dims;
  for (int d : order) {
    if (out[size_t(d)] == 1) continue;  // contributes nothing
    Dim cur{out[size_t(d)], {0, 0}};
    for (int k = 0; k < 2; ++k) {
      const int dk = d - (nd - int(shapes[k]->size()));  // the operand's own dim (aligned at the end)
      if (dk >= 0 && (*shapes[k])[size_t(dk)] != 1) cur.stride[k] = strides[k][size_t(dk)];
    }
    // Merge into the previous (outer) dim when every operand steps through both as one.
    if (!dims.empty()) {
      Dim& prev = dims.back();
      bool merge = true;
      for (int k = 0; k < 2; ++k) merge = merge && prev.stride[k] == cur.stride[k] * cur.size;
      if (merge) {
        prev.size *= cur.size;
        prev.stride[0] = cur.stride[0];
        prev.stride[1] = cur.stride[1];
        continue;
      }
    }
    dims.push_back(cur);
  }
  RT_CHECK(int(dims.size()) <= ew::kMaxDims, "broadcast: shapes ", shape_str(a), " and ", shape_str(b), " need ",
           dims.size(), " dims after merging; at most ", ew::kMaxDims, " are supported");
  ew::BroadcastPlan p;
  if (dims.empty()) {  // a single element
    p.size[0] = 1;
    return p;
  }
  p.nd = int(dims.size());
  for (int d = 0; d < p.nd; ++d) {
    p.size[d] = dims[size_t(d)].size;
    p.stride[0][d] = dims[size_t(d)].stride[0];
    p.stride[1][d] = dims[size_t(d)].stride[1];
  }
  return p;
}

Tensor sum_to(const Tensor& g, const ew::BroadcastPlan& p, int operand, const Shape& shape, MemoryFormat f) {
  if (g.numel() == 0) return Tensor::zeros(shape, g.dtype(), g.device(), f);
  Tensor r = Tensor::empty(shape, g.dtype(), g.device(), f);
  if (g.device().is_cuda()) {
    cuda::sum_to(g.dtype(), p, operand, g.raw_data(), r.raw_data(), stream_of(g));
    return r;
  }
  dispatch_float(g.dtype(), "sum_to", [&](auto z) {
    using T = decltype(z);
    cpu::sum_to<T>(p, operand, g.data<T>(), r.data<T>());
  });
  return r;
}

}  // namespace rt::ops
