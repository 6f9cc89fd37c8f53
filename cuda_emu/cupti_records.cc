// CUPTI's records for one completed operation of the emulated device, in the struct
// versions this toolkit's CUPTI writes and profile/cupti_tracer.cc reads:
// CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4 and
// CUpti_ActivityExternalCorrelation.
//
// Note [Library operations as kernels]
// On a GPU, cuBLAS, cuDNN and NCCL calls run the libraries' own kernels, which CUPTI
// reports as kernel records. The fakes queue each call as one library operation
// (rt::emu::enqueue), so the fake reports one kernel record per operation, named as the
// fake named it (e.g. "cublasGemmEx f32 nn"), grid and block 1.
//
// What the launch log does not carry is written as CUPTI writes unknown values: host-side
// memory kinds of copies (pageable or pinned) as CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN, no
// async flag, a memset's value as 0, registers and static shared memory as 0, queued and
// submitted times as CUPTI_TIMESTAMP_UNKNOWN.
#include "cuda_emu/cupti_records.h"

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "cuda_emu/cupti_external.h"

namespace rt::emu::cupti {
namespace {

// Kernel records point at their names, which CUPTI keeps for the life of the process.
const char* intern(const std::string& name) {
  static std::mutex mu;
  static auto* names = new std::unordered_set<std::string>;  // leaked: records outlive everything
  std::lock_guard<std::mutex> g(mu);
  return names->insert(name).first->c_str();
}

template <typename T>
Record bytes_of(const T& r) {
  static_assert(sizeof(T) % ACTIVITY_RECORD_ALIGNMENT == 0, "CUPTI records are whole alignment units");
  Record out(sizeof(T));
  std::memcpy(out.data(), &r, sizeof(T));
  return out;
}

// The device's context id: CUPTI numbers contexts from 1, the emulator has one per device.
uint32_t context_id(int device) { return uint32_t(device) + 1; }

Record kernel_record(const Activity& a, CUpti_ActivityKind kind) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = kind;
  k.start = a.start_ns;
  k.end = a.end_ns;
  k.completed = a.end_ns;
  k.deviceId = uint32_t(a.device);
  k.contextId = context_id(a.device);
  k.streamId = a.stream;
  k.gridX = int32_t(a.grid.x), k.gridY = int32_t(a.grid.y), k.gridZ = int32_t(a.grid.z);
  k.blockX = int32_t(a.block.x), k.blockY = int32_t(a.block.y), k.blockZ = int32_t(a.block.z);
  k.dynamicSharedMemory = int32_t(a.shared_bytes);
  k.correlationId = uint32_t(a.correlation_id);
  k.gridId = int64_t(a.correlation_id);  // unique per launch, as CUPTI's
  k.name = intern(a.name);
  k.queued = CUPTI_TIMESTAMP_UNKNOWN;
  k.submitted = CUPTI_TIMESTAMP_UNKNOWN;
  k.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  k.shmemLimitConfig = CUPTI_FUNC_SHMEM_LIMIT_DEFAULT;
  return bytes_of(k);
}

uint8_t copy_kind(int cuda_kind) {
  switch (cuda_kind) {
    case cudaMemcpyHostToHost: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    case cudaMemcpyHostToDevice: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    case cudaMemcpyDeviceToHost: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    case cudaMemcpyDeviceToDevice: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    default: return CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN;
  }
}

Record memcpy_record(const Activity& a) {
  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = copy_kind(a.copy_kind);
  const bool src_dev = a.copy_kind == cudaMemcpyDeviceToHost || a.copy_kind == cudaMemcpyDeviceToDevice;
  const bool dst_dev = a.copy_kind == cudaMemcpyHostToDevice || a.copy_kind == cudaMemcpyDeviceToDevice;
  m.srcKind = src_dev ? CUPTI_ACTIVITY_MEMORY_KIND_DEVICE : CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
  m.dstKind = dst_dev ? CUPTI_ACTIVITY_MEMORY_KIND_DEVICE : CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
  m.flags = CUPTI_ACTIVITY_FLAG_NONE;
  m.bytes = a.bytes;
  m.start = a.start_ns;
  m.end = a.end_ns;
  m.deviceId = uint32_t(a.device);
  m.contextId = context_id(a.device);
  m.streamId = a.stream;
  m.correlationId = uint32_t(a.correlation_id);
  m.runtimeCorrelationId = uint32_t(a.correlation_id);
  m.copyCount = 1;
  return bytes_of(m);
}

Record memset_record(const Activity& a) {
  CUpti_ActivityMemset4 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.bytes = a.bytes;
  m.start = a.start_ns;
  m.end = a.end_ns;
  m.deviceId = uint32_t(a.device);
  m.contextId = context_id(a.device);
  m.streamId = a.stream;
  m.correlationId = uint32_t(a.correlation_id);
  m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  return bytes_of(m);
}

Record external_record(const ExternalId& x, uint64_t correlation) {
  CUpti_ActivityExternalCorrelation r;
  std::memset(&r, 0, sizeof r);
  r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  r.externalKind = x.kind;
  r.externalId = x.id;
  r.correlationId = uint32_t(correlation);
  return bytes_of(r);
}

}  // namespace

std::vector<Record> records_for(const Activity& a, const Wanted& w) {
  std::vector<Record> out;
  // As CUPTI precedes each API record made inside an external region with the region's ids.
  if (w.external_correlation)
    for (const ExternalId& x : innermost_per_kind(a.external_ids)) out.push_back(external_record(x, a.correlation_id));
  switch (a.kind) {
    case Activity::Kind::kernel:
    case Activity::Kind::library:  // Note [Library operations as kernels]
      // With KERNEL enabled CUPTI serialises kernels and reports them as KERNEL records.
      if (w.kernel) out.push_back(kernel_record(a, CUPTI_ACTIVITY_KIND_KERNEL));
      else if (w.concurrent_kernel) out.push_back(kernel_record(a, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      break;
    case Activity::Kind::memcpy:
      if (w.memcpy) out.push_back(memcpy_record(a));
      break;
    case Activity::Kind::memset:
      if (w.memset) out.push_back(memset_record(a));
      break;
  }
  return out;
}

size_t record_size(CUpti_ActivityKind k) {
  switch (k) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(CUpti_ActivityExternalCorrelation);
    default: return 0;
  }
}

}  // namespace rt::emu::cupti
