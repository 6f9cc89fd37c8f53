// matmul: (M, K) x (K, N) -> (M, N), and the batched (B, M, K) x (B, K, N) -> (B, M, N).
// Kernels: kernels/cpu/matmul.cc (Eigen's GEMM; f32, f64) and kernels/cuda/matmul.cu
// (cuBLAS strided-batched; f32, f64, bf16, f16). The backward runs the same GEMMs:
// da = dc b^T, db = a^T dc (transposes are the GEMMs' flags, nothing is copied).
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/matmul.h"

#include "engine/ops.h"
#include "engine/ops/op_util.h"

namespace rt {
namespace {

struct Dims {
  int64_t batch, M, N, K;
};

// c[i] = op(a[i]) op(b[i]) on the tensors' device (Dims as in kernels/cpu/matmul.h).
void run_matmul(const Dims& m, bool ta, bool tb, const Tensor& a, const Tensor& b, const Tensor& c) {
  if (c.device().is_cuda()) {
    cuda::matmul(c.dtype(), m.batch, ta, tb, m.M, m.N, m.K, a.raw_data(), b.raw_data(), c.raw_data(),
                 ops::stream_of(c));
    return;
  }
  ops::dispatch_float(c.dtype(), "matmul", [&](auto z) {
    using T = decltype(z);
    cpu::matmul<T>(m.batch, ta, tb, m.M, m.N, m.K, a.data<T>(), b.data<T>(), c.data<T>());
  });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const char* op = "matmul";
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  RT_CHECK((a.ndim() == 2 || a.ndim() == 3) && b.ndim() == a.ndim(), op,
           ": expected (M, K) x (K, N) or (B, M, K) x (B, K, N), got ", a.str(), " x ", b.str());
  if (a.device().is_cuda()) {
    RT_CHECK(is_floating(a.dtype()), op, ": a must be f32, f64, bf16 or f16 on CUDA, got ", dtype_name(a.dtype()));
  } else {
    check_float(a, op, "a");
  }
  check_same_dtype(a, b, op);
  check_same_device(a, b, op);
  const bool batched = a.ndim() == 3;
  const Dims m{batched ? a.size(0) : 1, a.size(-2), b.size(-1), a.size(-1)};
  RT_CHECK(b.size(-2) == m.K, op, ": a ", a.str(), " has ", m.K, " columns but b ", b.str(), " has ", b.size(-2),
           " rows");
  RT_CHECK(!batched || b.size(0) == m.batch, op, ": batch sizes differ: a ", a.str(), ", b ", b.str());
  // Cost: B*M*N*K multiply-adds forward, twice that back (da, db); bytes: a, b, c; dc twice,
  // a, b, da, db.
  const auto cost = [&] {
    const double macs = double(m.batch) * double(m.M) * double(m.N) * double(m.K);
    const double ab = ops::nbytes_of(m.batch * m.M * m.K, a.dtype());
    const double bb = ops::nbytes_of(m.batch * m.K * m.N, a.dtype());
    const double cb = ops::nbytes_of(m.batch * m.M * m.N, a.dtype());
    return prof::OpCost{{2 * macs, ab + bb + cb}, {4 * macs, 2 * cb + 2 * ab + 2 * bb}};
  };
  RT_PROFILE_OP(op, cost(), &a, &b);
  const Shape out_shape = batched ? Shape{m.batch, m.M, m.N} : Shape{m.M, m.N};
  Tensor c = Tensor::empty(out_shape, a.dtype(), a.device());
  run_matmul(m, false, false, a, b, c);
  // da needs b, db needs a: keep only what the backward will read.
  const Tensor saved_a = b.requires_grad() ? a.detach() : Tensor();
  const Tensor saved_b = a.requires_grad() ? b.detach() : Tensor();
  record(op, c, {a, b}, [m, saved_a, saved_b](const Tensor& dc, const std::vector<bool>& needs) {
    Tensor da, db;
    if (needs[0]) {  // da (M x K) = dc (M x N) b^T
      da = Tensor::empty(saved_b.ndim() == 3 ? Shape{m.batch, m.M, m.K} : Shape{m.M, m.K}, dc.dtype(), dc.device());
      run_matmul({m.batch, m.M, m.K, m.N}, false, true, dc, saved_b, da);
    }
    if (needs[1]) {  // db (K x N) = a^T dc (M x N)
      db = Tensor::empty(saved_a.ndim() == 3 ? Shape{m.batch, m.K, m.N} : Shape{m.K, m.N}, dc.dtype(), dc.device());
      run_matmul({m.batch, m.K, m.N, m.M}, true, false, saved_a, dc, db);
    }
    return std::vector<Tensor>{da, db};
  });
  return c;
}

}  // namespace rt
