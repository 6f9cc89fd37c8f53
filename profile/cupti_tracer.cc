#include "profile/cupti_tracer.h"

#include <cupti.h>
#include <cxxabi.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "base/error.h"

// Every CUPTI call checked, naming the call, file:line and CUPTI's own message.
#define CUPTI_CHECK(call)                                                                    \
  do {                                                                                       \
    const CUptiResult rt_cupti_r_ = (call);                                                  \
    if (rt_cupti_r_ != CUPTI_SUCCESS) {                                                      \
      const char* rt_cupti_s_ = "unknown error";                                             \
      cuptiGetResultString(rt_cupti_r_, &rt_cupti_s_);                                       \
      RT_FAIL(#call, " failed at ", __FILE__, ":", __LINE__, ": ", rt_cupti_s_,              \
              " (profiling a GPU needs CUPTI from the CUDA toolkit and a driver that allows " \
              "it; nothing uses it unless a profile is recorded)");                           \
    }                                                                                        \
  } while (0)

namespace rt::prof {
namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

std::string demangle(const char* name) {
  if (!name) return "(unnamed kernel)";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

}  // namespace

struct CuptiTracer::Impl {
  std::mutex mu;
  std::vector<Event> records;                           // correlation id in `id` until finish()
  std::unordered_map<uint32_t, uint64_t> external_of;  // CUPTI correlation id -> op id
  int64_t offset_ns = 0;                                // Note [CUPTI timestamps]

  static Impl* active;  // CUPTI's buffer callbacks are plain functions

  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
  }

  static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    Impl* self = active;
    CUpti_Activity* rec = nullptr;
    while (self && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) self->take(rec);
    std::free(buffer);
  }

  void take(const CUpti_Activity* rec) {
    Event e;
    uint32_t correlation = 0;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        e.kind = EventKind::kernel;
        e.name = demangle(k->name);
        e.begin_ns = int64_t(k->start) + offset_ns;
        e.end_ns = int64_t(k->end) + offset_ns;
        e.tid = k->deviceId;
        e.stream = k->streamId;
        correlation = k->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        e.kind = EventKind::memcpy;
        e.name = copy_kind(m->copyKind);
        e.cost.bytes = double(m->bytes);
        e.begin_ns = int64_t(m->start) + offset_ns;
        e.end_ns = int64_t(m->end) + offset_ns;
        e.tid = m->deviceId;
        e.stream = m->streamId;
        correlation = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        e.kind = EventKind::memset;
        e.name = "memset";
        e.cost.bytes = double(m->bytes);
        e.begin_ns = int64_t(m->start) + offset_ns;
        e.end_ns = int64_t(m->end) + offset_ns;
        e.tid = m->deviceId;
        e.stream = m->streamId;
        correlation = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        std::lock_guard<std::mutex> g(mu);
        if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) external_of[x->correlationId] = x->externalId;
        return;
      }
      default: return;
    }
    e.id = correlation;
    std::lock_guard<std::mutex> g(mu);
    records.push_back(std::move(e));
  }
};

CuptiTracer::Impl* CuptiTracer::Impl::active = nullptr;

CuptiTracer::CuptiTracer() : impl_(std::make_unique<Impl>()) {
  RT_CHECK(Impl::active == nullptr, "CuptiTracer: one tracer at a time");
  uint64_t cupti_now = 0;
  CUPTI_CHECK(cuptiGetTimestamp(&cupti_now));
  impl_->offset_ns = now_ns() - int64_t(cupti_now);
  Impl::active = impl_.get();
  CUPTI_CHECK(cuptiActivityRegisterCallbacks(&Impl::requested, &Impl::completed));
  for (CUpti_ActivityKind k : kKinds) CUPTI_CHECK(cuptiActivityEnable(k));
}

CuptiTracer::~CuptiTracer() {
  // Never throws: results ignored, buffers flushed into a tracer that is going away.
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityFlushAll(1);
  Impl::active = nullptr;
}

// op_begin/op_end run inside the ops' noexcept scopes, once per op: their results are not
// checked (a failed push leaves that op's kernels unattributed, shown as "other").
void CuptiTracer::op_begin(uint64_t id) {
  cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
}

void CuptiTracer::op_end(uint64_t) {
  uint64_t popped = 0;
  cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &popped);
}

std::vector<Event> CuptiTracer::finish() {
  CUPTI_CHECK(cuptiActivityFlushAll(1));
  std::lock_guard<std::mutex> g(impl_->mu);
  std::vector<Event> out = std::move(impl_->records);
  impl_->records.clear();
  for (Event& e : out) {
    const auto it = impl_->external_of.find(uint32_t(e.id));
    e.id = it == impl_->external_of.end() ? 0 : it->second;
  }
  return out;
}

}  // namespace rt::prof
