// The caching device allocator: its logic over a fake device (addresses without memory,
// events completed by the test), then the real CUDA allocator when a GPU is present.
#include <cstdio>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "engine/caching_allocator.h"
#include "engine/cuda_graph.h"
#include "engine/ops.h"
#include "engine/memory_report.h"
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
  bool mem_info_fails = false;
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
    if (d_->mem_info_fails) RT_FAIL("fake device: mem_info failed");
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
    CHECK(m.find("(of 8.0 MiB reserved)") != std::string::npos);
    CHECK(m.find("tensors hold 8.0 MiB") != std::string::npos);
    CHECK(m.find("the device has 0 B of 8.0 MiB free") != std::string::npos);
    CHECK(m.find("a smaller batch") != std::string::npos);
    CHECK(m.find("gradient accumulation") != std::string::npos);
  }
  CHECK(f.a.stats().current_bytes == int64_t(8 * kMiB));  // the failure changed nothing
  f.a.deallocate(b, 0);
  f.a.deallocate(d, 0);
  CHECK(f.a.allocate(3 * kMiB + 5) == b);  // fits in the cached 6 MiB block
  CHECK(f.dev.failed == 4);
}

TEST_CASE("out of memory names the request, the state by tag, the largest cached block and the flags") {
  Fixture f;
  f.dev.capacity = 8 * kMiB;
  void* x;
  void* y;
  {
    MemoryTagScope s(MemoryTag::activations);
    x = f.a.allocate(3 * kMiB);  // a 4 MiB segment: 3 MiB + a cached 1 MiB rest
  }
  {
    MemoryTagScope s(MemoryTag::parameters);
    y = f.a.allocate(3 * kMiB);  // the same again: the device is full
  }
  // Neither 1 MiB rest fits 2 MiB and neither segment can be returned: fragmentation.
  try {
    f.a.allocate(2 * kMiB);
    FAIL("expected an out-of-memory error");
  } catch (const OutOfMemory& e) {
    CHECK(e.without_hint() ==
          "CUDA out of memory on cuda:0: tried to allocate 2097152 bytes (2.0 MiB, a 2097152-byte segment; the "
          "cache was emptied first); the device has 0 B of 8.0 MiB free; tensors hold 6.0 MiB (activations 3.0 MiB, "
          "parameters 3.0 MiB); the largest free block in the allocator's cache is 1.0 MiB (of 8.0 MiB reserved)");
    const std::string m = e.what();
    INFO(m);
    for (const char* flag :
         {"a smaller batch", "K steps of gradient accumulation", "bf16 precision", "channels_last memory format"})
      CHECK(m.find(flag) != std::string::npos);
    CHECK(e.without_hint().find("smaller batch") == std::string::npos);
  }
  // A device that cannot say what it has free: the message says so instead.
  f.dev.mem_info_fails = true;
  CHECK_THROWS_WITH_AS(f.a.allocate(2 * kMiB), doctest::Contains("; what the device has free is unknown;"),
                       OutOfMemory);
  f.a.deallocate(x, 0);
  f.a.deallocate(y, 0);
}

int64_t tag(const AllocatorStats& s, MemoryTag t) { return s.tag_bytes[size_t(t)]; }
int64_t sum(const TagBytes& b) { return std::accumulate(b.begin(), b.end(), int64_t(0)); }

