// The local step of ring and tree on CUDA (distributed/reduce_kernel_cuda.cc, with the kernels of
// kernels/cuda/elementwise.h) against the CPU one
// (distributed/reduce_kernel_cpu.cc): sum and max for f32, f64, bf16 and f16, and the 1/N scale.
// 16-bit types: the CPU reference computes in f32 on the same (rounded) values and rounds
// once, as the kernel does, so every result must be equal, not only close. Without a GPU
// each case prints "SKIPPED: no CUDA device" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "distributed/reduce_kernel.h"
#include "distributed/reduce_kernel_cuda.h"
#include "engine/random.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "tests/distributed/communicator_test_util.h"

namespace rt::dist {
namespace {

constexpr DType kTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// The CPU's dtype for t's reference: f64 for f64, f32 for the rest.
DType ref_type(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

cudaStream_t stream_of(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

TEST_CASE("reduce_cuda: sum and max equal the CPU's for f32, f64, bf16 and f16") {
  if (!testing::have_gpu("reduce_cuda vs reduce_cpu")) return;
  const Stream s = Stream::create(Device::cuda(0));
  StreamGuard guard(s);
  for (DType t : kTypes)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
      for (int64_t n : {int64_t(1), int64_t(1000), (int64_t(1) << 20) + 3}) {
        Generator g(7 + uint64_t(n));
        const Tensor a = randn({n}, g, t), b = randn({n}, g, t);  // rounded to t
        Tensor inout = a.to(Device::cuda(0));
        reduce_cuda(op, t, n, b.to(Device::cuda(0)).raw_data(), inout.raw_data(), stream_of(s));
        Tensor want = a.to(ref_type(t));
        reduce_cpu(op, ref_type(t), n, b.to(ref_type(t)).raw_data(), want.raw_data());
        testing::expect_equal(inout, want.to(t).to_vector<double>(),
                              detail::cat("reduce_cuda ", reduce_op_name(op), " ", dtype_name(t), " x ", n));
      }
}

TEST_CASE("scale_cuda: the 1/N of an average equals the CPU's") {
  if (!testing::have_gpu("scale_cuda vs scale_cpu")) return;
  const Stream s = Stream::create(Device::cuda(0));
  StreamGuard guard(s);
  for (DType t : kTypes) {
    Generator g(3);
    const Tensor a = randn({4099}, g, t);
    Tensor x = a.to(Device::cuda(0));
    scale_cuda(t, 4099, x.raw_data(), 1.0 / 3, stream_of(s));
    Tensor want = a.to(ref_type(t));
    scale_cpu(ref_type(t), 4099, want.raw_data(), 1.0 / 3);
    testing::expect_equal(x, want.to(t).to_vector<double>(), detail::cat("scale_cuda ", dtype_name(t)));
  }
}

TEST_CASE("reduce: a NaN on either side wins a max, on the GPU and on the CPU") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> a = {nan, 1.0, 2.0}, b = {0.0, nan, 3.0}, want = {nan, nan, 3.0};
  Tensor cpu = Tensor::from_vector(a, {3}).to(DType::f32);
  reduce_cpu(ReduceOp::max, DType::f32, 3, Tensor::from_vector(b, {3}).to(DType::f32).raw_data(), cpu.raw_data());
  testing::expect_equal(cpu, want, "reduce_cpu max with NaN");
  if (!testing::have_gpu("reduce_cuda max with NaN")) return;
  const Stream s = Stream::create(Device::cuda(0));
  StreamGuard guard(s);
  for (DType t : kTypes) {
    Tensor x = Tensor::from_vector(a, {3}).to(t).to(Device::cuda(0));
    reduce_cuda(ReduceOp::max, t, 3, Tensor::from_vector(b, {3}).to(t).to(Device::cuda(0)).raw_data(), x.raw_data(),
                stream_of(s));
    testing::expect_equal(x, want, detail::cat("reduce_cuda max with NaN ", dtype_name(t)));
  }
}

}  // namespace
}  // namespace rt::dist
