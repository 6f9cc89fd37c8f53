// The CUDA side of the device layer: device query, allocation, copies, fill, streams.
// Without a GPU it checks what it can (clear errors, CPU fallbacks) and says SKIPPED.
#include <cstdio>

#include "engine/stream.h"
#include "kernels/cuda/runtime.h"
#include "tests/test_util.h"

namespace rt {
namespace {

bool have_gpu(const char* test) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("SKIPPED: no CUDA device (%s): %s\n", why.c_str(), test);
  return false;
}

TEST_CASE("device query never throws") {
  std::string why;
  const int n = cuda::device_count(&why);
  CHECK(n >= 0);
  if (n == 0) CHECK(!why.empty());
  CHECK(cuda::runtime_versions().find("runtime") == 0);
}

TEST_CASE("upload, fill, download in every dtype") {
  if (!have_gpu("upload, fill, download")) return;
  const Device d = Device::cuda(0);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    Tensor g = Tensor::full({1000, 3}, 7.0, t, d);
    CHECK(g.device() == d);
    const std::vector<double> v = g.to_vector<double>();
    CHECK(v == std::vector<double>(3000, 7.0));
  }
  const Tensor x = test::rnd({2, 3, 4, 5}, 3, DType::f32);
  const Tensor back = x.to(d).to(MemoryFormat::channels_last).to(Device::cpu());
  CHECK(back.format() == MemoryFormat::channels_last);
  CHECK(back.to_vector<float>() == x.to_vector<float>());
  CHECK(x.to(d).clone().to(DType::bf16).to(Device::cpu()).dtype() == DType::bf16);
}

TEST_CASE("device allocator statistics") {
  if (!have_gpu("device allocator statistics")) return;
  Allocator& a = allocator_for(Device::cuda(0));
  const int64_t before = a.stats().current_bytes;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::f32, Device::cuda(0));
    CHECK(a.stats().current_bytes == before + (4 << 20));
  }
  CHECK(a.stats().current_bytes == before);
}

TEST_CASE("out of memory names the request and the remedy") {
  if (!have_gpu("out of memory message")) return;
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 50}, DType::u8, Device::cuda(0)),
                       doctest::Contains("a smaller batch"), Error);
}

TEST_CASE("streams and events order work") {
  if (!have_gpu("streams and events")) return;
  const Device d = Device::cuda(0);
  Stream s = Stream::create(d);
  Event start(d), end(d);
  Tensor t;
  {
    StreamGuard g(s);
    start.record(s);
    t = Tensor::full({1 << 22}, 3.0, DType::f32, d);
    end.record(s);
  }
  end.synchronize();
  CHECK(start.elapsed_ms(end) >= 0.0f);
  Stream other = Stream::create(d);
  end.block(other);
  StreamGuard g(other);
  CHECK(t.to_vector<float>()[12345] == 3.0f);
}

}  // namespace
}  // namespace rt