TEST_CASE("allocations are charged to the thread's tag; frees to the block's tag, whoever frees it") {
  Fixture f;
  void* p;
  void* a;
  void* w;
  void* a2;
  {
    MemoryTagScope s1(MemoryTag::parameters);
    p = f.a.allocate(1000);
    {
      MemoryTagScope s2(MemoryTag::activations);
      a = f.a.allocate(3 * kMiB);
      {
        MemoryTagScope s3(MemoryTag::workspace);
        w = f.a.allocate(512 * kKiB);
      }
      a2 = f.a.allocate(100);  // activations again once the inner scope has ended
    }
  }
  void* o = f.a.allocate(7);  // no scope: other
  AllocatorStats s = f.a.stats();
  CHECK(tag(s, MemoryTag::parameters) == 1000);
  CHECK(tag(s, MemoryTag::activations) == int64_t(3 * kMiB + 100));
  CHECK(tag(s, MemoryTag::workspace) == int64_t(512 * kKiB));
  CHECK(tag(s, MemoryTag::other) == 7);
  CHECK(tag(s, MemoryTag::gradients) == 0);
  CHECK(sum(s.tag_bytes) == s.current_bytes);
  // Another thread: its own tag (other), whatever scope this thread is in; its free of an
  // activation under its `gradients` scope still subtracts from activations.
  {
    MemoryTagScope here(MemoryTag::optimizer_state);
    void* t = nullptr;
    std::thread([&] { t = f.a.allocate(512); }).join();
    CHECK(tag(f.a.stats(), MemoryTag::other) == 7 + 512);
    CHECK(tag(f.a.stats(), MemoryTag::optimizer_state) == 0);
    std::thread([&] {
      MemoryTagScope g(MemoryTag::gradients);
      f.a.deallocate(a, 0);
      f.a.deallocate(t, 0);
    }).join();
    f.a.deallocate(p, 0);  // under optimizer_state: still a parameter's free
  }
  s = f.a.stats();
  CHECK(tag(s, MemoryTag::activations) == 100);
  CHECK(tag(s, MemoryTag::parameters) == 0);
  CHECK(tag(s, MemoryTag::gradients) == 0);
  CHECK(tag(s, MemoryTag::optimizer_state) == 0);
  CHECK(tag(s, MemoryTag::other) == 7);
  CHECK(sum(s.tag_bytes) == s.current_bytes);
  // A reused block takes the tag of its new allocation, not its last one.
  MemoryTagScope g(MemoryTag::gradients);
  void* r = f.a.allocate(3 * kMiB);
  CHECK(r == a);
  CHECK(tag(f.a.stats(), MemoryTag::gradients) == int64_t(3 * kMiB));
  CHECK(tag(f.a.stats(), MemoryTag::activations) == 100);
  for (void* x : {r, w, a2, o}) f.a.deallocate(x, 0);
  s = f.a.stats();
  CHECK(s.tag_bytes == TagBytes{});
  CHECK(s.tag_peak[size_t(MemoryTag::activations)] == int64_t(3 * kMiB + 100));
}

TEST_CASE("peaks: total, reserved, per tag, and the breakdown at the total's peak; reset_peak") {
  Fixture f;
  auto under = [&](MemoryTag t, size_t bytes) {
    MemoryTagScope s(t);
    return f.a.allocate(bytes);
  };
  void* p = under(MemoryTag::parameters, 1000);         // small segment: 2 MiB reserved
  void* a = under(MemoryTag::activations, 3 * kMiB);    // 4 MiB segment: 6 MiB reserved
  void* w = under(MemoryTag::workspace, 512 * kKiB);    // small segment
  void* a2 = under(MemoryTag::activations, 100);
  const int64_t peak1 = int64_t(1000 + 3 * kMiB + 512 * kKiB + 100);
  AllocatorStats s = f.a.stats();
  CHECK(s.peak_bytes == peak1);
  CHECK(s.tag_at_peak == s.tag_bytes);
  f.a.deallocate(a, 0);                                 // its 4 MiB segment is free and cached
  void* g = under(MemoryTag::gradients, 2 * kMiB);      // from it: 2 MiB + a cached 2 MiB rest
  s = f.a.stats();
  CHECK(s.current_bytes == int64_t(1000 + 512 * kKiB + 100 + 2 * kMiB));  // under peak1
  CHECK(s.peak_bytes == peak1);
  TagBytes at1{};
  at1[size_t(MemoryTag::parameters)] = 1000;
  at1[size_t(MemoryTag::activations)] = int64_t(3 * kMiB + 100);
  at1[size_t(MemoryTag::workspace)] = int64_t(512 * kKiB);
  CHECK(s.tag_at_peak == at1);  // a fall and a smaller rise leave the breakdown of peak1
  CHECK(s.tag_peak[size_t(MemoryTag::gradients)] == int64_t(2 * kMiB));
  void* o = under(MemoryTag::optimizer_state, 3 * kMiB / 2);  // the 2 MiB rest, whole: a new peak
  s = f.a.stats();
  const int64_t peak2 = int64_t(1000 + 100 + 4 * kMiB);
  CHECK(s.peak_bytes == peak2);
  TagBytes at2 = at1;
  at2[size_t(MemoryTag::activations)] = 100;
  at2[size_t(MemoryTag::gradients)] = int64_t(2 * kMiB);
  at2[size_t(MemoryTag::optimizer_state)] = int64_t(3 * kMiB / 2);
  CHECK(s.tag_at_peak == at2);
  CHECK(sum(s.tag_at_peak) == s.peak_bytes);
  TagBytes peaks = at2;
  peaks[size_t(MemoryTag::activations)] = int64_t(3 * kMiB + 100);  // its own peak came earlier
  CHECK(s.tag_peak == peaks);
  CHECK(s.reserved_bytes == int64_t(6 * kMiB));
  CHECK(s.peak_reserved_bytes == int64_t(6 * kMiB));
  // Free all but the parameters and give the cache back: peaks stay until reset_peak().
  for (void* x : {a2, w, g, o}) f.a.deallocate(x, 0);
  f.a.empty_cache();  // the small segment holds p; the large one goes
  s = f.a.stats();
  CHECK(s.reserved_bytes == int64_t(2 * kMiB));
  CHECK(s.peak_reserved_bytes == int64_t(6 * kMiB));
  CHECK(s.peak_bytes == peak2);
  f.a.reset_peak();
  s = f.a.stats();
  CHECK(s.peak_bytes == 1000);
  CHECK(s.peak_reserved_bytes == int64_t(2 * kMiB));
  TagBytes params{};
  params[size_t(MemoryTag::parameters)] = 1000;
  CHECK(s.tag_bytes == params);
  CHECK(s.tag_peak == params);
  CHECK(s.tag_at_peak == params);
  // After the reset a smaller step sets the peaks again.
  void* x = under(MemoryTag::activations, 512);
  f.a.deallocate(x, 0);
  s = f.a.stats();
  CHECK(s.peak_bytes == 1512);
  CHECK(s.tag_at_peak[size_t(MemoryTag::activations)] == 512);
  CHECK(s.tag_peak[size_t(MemoryTag::activations)] == 512);
  CHECK(memory_log_line(Device::cuda(0), s) ==
        "memory cuda:0: peak 1.5 KiB allocated, 2.0 MiB reserved; at peak: activations 512 B, parameters 1000 B, "
        "gradients 0 B, optimizer state 0 B, workspace 0 B, other 0 B");
  f.a.deallocate(p, 0);
}

