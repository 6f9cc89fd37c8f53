// The caching device allocator: its logic over a fake device (addresses without memory,
// events completed by the test), then the real CUDA allocator when a GPU is present.
#include <cstdio>
#include <cstdint>
#include <map>
#include <set>

#include "engine/caching_allocator.h"
#include "engine/stream.h"
#include "kernels/cuda/runtime.h"
#include "tests/test_util.h"

namespace rt {
namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

// A device with `capacity` bytes. Addresses are made up (never dereferenced); events
// complete when the test says so, or when the allocator waits for them.
struct FakeDevice {
  size_t capacity = 64 * kMiB;
  size_t used = 0;
  uintptr_t next = 1 << 20;
  std::set<void*> live;
  int allocs = 0, frees = 0, failed = 0;
  // Events: recorded on which stream, completed, destroyed.
  std::vector<StreamId> event_stream;
  std::set<size_t> done, destroyed;
  int waits = 0;
  int queries = 0;  // non-blocking event queries
};

class FakeRaw final : public RawMemory {
 public:
  explicit FakeRaw(FakeDevice* d) : d_(d) {}
  void* alloc(size_t bytes) override {
    if (d_->used + bytes > d_->capacity) {
      d_->failed++;
      return nullptr;
    }
    void* p = reinterpret_cast<void*>(d_->next);
    d_->next += bytes + (64 << 10);  // a gap: segments are never adjacent
    d_->used += bytes;
    d_->live.insert(p);
    sizes_[p] = bytes;
    d_->allocs++;
    return p;
  }
  void free(void* ptr) noexcept override {
    d_->frees++;
    d_->used -= sizes_[ptr];
    d_->live.erase(ptr);
  }
  void mem_info(size_t* free_bytes, size_t* total_bytes) override {
    *free_bytes = d_->capacity - d_->used;
    *total_bytes = d_->capacity;
  }
  void* record_event(StreamId stream) override {
    d_->event_stream.push_back(stream);
    return reinterpret_cast<void*>(d_->event_stream.size());  // event i+1
  }
  bool event_done(void* event, bool wait) override {
    const size_t i = reinterpret_cast<size_t>(event) - 1;
    if (!wait) d_->queries++;
    if (wait && !d_->done.count(i)) {
      d_->waits++;
      d_->done.insert(i);
    }
    return d_->done.count(i) > 0;
  }
  void destroy_event(void* event) noexcept override { d_->destroyed.insert(reinterpret_cast<size_t>(event) - 1); }

