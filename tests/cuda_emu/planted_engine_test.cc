// Planted bugs in the engine's own CUDA code that the emulator must catch (the kernels'
// planted bugs are in checks_test.cc): a deleted cudaStreamWaitEvent in the device feeder
// (data/loading/device_feeder.cc), allocator misuse across streams, and an overrun between two of the
// caching allocator's blocks. Outside --config=cuda-emu
// the test says SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "data/datasets/dataset.h"
#include "data/loading/device_feeder.h"
#include "data/loading/loader.h"
#include "data/loading/sampler.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "tests/cuda_emu/planted.h"

// The emulator's own checks: under cuda-emu-asan and -tsan the sanitizer's instrumentation
// replaces them (docs/cuda-on-cpu.md), so these cases run in the plain config only.
#if RINGTAPE_CUDA_EMU && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include "cuda_emu/emu.h"

namespace rt {
namespace {

// The queued work of the code under test ends in a fault whose report names every one of
// `parts` and at least one of `any_of`; then the fault is cleared. An rt::Error already
// thrown by the code (the fault is asynchronous and may surface at its next CUDA call) must
// be the emulator's.
template <typename F>
void expect_caught(F&& code, const std::vector<std::string>& parts, const std::vector<std::string>& any_of) {
  try {
    code();
    Stream::current(Device::cuda(0)).synchronize();
    FAIL("the planted bug was not caught");
  } catch (const std::exception& e) {
    CHECK_MESSAGE(std::string(e.what()).find("cuda-emu:") != std::string::npos, e.what());
  }
  const std::string report = emu::last_fault();
  for (const std::string& p : parts) CHECK_MESSAGE(report.find(p) != std::string::npos, "'", p, "' not in:\n", report);
  bool one = false;
  for (const std::string& p : any_of) one |= report.find(p) != std::string::npos;
  CHECK_MESSAGE(one, "none of the expected findings in:\n", report);
  emu::clear_faults();
}

TEST_CASE("DeviceFeeder: without the compute stream's wait for its copy, the hazard names the copy") {
  data::DatasetOptions o;
  o.synthetic.size = 32;
  o.synthetic.image_shape = {3, 8, 8};
  const auto ds = data::open_dataset("synthetic", "", "train", o);
  data::LoaderOptions lo;
  lo.pin_memory = true;  // asynchronous copies: the only kind that needs the wait
  data::Loader loader(*ds, data::Sampler(ds->size(), 8), lo);
  // The synthetic dataset's u8 images: normalize_pixels is the first kernel to read a batch.
  data::DeviceFeeder feed(loader, Device::cuda(0), MemoryFormat::channels_last);
  feed.start_epoch(0);
  REQUIRE(feed.next().has_value());  // as written: no fault
  Stream::current(Device::cuda(0)).synchronize();
  CHECK(emu::last_fault().empty());
  // next() makes the copy stream wait for the compute stream, then the compute stream wait
  // for the copy (Note [Copy overlap] in data/loading/device_feeder.cc). The second is deleted. The
  // first kernel to read the batch then either runs after the copy, unordered (the hazard,
  // naming the copy), or before it (a read of the batch's never-written bytes): which one
  // depends on the two streams' timing, as on a GPU.
  emu::drop_stream_waits(1, 1);
  expect_caught([&] { feed.next(); }, {"normalize_pixels_kernel"},
                {"cross-stream hazard: the kernel reads 1 bytes", "read of never-written device memory"});
}

// Note [Red zones between blocks] in engine/caching_allocator.cc: a tensor of exactly 512
// bytes (no rounding slack) with another allocated and written right after it in the same
// segment; a kernel reading one element past its end reads the allocator's red zone and
// faults, instead of reading the neighbour's first element unseen.
TEST_CASE("caching allocator: an overrun past a block of an exact multiple of 512 bytes faults") {
  const Device gpu = Device::cuda(0);
  const Tensor x = Tensor::full({128}, 1.0, DType::f32, gpu);  // 512 bytes
  const Tensor next = Tensor::full({128}, 2.0, DType::f32, gpu);
  Tensor y = Tensor::empty({128}, DType::f32, gpu);
  const cudaStream_t s = static_cast<cudaStream_t>(Stream::current(gpu).handle());
  emu_test::pair_sum(x.data<float>(), 128, y.data<float>(), false, s);  // as written: no fault
  Stream::current(gpu).synchronize();
  CHECK(emu::last_fault().empty());
  expect_caught([&] { emu_test::pair_sum(x.data<float>(), 128, y.data<float>(), true, s); },
                {"out-of-bounds read of 4 bytes", "pair_sum_kernel", "0 bytes past the end of the 512-byte block"},
                {"planted.cu"});
  CHECK(next.to(Device::cpu()).to_vector<double>()[0] == 2.0);
}

}  // namespace
}  // namespace rt

#else

TEST_CASE("engine planted bugs") {
  std::printf("SKIPPED: the emulator's own checks run under --config=cuda-emu (not -asan, -tsan)\n");
}

#endif