// Note [Graph pools] in engine/caching_allocator.h.
TEST_CASE("graph pool: a capture's blocks come from its pool and are reused within it, not outside") {
  Fixture f;
  void* general = f.a.allocate(1000);
  f.a.deallocate(general, 1000);  // cached in the general pool of stream 1
  const auto pool = f.a.create_graph_pool();
  f.a.begin_capture(f.current, pool);
  void* x = f.a.allocate(1000);  // not the cached general block: a segment of the pool
  CHECK(x != general);
  CHECK(f.dev.allocs == 2);
  void* big = f.a.allocate(3 * kMiB);
  f.a.deallocate(x, 1000);
  void* y = f.a.allocate(700);  // a later allocation of the same capture reuses it
  CHECK(y == x);
  f.a.deallocate(big, 3 * kMiB);
  void* big2 = f.a.allocate(3 * kMiB);
  CHECK(big2 == big);
  CHECK(f.dev.allocs == 3);
  // Another stream during the capture: the general cache.
  void* other = f.a.allocate(1000, fake_stream(2));
  int in_pool = 0;
  for (const auto& b : f.a.snapshot())
    if (b.graph_pool == pool) in_pool += b.allocated;
  CHECK(in_pool == 2);
  f.a.end_capture(f.current);
  f.a.deallocate(y, 700);
  f.a.deallocate(big2, 3 * kMiB);
  f.a.deallocate(other, 1000);
  // After the capture, while the pool lives, its free blocks are never handed out elsewhere.
  void* after = f.a.allocate(1000);
  CHECK(after == general);
  void* after2 = f.a.allocate(1000);
  CHECK(after2 != x);
  void* big3 = f.a.allocate(3 * kMiB);
  CHECK(big3 != big);
  for (const auto& b : f.a.snapshot())
    if (b.ptr == after2 || b.ptr == big3) CHECK(b.graph_pool == 0);
  f.a.deallocate(after, 1000);
  f.a.deallocate(after2, 1000);
  f.a.deallocate(big3, 3 * kMiB);
  // The graph is destroyed: its segments join the general cache and are reused there.
  const int allocs = f.dev.allocs;
  f.a.release_graph_pool(pool);
  for (const auto& b : f.a.snapshot()) CHECK(b.graph_pool == 0);
  std::set<void*> smalls;  // two small segments (the general one, the pool's) hold four
  for (int i = 0; i < 4; ++i) smalls.insert(f.a.allocate(900 * kKiB));
  void* l1 = f.a.allocate(3 * kMiB);
  void* l2 = f.a.allocate(3 * kMiB);
  CHECK(smalls.count(x) == 1);
  CHECK((l1 == big || l2 == big));
  CHECK(f.dev.allocs == allocs);
  for (void* p : smalls) f.a.deallocate(p, 900 * kKiB);
  for (void* p : {l1, l2}) f.a.deallocate(p, 3 * kMiB);
  f.a.empty_cache();
  CHECK(f.dev.live.empty());
}