 private:
  FakeDevice* d_;
  std::map<void*, size_t> sizes_;
};

StreamId fake_stream(int i) { return reinterpret_cast<StreamId>(uintptr_t(0x1000 * i)); }

// An allocator over a fake device whose current stream is *current.
struct Fixture {
  FakeDevice dev;
  StreamId current = fake_stream(1);
  CachingAllocator a{Device::cuda(0), std::make_unique<FakeRaw>(&dev), [this] { return current; }};
};

char* cp(void* p) { return static_cast<char*>(p); }

TEST_CASE("a freed block is reused for the same rounded size without a system call") {
  Fixture f;
  void* p = f.a.allocate(1000);
  CHECK(f.dev.allocs == 1);
  f.a.deallocate(p, 1000);
  void* q = f.a.allocate(700);  // 700 and 1000 both round to 1024
  CHECK(q == p);
  CHECK(f.dev.allocs == 1);
  CHECK(f.a.stats().num_cache_hits == 1);
  f.a.deallocate(q, 700);
}

TEST_CASE("small requests round to 512 bytes and share a 2 MiB segment") {
  Fixture f;
  void* a = f.a.allocate(1);
  void* b = f.a.allocate(513);
  void* c = f.a.allocate(0);
  CHECK(f.dev.allocs == 1);
  CHECK(cp(b) == cp(a) + 512);
  CHECK(cp(c) == cp(b) + 1024);
  CHECK(f.a.stats().reserved_bytes == int64_t(2 * kMiB));
  CHECK(f.a.stats().allocated_bytes == 2048);
  CHECK(f.a.stats().current_bytes == 514);
  CHECK(f.a.stats().num_segments == 1);
  for (void* p : {a, b, c}) f.a.deallocate(p, 0);
  CHECK(f.a.stats().allocated_bytes == 0);
}

TEST_CASE("large requests get segments rounded to 2 MiB, split when 1 MiB or more is left") {
  Fixture f;
  void* a = f.a.allocate(3 * kMiB);  // 4 MiB segment: 3 MiB block + a cached 1 MiB rest
  CHECK(f.a.stats().reserved_bytes == int64_t(4 * kMiB));
  void* b = f.a.allocate(kMiB);
  CHECK(cp(b) == cp(a) + 3 * kMiB);
  CHECK(f.dev.allocs == 1);
  void* c = f.a.allocate(3 * kMiB + 1);  // rest under 1 MiB: the whole 4 MiB block, no split
  const auto snap = f.a.snapshot();
  CHECK(snap.size() == 3);
  CHECK(snap.back().ptr == c);
  CHECK(snap.back().size == 4 * kMiB);
  CHECK(f.a.stats().allocated_bytes == int64_t(8 * kMiB));
  // A large request never takes a small-pool block, and the reverse.
  void* s = f.a.allocate(100 * kKiB);
  CHECK(f.dev.allocs == 3);
  for (void* p : {a, b, c, s}) f.a.deallocate(p, 0);
}

TEST_CASE("split blocks coalesce with free neighbours of their segment") {
  Fixture f;
  void* a = f.a.allocate(512);
  void* b = f.a.allocate(512);
  void* c = f.a.allocate(512);
  CHECK(f.a.snapshot().size() == 4);  // a, b, c and the free rest
  f.a.deallocate(b, 512);
  f.a.deallocate(a, 512);             // a merges with b
  auto snap = f.a.snapshot();
  REQUIRE(snap.size() == 3);
  CHECK(snap[0].ptr == a);
  CHECK(snap[0].size == 1024);
  CHECK(!snap[0].allocated);
  CHECK(f.a.allocate(1024) == a);     // best fit: the merged block, not the 2 MiB rest
  f.a.deallocate(a, 1024);
  f.a.deallocate(c, 512);             // a+b, c and the rest become the whole segment
  snap = f.a.snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].size == 2 * kMiB);
  f.a.empty_cache();
  CHECK(f.dev.frees == 1);
  CHECK(f.a.stats().reserved_bytes == 0);
}

TEST_CASE("blocks are cached per stream") {
  Fixture f;
  void* p = f.a.allocate(4 * kMiB);  // on stream 1
  f.a.deallocate(p, 0);
  f.current = fake_stream(2);
  void* q = f.a.allocate(4 * kMiB);
  CHECK(q != p);
  CHECK(f.dev.allocs == 2);
  CHECK(f.a.snapshot()[1].stream == fake_stream(2));
  void* z = f.a.allocate(4 * kMiB, nullptr);  // the default stream: neither p nor q
  CHECK(z != p);
  CHECK(f.dev.allocs == 3);
  f.a.deallocate(z, 0);
  f.a.deallocate(q, 0);
  CHECK(f.a.allocate(4 * kMiB, fake_stream(1)) == p);  // explicit stream
  f.current = fake_stream(1);
  CHECK(f.a.allocate(4 * kMiB, fake_stream(2)) == q);
  // A free goes to the block's stream, whatever the current stream is at free time.
  f.current = fake_stream(2);
  f.a.deallocate(p, 0);
  CHECK(f.a.allocate(4 * kMiB, fake_stream(1)) == p);
}

TEST_CASE("a block used on another stream is reused only after that stream's event completes") {
  Fixture f;
  void* p = f.a.allocate(8 * kKiB);
  f.a.record_stream(p, fake_stream(1));  // its own stream: nothing to wait for
  f.a.record_stream(p, fake_stream(2));
  f.a.record_stream(p, fake_stream(2));  // once is enough
  f.a.record_stream(p, fake_stream(3));
  CHECK_THROWS_WITH_AS(f.a.record_stream(cp(p) + 512, fake_stream(2)), doctest::Contains("not the start"), Error);
  f.a.deallocate(p, 0);
  REQUIRE(f.dev.event_stream.size() == 2);
  CHECK(f.dev.event_stream[0] == fake_stream(2));
  CHECK(f.dev.event_stream[1] == fake_stream(3));
  CHECK(f.a.snapshot()[0].awaiting_events);

  void* q = f.a.allocate(8 * kKiB);  // events pending: p is not free
  CHECK(q != p);
  f.a.deallocate(q, 0);
  f.dev.done.insert(0);
  void* r = f.a.allocate(8 * kKiB);  // one of two events done: still not free
  CHECK(r != p);
  f.a.deallocate(r, 0);
  f.dev.done.insert(1);
  void* s = f.a.allocate(8 * kKiB);
  CHECK(s == p);
  CHECK(f.dev.destroyed == std::set<size_t>{0, 1});
  CHECK(f.dev.waits == 0);  // nobody waited on the host
  f.a.deallocate(s, 0);
  // The next use starts clean: no events recorded for the earlier record_stream calls.
  CHECK(f.dev.event_stream.size() == 2);
}

