// Memory tags (engine/memory_tag.h) on the host allocator, and the memory reports
// (engine/memory_report.h). The caching device allocator's tags are tested over a fake
// device in caching_allocator_test.cc.
#include <cstring>
#include <numeric>
#include <string>
#include <thread>

#include "engine/memory_report.h"
#include "tests/test_util.h"

namespace rt {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

int64_t tag(const AllocatorStats& s, MemoryTag t) { return s.tag_bytes[size_t(t)]; }
int64_t sum(const TagBytes& b) { return std::accumulate(b.begin(), b.end(), int64_t(0)); }

TEST_CASE("memory tag names and scopes: nested, restored, per thread") {
  CHECK(std::string(memory_tag_name(MemoryTag::other)) == "other");
  CHECK(std::string(memory_tag_name(MemoryTag::optimizer_state)) == "optimizer_state");
  CHECK(std::string(memory_tag_name(MemoryTag::workspace)) == "workspace");
  CHECK(std::string(memory_tag_name(MemoryTag(200))) == "invalid");
  CHECK(current_memory_tag() == MemoryTag::other);
  {
    MemoryTagScope a(MemoryTag::activations);
    CHECK(current_memory_tag() == MemoryTag::activations);
    {
      MemoryTagScope w(MemoryTag::workspace);
      CHECK(current_memory_tag() == MemoryTag::workspace);
      MemoryTag there = MemoryTag::parameters;
      std::thread([&] { there = current_memory_tag(); }).join();
      CHECK(there == MemoryTag::other);
    }
    CHECK(current_memory_tag() == MemoryTag::activations);
  }
  CHECK(current_memory_tag() == MemoryTag::other);
}

// Both kinds of host block: small ones straight from the C library (tag kept in the block,
// Note [Tag of a small host block]) and cached ones of 1 MiB and more (tag in its record).
TEST_CASE("host allocations land in the thread's tag; frees leave the allocation's tag") {
  Allocator& a = allocator_for(Device::cpu());
  a.empty_cache();  // so that the big block below is a fresh one, and found again
  const AllocatorStats base = a.stats();
  void* p;
  void* big;
  void* w;
  void* exact;
  {
    MemoryTagScope sp(MemoryTag::parameters);
    p = a.allocate(100);
    {
      MemoryTagScope sa(MemoryTag::activations);
      big = a.allocate(2 * kMiB);
      {
        MemoryTagScope sw(MemoryTag::workspace);
        w = a.allocate(3 * kKiB);
      }
      exact = a.allocate(128);  // a multiple of 64: the tag byte needs a cache line more
    }
  }
  AllocatorStats s = a.stats();
  CHECK(tag(s, MemoryTag::parameters) == tag(base, MemoryTag::parameters) + 100);
  CHECK(tag(s, MemoryTag::activations) == tag(base, MemoryTag::activations) + 2 * kMiB + 128);
  CHECK(tag(s, MemoryTag::workspace) == tag(base, MemoryTag::workspace) + 3 * kKiB);
  CHECK(tag(s, MemoryTag::other) == tag(base, MemoryTag::other));
  CHECK(sum(s.tag_bytes) == s.current_bytes);
  // The kernels write every requested byte: the tag byte lies past them.
  std::memset(exact, 0xff, 128);
  std::memset(p, 0xff, 100);
  // Freed on another thread under another tag: subtracted from the allocation's tag.
  std::thread([&] {
    MemoryTagScope g(MemoryTag::gradients);
    a.deallocate(big, 2 * kMiB);
    a.deallocate(exact, 128);
  }).join();
  {
    MemoryTagScope o(MemoryTag::optimizer_state);
    a.deallocate(p, 100);
    a.deallocate(w, 3 * kKiB);
  }
  s = a.stats();
  CHECK(s.tag_bytes == base.tag_bytes);
  CHECK(s.current_bytes == base.current_bytes);
  CHECK(s.reserved_bytes == base.reserved_bytes + int64_t(2 * kMiB));  // the big block stays cached
  // Reused from the cache under another tag: charged to the new one.
  MemoryTagScope g(MemoryTag::gradients);
  void* again = a.allocate(2 * kMiB);
  CHECK(again == big);
  CHECK(tag(a.stats(), MemoryTag::gradients) == tag(base, MemoryTag::gradients) + 2 * kMiB);
  CHECK(tag(a.stats(), MemoryTag::activations) == tag(base, MemoryTag::activations));
  a.deallocate(again, 2 * kMiB);
}

TEST_CASE("host peaks: total, per tag and the breakdown at the peak, on a hand-computed sequence") {
  Allocator& a = allocator_for(Device::cpu());
  a.empty_cache();
  a.reset_peak();
  const AllocatorStats base = a.stats();
  CHECK(base.peak_bytes == base.current_bytes);
  CHECK(base.tag_at_peak == base.tag_bytes);
  CHECK(base.tag_peak == base.tag_bytes);
  CHECK(base.peak_reserved_bytes == base.reserved_bytes);
  auto under = [&](MemoryTag t, size_t bytes) {
    MemoryTagScope s(t);
    return a.allocate(bytes);
  };
  auto at = [&](MemoryTag t) { return size_t(t); };
  void* p = under(MemoryTag::parameters, 100);
  void* x = under(MemoryTag::activations, 2 * kMiB);
  void* x2 = under(MemoryTag::activations, 300);
  // Peak 1: 2 MiB + 400 above the base.
  TagBytes at1 = base.tag_bytes;
  at1[at(MemoryTag::parameters)] += 100;
  at1[at(MemoryTag::activations)] += 2 * kMiB + 300;
  CHECK(a.stats().tag_at_peak == at1);
  a.deallocate(x, 2 * kMiB);
  void* g = under(MemoryTag::gradients, kMiB + 1000);  // 1 MiB + 1400 above the base: no new peak
  AllocatorStats s = a.stats();
  CHECK(s.peak_bytes == base.current_bytes + 2 * kMiB + 400);
  CHECK(s.tag_at_peak == at1);
  CHECK(s.tag_peak[at(MemoryTag::gradients)] == base.tag_bytes[at(MemoryTag::gradients)] + kMiB + 1000);
  void* w = under(MemoryTag::workspace, kMiB);  // 2 MiB + 1400 above the base: peak 2
  s = a.stats();
  CHECK(s.peak_bytes == base.current_bytes + 2 * kMiB + 1400);
  TagBytes at2 = base.tag_bytes;
  at2[at(MemoryTag::parameters)] += 100;
  at2[at(MemoryTag::activations)] += 300;
  at2[at(MemoryTag::gradients)] += kMiB + 1000;
  at2[at(MemoryTag::workspace)] += kMiB;
  CHECK(s.tag_at_peak == at2);
  CHECK(sum(s.tag_at_peak) == s.peak_bytes);
  CHECK(s.tag_peak[at(MemoryTag::activations)] == base.tag_bytes[at(MemoryTag::activations)] + 2 * kMiB + 300);
  CHECK(s.peak_reserved_bytes >= s.reserved_bytes);
  CHECK(s.peak_reserved_bytes >= base.reserved_bytes + 4 * kMiB);  // x's cached block, g and w
  for (auto [ptr, n] : {std::pair<void*, size_t>{p, 100}, {x2, 300}, {g, kMiB + 1000}, {w, kMiB}})
    a.deallocate(ptr, n);
  a.empty_cache();
  s = a.stats();
  CHECK(s.peak_bytes == base.current_bytes + 2 * kMiB + 1400);  // until reset_peak
  a.reset_peak();
  s = a.stats();
  CHECK(s.peak_bytes == base.current_bytes);
  CHECK(s.tag_at_peak == base.tag_bytes);
  CHECK(s.tag_peak == base.tag_bytes);
  CHECK(s.peak_reserved_bytes == s.reserved_bytes);
}

TEST_CASE("a host allocation the machine cannot satisfy says what holds memory and which flags reduce it") {
  Allocator& a = allocator_for(Device::cpu());
  a.empty_cache();  // what is reserved now is what is reserved when it fails
  MemoryTagScope sa(MemoryTag::activations);
  void* held = a.allocate(2 * kMiB);
  const AllocatorStats before = a.stats();
  try {
    a.allocate(size_t(1) << 50);  // beyond x86-64's 2^47-byte user address space
    FAIL("expected rt::OutOfMemory");
  } catch (const OutOfMemory& e) {
    const std::string m = e.without_hint();
    const std::string what = e.what();
    INFO(what);
    CHECK(m.find("out of host memory: tried to allocate 1125899906842624 bytes (1.0 PiB); ") == 0);
    CHECK(m.find("the machine has ") != std::string::npos);  // /proc/meminfo: this runs on Linux
    CHECK(m.find("; tensors hold " + format_bytes(before.current_bytes) + " (activations " +
                 format_bytes(tag(before, MemoryTag::activations))) != std::string::npos);
    // The cache was emptied before giving up; held is in use, not cached.
    CHECK(m.find("; the largest free block in the allocator's cache is 0 B (of " +
                 format_bytes(before.reserved_bytes) + " reserved)") != std::string::npos);
    CHECK(m.size() >= 9);
    CHECK(m.substr(m.size() - 9) == "reserved)");  // data/loading/batch.cc appends to it
    for (const char* flag :
         {"a smaller batch", "K steps of gradient accumulation", "bf16 precision", "channels_last memory format"})
      CHECK(what.find(flag) != std::string::npos);
  }
  CHECK(a.stats().tag_bytes == before.tag_bytes);
  a.deallocate(held, 2 * kMiB);
}

TEST_CASE("byte counts read in binary units") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.0 KiB");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(kMiB - 1) == "1.0 MiB");  // not "1024.0 KiB"
  CHECK(format_bytes(97 * kMiB + kMiB / 2) == "97.5 MiB");
  CHECK(format_bytes(int64_t(31.2 * double(1 << 30))) == "31.2 GiB");
  CHECK(format_bytes(-2048) == "-2.0 KiB");
  CHECK(format_bytes(INT64_MAX) == "8.0 EiB");
}

