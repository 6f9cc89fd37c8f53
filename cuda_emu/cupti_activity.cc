// CUPTI's activity API on the emulated device: the kinds to record, the client's buffers
// (requested and handed back through its callbacks), flushing, walking a buffer, and the
// timestamp clock. Records come from the emulator's launch log (rt::emu::set_activity_sink,
// installed while any kind is enabled), written as cuda_emu/cupti_records.cc makes them.
// Same names and signatures as cupti_activity.h, whose declarations give them C linkage.
//
// Note [CUPTI buffers in the fake]
// Each completed operation's records go into the current client buffer on the stream worker
// that ran it. A buffer that cannot take the next record (or holds the client's
// maxNumRecords) is handed back through the completion callback on that worker, outside the
// lock, and a new one requested under the lock (so the request callback must not call
// CUPTI, nor the completion callback cuptiActivityFlushAll, which waits for it).
// cuptiActivityFlushAll hands back the current buffer and waits for hand-backs in progress
// on workers, so that on return every record written before the call has reached the
// client. Records are complete when written (the operation has finished), so forced and
// default flushes are the same.
#include <cupti.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda_emu/cupti_records.h"
#include "cuda_emu/emu.h"

namespace rt::emu::cupti {
namespace {

struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0, used = 0, records = 0, max_records = 0;
};

struct State {
  std::mutex mu;
  std::condition_variable idle;  // in_flight reached 0
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  Wanted wanted;
  Buffer current;
  size_t dropped = 0;
  int in_flight = 0;  // buffers taken out for hand-back, not yet handed back
};
State& state() {
  static auto* s = new State;  // leaked: stream workers may log until the process ends
  return *s;
}

// Under s.mu: asks the client for a buffer for a record of `need` bytes. One it gives that
// cannot take it (too small, misaligned) goes into `back`, to be handed back empty; false
// then (and a note on stderr, once).
bool request_buffer(State& s, size_t need, std::vector<Buffer>* back) {
  Buffer b;
  if (s.request) s.request(&b.data, &b.size, &b.max_records);
  const bool aligned = reinterpret_cast<uintptr_t>(b.data) % ACTIVITY_RECORD_ALIGNMENT == 0;
  if (b.data && b.size >= need && aligned) {
    s.current = b;
    return true;
  }
  if (b.data) {
    back->push_back(b);
    ++s.in_flight;
  }
  static bool told = false;
  if (!told) {
    told = true;
    std::fprintf(stderr,
                 "cuda-emu: CUPTI: the buffer request callback gave %s: activity records are dropped (give buffers "
                 "of at least %zu bytes aligned to %d; cuptiActivityGetNumDroppedRecords counts them)\n",
                 !s.request ? "nothing (no callbacks registered)"
                 : !b.data  ? "no buffer"
                 : !aligned ? "a misaligned buffer"
                            : "a buffer too small for one record",
                 need, ACTIVITY_RECORD_ALIGNMENT);
  }
  return false;
}

// Hands a buffer taken out under the lock back to the client, outside it.
void hand_back(Buffer b) {
  State& s = state();
  CUpti_BuffersCallbackCompleteFunc complete;
  {
    std::lock_guard<std::mutex> g(s.mu);
    complete = s.complete;
  }
  if (complete) complete(nullptr, 0, b.data, b.size, b.used);
  std::lock_guard<std::mutex> g(s.mu);
  if (--s.in_flight == 0) s.idle.notify_all();
}

// The launch log's sink: Note [CUPTI buffers in the fake].
void on_activity(const Activity& a) {
  State& s = state();
  std::vector<Buffer> full;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.wanted.any()) return;
    for (const Record& r : records_for(a, s.wanted)) {
      Buffer& b = s.current;
      const bool fits = b.data && b.used + r.size() <= b.size && (b.max_records == 0 || b.records < b.max_records);
      if (!fits) {
        if (b.data) {  // full, or too small even empty: back to the client as it is
          full.push_back(b);
          ++s.in_flight;
          s.current = Buffer{};
        }
        if (!request_buffer(s, r.size(), &full)) {
          ++s.dropped;
          continue;
        }
      }
      std::memcpy(s.current.data + s.current.used, r.data(), r.size());
      s.current.used += r.size();
      ++s.current.records;
    }
  }
  for (Buffer& b : full) hand_back(b);
}