TEST_CASE("a block freed after use on a second stream comes back as soon as its event completes") {
  Fixture f;
  void* p = f.a.allocate(4 * kMiB);  // its own 4 MiB segment on stream 1
  f.a.record_stream(p, fake_stream(2));
  f.a.deallocate(p, 0);
  CHECK(f.a.stats().num_segments == 1);
  // Stream 2 has not passed the free: the block is not reused, a new segment is made.
  void* q = f.a.allocate(4 * kMiB);
  CHECK(q != p);
  CHECK(f.a.stats().num_system_allocs == 2);
  CHECK(f.dev.queries == 1);
  f.a.deallocate(q, 0);
  void* r = f.a.allocate(4 * kMiB);  // q's block (same stream, no events); p still pending
  CHECK(r == q);
  CHECK(f.a.snapshot()[0].awaiting_events);
  // The event completes: the very next allocation finds p's block, with no new segment,
  // no out-of-memory retry, no empty_cache and no host wait.
  f.dev.done.insert(0);
  void* s = f.a.allocate(4 * kMiB);
  CHECK(s == p);
  CHECK(f.a.stats().num_system_allocs == 2);
  CHECK(f.a.stats().num_segments == 2);
  CHECK(f.a.stats().num_oom_retries == 0);
  CHECK(f.dev.waits == 0);
  CHECK(f.dev.failed == 0);
  CHECK(f.dev.destroyed == std::set<size_t>{0});
  for (void* x : {r, s}) f.a.deallocate(x, 0);
  CHECK(f.dev.event_stream.size() == 1);
}

TEST_CASE("a block whose events complete merges with its free neighbours") {
  Fixture f;
  void* a = f.a.allocate(512);
  void* b = f.a.allocate(512);
  f.a.record_stream(a, fake_stream(2));
  f.a.deallocate(a, 0);
  f.a.deallocate(b, 0);  // b merges with the rest of the segment, not with pending a
  REQUIRE(f.a.snapshot().size() == 2);
  f.dev.done.insert(0);
  void* c = f.a.allocate(512, fake_stream(5));  // any allocation processes the events
  auto snap = f.a.snapshot();
  REQUIRE(snap.size() == 3);  // the first segment whole again; c and its rest
  CHECK(snap[0].ptr == a);
  CHECK(snap[0].size == 2 * kMiB);
  CHECK(!snap[0].awaiting_events);
  CHECK(f.a.allocate(512) == a);
  CHECK(f.dev.waits == 0);
  f.a.deallocate(c, 0);
}

TEST_CASE("events of one stream are queried in order: a pass stops at the first pending one") {
  Fixture f;
  void* a = f.a.allocate(8 * kKiB);
  void* b = f.a.allocate(8 * kKiB);
  void* c = f.a.allocate(8 * kKiB);
  f.a.record_stream(a, fake_stream(2));
  f.a.record_stream(b, fake_stream(2));
  f.a.record_stream(c, fake_stream(3));
  for (void* p : {a, b, c}) f.a.deallocate(p, 0);  // events 0, 1 on stream 2; 2 on stream 3
  f.dev.done.insert(2);
  void* d = f.a.allocate(8 * kKiB);
  CHECK(f.dev.queries == 2);  // event 0 (pending: event 1 not asked) and event 2 (done)
  CHECK(d == c);
  f.dev.done.insert(0);
  f.dev.done.insert(1);
  void* e = f.a.allocate(8 * kKiB);
  CHECK(f.dev.queries == 4);
  CHECK(e == a);
  CHECK(f.a.snapshot().size() == 4);  // e, free b (a+b merged, then split for e), d, the rest
  for (void* p : {d, e}) f.a.deallocate(p, 0);
  CHECK(f.dev.destroyed == std::set<size_t>{0, 1, 2});
  CHECK(f.dev.waits == 0);
}