// The numbers of a ResNet50 run: what the lead's log line and metrics.jsonl will show.
AllocatorStats example_stats() {
  const int64_t GiB = 1 << 30;
  AllocatorStats s;
  s.peak_bytes = int64_t(31.2 * double(GiB));
  s.peak_reserved_bytes = 33 * GiB;
  s.tag_at_peak[size_t(MemoryTag::activations)] = int64_t(24.1 * double(GiB));
  s.tag_at_peak[size_t(MemoryTag::parameters)] = 97 * kMiB + kMiB / 2;
  s.tag_at_peak[size_t(MemoryTag::gradients)] = 97 * kMiB + kMiB / 2;
  s.tag_at_peak[size_t(MemoryTag::optimizer_state)] = 97 * kMiB + kMiB / 2;
  s.tag_at_peak[size_t(MemoryTag::workspace)] = int64_t(1.2 * double(GiB));
  s.tag_peak = s.tag_at_peak;
  s.tag_peak[size_t(MemoryTag::workspace)] = 2 * GiB;
  s.tag_peak[size_t(MemoryTag::other)] = 512;
  return s;
}

TEST_CASE("the memory log line names the peaks and what filled memory at the peak") {
  CHECK(memory_log_line(Device::cuda(0), example_stats()) ==
        "memory cuda:0: peak 31.2 GiB allocated, 33.0 GiB reserved; at peak: activations 24.1 GiB, parameters 97.5 "
        "MiB, gradients 97.5 MiB, optimizer state 97.5 MiB, workspace 1.2 GiB, other 0 B");
}

TEST_CASE("the memory JSON object for metrics.jsonl") {
  const AllocatorStats s = example_stats();
  const json::Value v = memory_json(Device::cuda(1), s);
  const std::string tags = "\"parameters\":102236160,\"gradients\":102236160,\"optimizer_state\":102236160,";
  CHECK(json::dump(v) == "{\"device\":\"cuda:1\",\"peak_allocated_bytes\":" + std::to_string(s.peak_bytes) +
                             ",\"peak_reserved_bytes\":35433480192,\"at_peak\":{\"activations\":" +
                             std::to_string(s.tag_at_peak[size_t(MemoryTag::activations)]) + "," + tags +
                             "\"workspace\":" + std::to_string(s.tag_at_peak[size_t(MemoryTag::workspace)]) +
                             ",\"other\":0},\"tag_peak\":{\"activations\":" +
                             std::to_string(s.tag_peak[size_t(MemoryTag::activations)]) + "," + tags +
                             "\"workspace\":2147483648,\"other\":512}}");
  CHECK(json::parse(json::dump(v)) == v);
}

}  // namespace
}  // namespace rt