// The kinds the fake writes; a pointer to its flag in `w`, or null.
bool* flag(Wanted& w, CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL: return &w.kernel;
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return &w.concurrent_kernel;
    case CUPTI_ACTIVITY_KIND_MEMCPY: return &w.memcpy;
    case CUPTI_ACTIVITY_KIND_MEMSET: return &w.memset;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return &w.external_correlation;
    default: return nullptr;
  }
}

bool valid_kind(CUpti_ActivityKind kind) {
  return int(kind) > int(CUPTI_ACTIVITY_KIND_INVALID) && int(kind) < int(CUPTI_ACTIVITY_KIND_COUNT);
}

// Under s.mu: the launch log feeds the fake while any kind is enabled, and costs nothing
// (no Activity is built) otherwise.
void update_sink(State& s) {
  if (s.wanted.any()) set_activity_sink(on_activity);
  else set_activity_sink(nullptr);
}

}  // namespace
}  // namespace rt::emu::cupti

using namespace rt::emu::cupti;

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = rt::emu::now_ns();  // the records' clock (Activity::start_ns/end_ns)
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  if (!request || !complete) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.request = request;
  s.complete = complete;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  bool* f = flag(s.wanted, kind);
  if (!f) {
    std::fprintf(stderr,
                 "cuda-emu: CUPTI: activity kind %d is not emulated (cuda_emu/cupti_activity.cc records KERNEL, "
                 "CONCURRENT_KERNEL, MEMCPY, MEMSET and EXTERNAL_CORRELATION)\n",
                 int(kind));
    return CUPTI_ERROR_NOT_COMPATIBLE;
  }
  *f = true;
  update_sink(s);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (!valid_kind(kind)) return CUPTI_ERROR_INVALID_KIND;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  if (bool* f = flag(s.wanted, kind)) *f = false;  // a kind never enabled is disabled already
  update_sink(s);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityFlushAll(uint32_t) {
  State& s = state();
  Buffer b;
  {
    std::lock_guard<std::mutex> g(s.mu);
    if (!s.request) return CUPTI_ERROR_INVALID_OPERATION;  // cuptiActivityRegisterCallbacks first
    if (s.current.used > 0) {
      b = s.current;
      s.current = Buffer{};
      ++s.in_flight;
    }
  }
  if (b.data) hand_back(b);
  std::unique_lock<std::mutex> lk(s.mu);
  s.idle.wait(lk, [&] { return s.in_flight == 0; });
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  *dropped = s.dropped;
  s.dropped = 0;
  return CUPTI_SUCCESS;
}

// Walks records as the fake lays them out: back to back from the buffer's start, each as
// long as record_size() of its kind.
CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  const uint8_t* end = buffer + valid;
  const uint8_t* at = buffer;
  if (*record) {
    const auto* prev = reinterpret_cast<const uint8_t*>(*record);
    if (prev < buffer || prev >= end) return CUPTI_ERROR_INVALID_PARAMETER;
    const size_t prev_size = record_size((*record)->kind);
    if (prev_size == 0) return CUPTI_ERROR_INVALID_KIND;
    at = prev + prev_size;
  }
  if (at >= end) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  if (size_t(end - at) < sizeof(CUpti_ActivityKind)) return CUPTI_ERROR_INVALID_KIND;
  CUpti_ActivityKind kind;
  std::memcpy(&kind, at, sizeof kind);
  const size_t size = record_size(kind);
  if (size == 0 || size > size_t(end - at)) return CUPTI_ERROR_INVALID_KIND;  // not a record, or cut off
  *record = reinterpret_cast<CUpti_Activity*>(const_cast<uint8_t*>(at));
  return CUPTI_SUCCESS;
}