TEST_CASE("statistics: current, peak, reserved, counts and reset_peak") {
  Fixture f;
  Allocator& a = f.a;
  CHECK(a.device() == Device::cuda(0));
  void* p = a.allocate(1000);
  void* q = a.allocate(3 * kMiB);
  AllocatorStats s = a.stats();
  CHECK(s.current_bytes == int64_t(1000 + 3 * kMiB));
  CHECK(s.peak_bytes == s.current_bytes);
  CHECK(s.reserved_bytes == int64_t(2 * kMiB + 4 * kMiB));
  CHECK(s.num_allocs == 2);
  CHECK(s.num_segments == 2);
  CHECK(s.num_system_allocs == 2);
  a.deallocate(q, 3 * kMiB);
  s = a.stats();
  CHECK(s.current_bytes == 1000);
  CHECK(s.peak_bytes == int64_t(1000 + 3 * kMiB));
  CHECK(s.reserved_bytes == int64_t(6 * kMiB));  // cached, still reserved
  CHECK(s.num_frees == 1);
  a.reset_peak();
  CHECK(a.stats().peak_bytes == 1000);
  void* r = a.allocate(2 * kMiB);  // from the cached 4 MiB block
  CHECK(a.stats().peak_bytes == int64_t(1000 + 2 * kMiB));
  CHECK(a.stats().num_cache_hits == 1);
  CHECK(a.stats().num_system_allocs == 2);
  a.deallocate(r, 0);
  a.deallocate(p, 0);
  CHECK(a.stats().current_bytes == 0);
  a.deallocate(reinterpret_cast<void*>(0x42), 1);  // not ours: ignored, counted nowhere
  CHECK(a.stats().num_frees == 3);
}

TEST_CASE("empty_cache returns free segments, keeps used ones, and waits for pending events") {
  Fixture f;
  void* used = f.a.allocate(512);         // small segment, in use
  void* cached = f.a.allocate(4 * kMiB);  // large segment, freed below
  void* pending = f.a.allocate(6 * kMiB);
  f.a.record_stream(pending, fake_stream(7));
  f.a.deallocate(cached, 0);
  f.a.deallocate(pending, 0);
  CHECK(f.a.stats().num_segments == 3);
  f.a.empty_cache();
  CHECK(f.dev.waits == 1);
  CHECK(f.dev.frees == 2);
  CHECK(f.dev.live == std::set<void*>{used});
  CHECK(f.a.stats().reserved_bytes == int64_t(2 * kMiB));
  CHECK(f.a.stats().num_segments == 1);
  f.a.deallocate(used, 0);
  f.a.empty_cache();
  CHECK(f.dev.live.empty());
  CHECK(f.a.stats().reserved_bytes == 0);
}

TEST_CASE("out of memory: the cache is emptied and the request retried, then a clear error") {
  Fixture f;
  f.dev.capacity = 8 * kMiB;
  void* a = f.a.allocate(4 * kMiB);
  f.a.deallocate(a, 0);                  // 4 MiB cached
  void* b = f.a.allocate(6 * kMiB);      // fails once, succeeds after the cache is returned
  CHECK(f.dev.failed == 1);
  CHECK(f.dev.frees == 1);
  CHECK(f.a.stats().num_oom_retries == 1);
  CHECK(f.a.stats().reserved_bytes == int64_t(6 * kMiB));
  // Blocks waiting for another stream are waited for before giving up.
  void* c = f.a.allocate(kMiB + 512);    // 2 MiB segment: device full
  f.a.record_stream(c, fake_stream(9));
  f.a.deallocate(c, 0);
  void* d = f.a.allocate(2 * kMiB, fake_stream(5));
  CHECK(f.dev.waits == 1);
  CHECK(f.a.stats().num_oom_retries == 2);
  // Nothing left to give back: the error names the request, the state and the remedy.
  try {
    f.a.allocate(3 * kMiB + 5);
    FAIL("expected an out-of-memory error");
  } catch (const Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("cuda:0") != std::string::npos);
    CHECK(m.find("tried to allocate 3145733 bytes") != std::string::npos);
    CHECK(m.find(std::to_string(8 * kMiB) + " bytes reserved") != std::string::npos);
    CHECK(m.find(std::to_string(8 * kMiB) + " bytes are allocated") != std::string::npos);
    CHECK(m.find("has 0 of 8388608 bytes free") != std::string::npos);
    CHECK(m.find("--batch-size") != std::string::npos);
    CHECK(m.find("--accum-steps") != std::string::npos);
  }
  CHECK(f.a.stats().current_bytes == int64_t(8 * kMiB));  // the failure changed nothing
  f.a.deallocate(b, 0);
  f.a.deallocate(d, 0);
  CHECK(f.a.allocate(3 * kMiB + 5) == b);  // fits in the cached 6 MiB block
  CHECK(f.dev.failed == 4);
}