TEST_CASE("graph pool: a block still in use when the graph goes is freed to the general cache") {
  Fixture f;
  const auto pool = f.a.create_graph_pool();
  f.a.begin_capture(f.current, pool);
  void* kept = f.a.allocate(1000);  // a graph output the caller keeps past the graph
  f.a.end_capture(f.current);
  f.a.release_graph_pool(pool);
  f.a.deallocate(kept, 1000);
  CHECK(f.a.allocate(1000) == kept);
}

TEST_CASE("graph pool: during a capture no event is queried or recorded; cross-stream frees wait for its end") {
  Fixture f;
  void* cross = f.a.allocate(1000);
  f.a.record_stream(cross, fake_stream(2));
  void* pending = f.a.allocate(1000);
  f.a.record_stream(pending, fake_stream(2));
  f.a.deallocate(pending, 1000);  // an event before the capture
  CHECK(f.dev.event_stream.size() == 1);
  const auto pool = f.a.create_graph_pool();
  f.a.begin_capture(f.current, pool);
  const int queries = f.dev.queries;
  f.a.deallocate(cross, 1000);  // used on stream 2: no event recorded now
  CHECK(f.dev.event_stream.size() == 1);
  void* in = f.a.allocate(1000);
  f.a.record_stream(in, fake_stream(2));
  f.a.deallocate(in, 1000);  // a pool block used on stream 2: not reused in this capture
  void* in2 = f.a.allocate(1000);
  CHECK(in2 != in);
  f.a.empty_cache();  // refused quietly: it would wait for events and free memory
  CHECK(f.dev.queries == queries);
  CHECK(f.dev.waits == 0);
  CHECK(f.dev.frees == 0);
  f.a.end_capture(f.current);
  CHECK(f.dev.event_stream.size() == 3);  // the deferred frees' events, recorded at the end
  f.a.deallocate(in2, 1000);
  f.a.release_graph_pool(pool);
  f.a.empty_cache();
  CHECK(f.dev.live.empty());
}

TEST_CASE("graph pool: out of memory during a capture fails at once, without emptying the cache") {
  Fixture f;
  f.dev.capacity = 8 * kMiB;
  void* cached = f.a.allocate(4 * kMiB);
  f.a.deallocate(cached, 4 * kMiB);
  const auto pool = f.a.create_graph_pool();
  f.a.begin_capture(f.current, pool);
  CHECK_THROWS_AS(f.a.allocate(6 * kMiB), OutOfMemory);
  CHECK(f.dev.frees == 0);
  f.a.end_capture(f.current);
  f.a.release_graph_pool(pool);
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
  CHECK_THROWS_WITH_AS(Tensor::empty({int64_t(1) << 50}, DType::u8, d), doctest::Contains("a smaller batch"), Error);
  CHECK(a->stats().current_bytes == s0.current_bytes);
}

TEST_CASE("CudaGraph: the capture runs nothing, each replay runs it on the inputs' contents of the time") {
  if (!have_gpu("CudaGraph")) return;
  const Device d = Device::cuda(0);
  auto* a = dynamic_cast<CachingAllocator*>(&allocator_for(d));
  REQUIRE(a);
  Stream s = Stream::create(d);
  StreamGuard g(s);
  Tensor x = Tensor::full({1000}, 1.0, DType::f32, d);  // the static input
  Tensor y;
  {
    CudaGraph graph;
    graph.capture(s, [&] { y = add(mul(x, 2.0), 1.0); });  // mul's result is freed in the capture
    CHECK(graph.captured());
    bool from_pool = false;
    for (const auto& b : a->snapshot())
      if (b.ptr == y.raw_data()) from_pool = b.graph_pool != 0;
    CHECK(from_pool);
    graph.replay(s);
    CHECK(y.to_vector<float>()[7] == 3.0f);
    x.copy_(Tensor::full({1000}, 5.0, DType::f32, Device::cpu()));
    graph.replay(s);
    CHECK(y.to_vector<float>()[999] == 11.0f);
    Stream other = Stream::create(d);
    CHECK_THROWS_WITH_AS(graph.replay(other), doctest::Contains("capture's stream"), Error);
  }
  // The graph is gone: its pool's blocks are the general cache's, y's among them.
  for (const auto& b : a->snapshot()) CHECK(b.graph_pool == 0);
  CHECK(y.to_vector<float>()[0] == 11.0f);
  // A host wait on the captured stream is refused: the capture fails, naming CUDA's error, and
  // the stream works again.
  CudaGraph bad;
  CHECK_THROWS_WITH_AS(bad.capture(s, [&] { (void)y.to_vector<float>(); }),
                       doctest::Contains("cudaErrorStreamCapture"), Error);
  CHECK(!bad.captured());
  CHECK(add(x, 1.0).to_vector<float>()[3] == 6.0f);
}

}  // namespace
}  // namespace rt
