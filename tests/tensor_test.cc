// Tensor, dtypes, memory formats, views, devices and allocator statistics.
#include <cmath>
#include <limits>

#include "engine/ops.h"
#include "engine/stream.h"
#include "tests/test_util.h"

namespace rt {
namespace {

TEST_CASE("dtype tables and sizes") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(std::string(dtype_name(DType::u8)) == "u8");
}

TEST_CASE("f16 conversion round-trips every finite half value and rounds to nearest even") {
  int checked = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00u) == 0x7c00u) continue;  // Inf / NaN
    const float f = f16_to_f32(uint16_t(h));
    REQUIRE(f32_to_f16(f) == uint16_t(h));
    ++checked;
  }
  CHECK(checked == 63488);
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));           // smallest subnormal
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);     // tie -> even (down)
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02); // tie -> even (up)
  CHECK(f32_to_f16(70000.0f) == 0x7c00);                         // overflow -> Inf
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);            // half the smallest subnormal -> 0 (even)
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN") {
  CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    if ((h & 0x7f80u) == 0x7f80u) continue;
    REQUIRE(f32_to_bf16(bf16_to_f32(uint16_t(h))) == uint16_t(h));
  }
}

TEST_CASE("creation, fill and host access") {
  Tensor t = Tensor::full({2, 3}, 1.5);
  CHECK(t.numel() == 6);
  CHECK(t.nbytes() == 24);
  CHECK(t.to_vector<float>() == std::vector<float>(6, 1.5f));
  Tensor s = Tensor::scalar(4.0, DType::f64);
  CHECK(s.ndim() == 0);
  CHECK(s.item() == 4.0);
  Tensor v = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  CHECK(v.dtype() == DType::i64);
  CHECK(v.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK_THROWS_WITH_AS(Tensor::from_vector(std::vector<float>{1, 2}, {3}), doctest::Contains("do not fill shape [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(v.data<float>(), doctest::Contains("tensor holds i64, accessed as f32"), Error);
  CHECK_THROWS_AS(Tensor::empty({2, -1}), Error);
  CHECK_THROWS_WITH_AS(Tensor().shape(), doctest::Contains("undefined tensor"), Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({2, 3}, DType::f32, Device::cpu(), MemoryFormat::channels_last),
                       doctest::Contains("channels_last needs a 4-D shape"), Error);
}

TEST_CASE("dtype conversion through every type") {
  const std::vector<float> vals = {0.0f, 1.0f, -2.5f, 3.25f, 100.0f, 0.1f};
  Tensor f = Tensor::from_vector(vals, {6});
  for (DType t : {DType::f64, DType::bf16, DType::f16}) {
    const std::vector<float> back = f.to(t).to(DType::f32).to_vector<float>();
    for (size_t i = 0; i < vals.size(); ++i) CHECK(back[i] == doctest::Approx(vals[i]).epsilon(t == DType::bf16 ? 4e-3 : 1e-3));
  }
  Tensor big = Tensor::from_vector(std::vector<int64_t>{(int64_t(1) << 60) + 1, -7}, {2});
  CHECK(big.to(DType::i64).to_vector<int64_t>()[0] == (int64_t(1) << 60) + 1);  // int paths stay exact
  CHECK(big.to(DType::i32).to_vector<int32_t>()[1] == -7);
  CHECK(Tensor::from_vector(std::vector<float>{2.7f}, {1}).to(DType::u8).to_vector<uint8_t>()[0] == 2);
}

TEST_CASE("channels_last keeps logical order; relayout round-trips") {
  const Tensor x = test::rnd({2, 3, 4, 5}, 7);
  const Tensor cl = x.to(MemoryFormat::channels_last);
  CHECK(cl.format() == MemoryFormat::channels_last);
  CHECK(cl.to_vector<double>() == x.to_vector<double>());
  // Element (n=1, c=2, h=3, w=4) sits at ((1*4+3)*5+4)*3+2 in NHWC memory.
  const double* p = cl.data<double>();
  CHECK(p[((1 * 4 + 3) * 5 + 4) * 3 + 2] == x.data<double>()[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  CHECK(strides_of({2, 3, 4, 5}, MemoryFormat::channels_last) == std::vector<int64_t>{60, 1, 15, 3});
  CHECK(cl.to(MemoryFormat::contiguous).to_vector<double>() == x.to_vector<double>());
  // Format and dtype change at once.
  test::check_close(cl.to(DType::f32).to_vector<double>(), x.to_vector<double>(), test::kTolF32, "cl f32");
}

TEST_CASE("views share storage; clone does not") {
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor v = x.view({3, -1});
  CHECK(v.shape() == Shape{3, 2});
  v.data<float>()[0] = 42;
  CHECK(x.to_vector<float>()[0] == 42);
  Tensor c = x.clone();
  c.data<float>()[1] = -1;
  CHECK(x.to_vector<float>()[1] == 1);
  Tensor row = x.slice_batch(1, 2);
  CHECK(row.shape() == Shape{1, 3});
  CHECK(row.to_vector<float>() == std::vector<float>{3, 4, 5});
  CHECK_THROWS_WITH_AS(x.view({4, -1}), doctest::Contains("cannot infer -1"), Error);
  CHECK_THROWS_WITH_AS(x.slice_batch(1, 3), doctest::Contains("not within dim 0"), Error);
  const Tensor cl = test::rnd({2, 3, 2, 2}, 1, DType::f32, MemoryFormat::channels_last);
  CHECK_THROWS_WITH_AS(cl.view({2, 12}), doctest::Contains("would reorder elements"), Error);
  // NHWC slices are views too (N is outermost in both layouts).
  const std::vector<float> all = cl.to_vector<float>();
  CHECK(cl.slice_batch(1, 2).to_vector<float>() == std::vector<float>(all.begin() + 12, all.end()));
}

TEST_CASE("allocator statistics track current and peak bytes") {
  Allocator& a = allocator_for(Device::cpu());
  const AllocatorStats before = a.stats();
  a.reset_peak();
  {
    Tensor t = Tensor::empty({1024, 1024});  // 4 MiB
    CHECK(a.stats().current_bytes == before.current_bytes + 4 * 1024 * 1024);
  }
  const AllocatorStats after = a.stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + 4 * 1024 * 1024);
  CHECK(after.num_allocs == before.num_allocs + 1);
  CHECK(after.num_frees == before.num_frees + 1);
}

TEST_CASE("large host blocks are cached and reused (Note [Host block cache])") {
  Allocator& a = allocator_for(Device::cpu());
  void* first;
  {
    Tensor t = Tensor::empty({3 << 20}, DType::u8);
    first = t.raw_data();
  }
  const int64_t reserved = a.stats().reserved_bytes;
  CHECK(reserved >= (3 << 20));  // the freed block stays reserved
  {
    Tensor again = Tensor::empty({(3 << 20) - 100}, DType::u8);  // same rounded size
    CHECK(again.raw_data() == first);
    CHECK(a.stats().reserved_bytes == reserved);
  }
  a.empty_cache();
  CHECK(a.stats().reserved_bytes <= reserved - (3 << 20));
}

TEST_CASE("devices parse and fail clearly") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK_THROWS_WITH_AS(Device::parse("gpu"), doctest::Contains("expected cpu, cuda or cuda:N"), Error);
  CHECK_THROWS_AS(Device::parse("cuda:x"), Error);
  if (cuda_device_count() == 0) {
    CHECK(default_device() == Device::cpu());
    CHECK_THROWS_WITH_AS(Tensor::empty({2}, DType::f32, Device::cuda(0)), doctest::Contains("use the CPU"), Error);
  }
}

TEST_CASE("CPU streams and events are trivial but usable") {
  Stream s = Stream::create(Device::cpu());
  Event e(Device::cpu());
  e.record(s);
  e.block(s);
  e.synchronize();
  s.synchronize();
  StreamGuard guard(s);
  CHECK(Stream::current(Device::cpu()).handle() == nullptr);
}

// ---- sizes from untrusted data (issue 9: memory safety and limits) ----------------------

TEST_CASE("shapes whose element or byte counts overflow int64 are refused, naming the shape") {
  const int64_t big = int64_t(1) << 32;
  // 4 x 3 x 2^32 x 2^32 wraps to 0 in int64: the tensor would get a 0-byte buffer.
  CHECK_THROWS_WITH_AS(Tensor::empty({4, 3, big, big}, DType::u8),
                       doctest::Contains("shape [4, 3, 4294967296, 4294967296] is too large"), Error);
  CHECK_THROWS_WITH_AS(shape_numel({4, 3, big, big}), doctest::Contains("is too large"), Error);
  // The order of the dims and a zero among them do not matter.
  CHECK_THROWS_WITH_AS(shape_numel({big, big, 0}), doctest::Contains("shape [4294967296, 4294967296, 0] is too large"),
                       Error);
  CHECK_THROWS_AS(shape_numel({0, big, big}), Error);
  CHECK(shape_numel({0, big}) == 0);
  CHECK(shape_numel({}) == 1);
  CHECK(shape_numel({big, big / 2 - 1}) == big * (big / 2 - 1));
  // Elements fit, bytes do not: 2^61 f32 would be 2^63 bytes (int64 wraps to negative).
  const int64_t e61 = int64_t(1) << 61;
  CHECK_THROWS_WITH_AS(Tensor::empty({e61}, DType::f32),
                       doctest::Contains("shape [2305843009213693952] of f32 is too large"), Error);
  CHECK_THROWS_WITH_AS(shape_nbytes({e61}, DType::i64), doctest::Contains("is too large"), Error);
  CHECK(shape_nbytes({e61}, DType::u8) == e61);
  CHECK(shape_nbytes({2, 3}, DType::f64) == 48);
  // Linear(512, 2^62 + 1)'s weight, what --num-classes 4611686018427387905 asked for.
  CHECK_THROWS_WITH_AS(Tensor::empty({(int64_t(1) << 62) + 1, 512}),
                       doctest::Contains("shape [4611686018427387905, 512] is too large"), Error);
  CHECK_THROWS_AS(Tensor::zeros({big, big}), Error);
  // Views: the new shape's product is checked before it is compared with numel().
  const Tensor t = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(t.view({big, big, 0}), doctest::Contains("view: shape [4294967296, 4294967296, 0] is too large"),
                       Error);
  CHECK_THROWS_WITH_AS(t.view({big, big, -1}), doctest::Contains("is too large"), Error);
  CHECK(t.view({2, -1}).shape() == Shape{2, 2});
}

TEST_CASE("an allocation the machine cannot satisfy is rt::OutOfMemory with the batch-size hint") {
  Allocator& a = allocator_for(Device::cpu());
  const AllocatorStats before = a.stats();
  // 2^50 bytes: beyond any machine's memory and x86-64's 2^47-byte user address space.
  try {
    Tensor::empty({int64_t(1) << 50}, DType::u8);
    FAIL("expected rt::OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    CHECK(what.find("out of host memory: tried to allocate 1125899906842624 bytes") != std::string::npos);
    CHECK(what.find("a smaller batch") != std::string::npos);
    CHECK(e.without_hint().find("1125899906842624 bytes") != std::string::npos);
    CHECK(e.without_hint().find("a smaller batch") == std::string::npos);
  }
  CHECK(a.stats().current_bytes == before.current_bytes);
}

TEST_CASE("clip_for_message keeps short strings and cuts long ones with their size") {
  CHECK(clip_for_message("w") == "w");
  CHECK(clip_for_message(std::string(100, 'a')) == std::string(100, 'a'));
  const std::string long_name(1'000'000, 'n');
  const std::string c = clip_for_message(long_name);
  CHECK(c == std::string(100, 'n') + "... (1000000 bytes)");
  CHECK(clip_for_message("abcdef", 3) == "abc... (6 bytes)");
  // A multi-byte UTF-8 character is not cut in two: "é" is C3 A9.
  CHECK(clip_for_message("ab\xc3\xa9" "cd", 3) == "ab... (6 bytes)");
  CHECK(clip_for_message("ab\xc3\xa9" "cd", 4) == "ab\xc3\xa9... (6 bytes)");
}

}  // namespace
}  // namespace rt