TEST_CASE("sizes beyond any device are refused before rounding overflows") {
  Fixture f;
  CHECK_THROWS_WITH_AS(f.a.allocate(~size_t(0)), doctest::Contains("beyond any device"), Error);
}

// ---- real device ----------------------------------------------------------------------

bool have_gpu(const char* test) {
  std::string why;
  if (cuda::device_count(&why) > 0) return true;
  std::printf("SKIPPED: no CUDA device (%s): %s\n", why.c_str(), test);
  return false;
}

TEST_CASE("the CUDA allocator caches, is per stream, and fails clearly") {
  if (!have_gpu("caching allocator on cuda:0")) return;
  const Device d = Device::cuda(0);
  auto* a = dynamic_cast<CachingAllocator*>(&allocator_for(d));
  REQUIRE(a != nullptr);
  const AllocatorStats s0 = a->stats();
  // Reuse: a tensor freed and made again gets the same memory without cudaMalloc.
  const void* first = nullptr;
  {
    Tensor t = Tensor::full({1 << 20}, 2.0, DType::f32, d);
    first = t.raw_data();
  }
  const int64_t sys = a->stats().num_system_allocs;
  {
    Tensor t = Tensor::full({1 << 20}, 3.0, DType::f32, d);
    CHECK(t.raw_data() == first);
    CHECK(t.to_vector<float>()[777] == 3.0f);
  }
  CHECK(a->stats().num_system_allocs == sys);
  CHECK(a->stats().num_cache_hits > s0.num_cache_hits);
  CHECK(a->stats().current_bytes == s0.current_bytes);
  // Another stream gets its own blocks; the memory of one used on a second stream comes
  // back at the first allocation after that stream has passed the free (cudaEventQuery),
  // with no empty_cache; empty_cache waits for pending events.
  Stream s = Stream::create(d);
  Stream other = Stream::create(d);  // outlives the tensor: its free records an event there
  const void* on_s = nullptr;
  {
    StreamGuard g(s);
    Tensor t = Tensor::full({1 << 20}, 4.0, DType::f32, d);
    on_s = t.raw_data();
    CHECK(on_s != first);
    a->record_stream(t.raw_data(), other);
    CHECK(t.to_vector<float>()[5] == 4.0f);
  }
  bool awaiting = false;
  for (const auto& b : a->snapshot()) awaiting = awaiting || b.awaiting_events;
  CHECK(awaiting);
  other.synchronize();
  {
    StreamGuard g(s);
    const int64_t segs = a->stats().num_system_allocs;
    Tensor t = Tensor::full({1 << 20}, 5.0, DType::f32, d);
    CHECK(t.raw_data() == on_s);
    CHECK(a->stats().num_system_allocs == segs);
    a->record_stream(t.raw_data(), other);
  }
  a->empty_cache();
  for (const auto& b : a->snapshot()) CHECK(!b.awaiting_events);
  CHECK(a->stats().reserved_bytes <= a->stats().allocated_bytes + int64_t(4 * kMiB));
  // Out of memory after the retry: the request and the remedy in the message.
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 50}, DType::u8, d), doctest::Contains("1125899906842624"),
                       Error);
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 50}, DType::u8, d), doctest::Contains("--batch-size"), Error);
  CHECK(a->stats().current_bytes == s0.current_bytes);
}

}  // namespace
}  // namespace rt
