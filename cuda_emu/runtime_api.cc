// The CUDA runtime functions ringtape calls, on the emulated device: the same names and
// signatures as cuda_runtime_api.h (whose declarations give them C linkage), linked instead
// of libcudart under --config=cuda-emu. A function the engine starts to use and this file
// lacks is a link error, never a silent stub.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_emu/graph.h"
#include "cuda_emu/stream.h"

using namespace rt::emu;

namespace {

constexpr size_t kSmemPerBlockOptin = 232448;  // what an H200 reports

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
// The codes the emulation returns, with CUDA's own names and texts.
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress", "misaligned address"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction", "an illegal instruction was encountered"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorPeerAccessUnsupported, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation cannot be performed in the present state"},
    // Stream capture (Note [Stream capture] in cuda_emu/capture.cc).
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
};

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

bool is_fault(cudaError_t e) {
  return e == cudaErrorIllegalAddress || e == cudaErrorMisalignedAddress || e == cudaErrorIllegalInstruction ||
         e == cudaErrorLaunchFailure || e == cudaErrorLaunchOutOfResources;
}

// The calling thread's device, checked; its sticky error first.
cudaError_t current_ok() {
  const int d = current_device();
  if (const cudaError_t e = check_device(d)) return e;
  return sticky_error(d);
}

cudaError_t ret(cudaError_t e) {
  set_last_error(e);
  return e;
}

enum class Where { host, pinned, device };
Where where(const void* p, size_t n) {
  if (device_of(p) >= 0) return Where::device;
  return is_pinned(p, n) ? Where::pinned : Where::host;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return ret(cudaErrorInvalidValue);
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(s->device)) return e;
  const Where ws = where(src, n), wd = where(dst, n);
  const bool src_dev = ws == Where::device, dst_dev = wd == Where::device;
  cudaMemcpyKind k = kind;
  if (k == cudaMemcpyDefault)
    k = src_dev ? (dst_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                : (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  const bool ok = (k == cudaMemcpyHostToDevice && !src_dev && dst_dev) || (k == cudaMemcpyDeviceToHost && src_dev && !dst_dev) ||
                  (k == cudaMemcpyDeviceToDevice && src_dev && dst_dev) || (k == cudaMemcpyHostToHost && !src_dev && !dst_dev);
  if (!ok) {
    std::fprintf(stderr, "cuda-emu: cudaMemcpy kind %d does not match its pointers (source %s, destination %s)\n", int(kind),
                 src_dev ? "device" : "host", dst_dev ? "device" : "host");
    return ret(cudaErrorInvalidValue);
  }
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::copy;
  static const char* names[] = {"memcpy HtoH", "memcpy HtoD", "memcpy DtoH", "memcpy DtoD"};
  op->name = names[int(k) & 3];
  op->bytes = n;
  op->copy_kind = int(k);
  if (src_dev) op->uses.push_back({src, n, MemUse::read});
  if (dst_dev) op->uses.push_back({dst, n, MemUse::write});
  op->fn = [dst, src, n] { std::memmove(dst, src, n); };
  // Pageable host memory: the call returns once the copy is done (the host buffer may be
  // reused at once; a device-to-host result is readable), as CUDA's staging does. So it
  // cannot be captured, and is a synchronous call (Note [Capture modes] in cuda_emu/capture.cc).
  const bool pageable = (!src_dev && ws == Where::host) || (!dst_dev && wd == Where::host);
  if (sync || pageable) {
    if (const cudaError_t e = check_host_wait(s)) return ret(e);
    return ret(submit_and_wait(s, std::move(op), sync || k == cudaMemcpyDeviceToHost));
  }
  return ret(submit(s, std::move(op)));
}

cudaError_t set(void* dst, int value, size_t n, cudaStream_t stream, bool sync) {
  if (n == 0) return cudaSuccess;
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (device_of(dst) < 0) return ret(cudaErrorInvalidValue);
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::memset;
  op->name = "memset";
  op->bytes = n;
  op->uses.push_back({dst, n, MemUse::write});
  op->fn = [dst, value, n] { std::memset(dst, value, n); };
  if (!sync) return ret(submit(s, std::move(op)));
  if (const cudaError_t e = check_host_wait(s)) return ret(e);  // Note [Capture modes] in cuda_emu/capture.cc
  return ret(submit_and_wait(s, std::move(op), true));
}

}  // namespace

// ---- devices ---------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return ret(cudaErrorInvalidValue);
  *count = heap().ndev;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t e = check_device(device)) return ret(e);
  current_device() = device;
  note_context();  // since CUDA 12 cudaSetDevice initialises the device's primary context
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return ret(cudaErrorInvalidValue);
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device)) return ret(e);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "ringtape cuda-emu (an H200's limits, emulated on the CPU)");
  p->totalGlobalMem = heap().limit;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = kSmemPerBlockOptin;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 6144;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->canMapHostMemory = 1;
  p->streamPrioritiesSupported = 1;
  p->pciBusID = heap().physical[device] + 1;  // the machine's: distinct per GPU, as NCCL's duplicate check needs
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  std::memset(&p->uuid, 0, sizeof p->uuid);
  p->uuid.bytes[0] = char(heap().physical[device] + 1);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device)) return ret(e);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, device);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrPciBusId: *value = p.pciBusID; break;
    case cudaDevAttrPciDeviceId: *value = p.pciDeviceID; break;
    case cudaDevAttrPciDomainId: *value = p.pciDomainID; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrClockRate: *value = 1980000; break;        // kHz (an H200's boost clock)
    case cudaDevAttrMemoryClockRate: *value = 2619000; break;  // kHz
    default:
      std::fprintf(stderr, "cuda-emu: cudaDeviceGetAttribute(%d) is not emulated\n", int(attr));
      return ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (!id || len <= 0) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device)) return ret(e);
  std::snprintf(id, size_t(len), "0000:%02x:00.0", heap().physical[device] + 1);  // the machine's, as on a GPU
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return ret(cudaErrorInvalidValue);
  if (check_device(device) || check_device(peer)) return ret(cudaErrorInvalidDevice);
  *can = 0;  // copies between devices work (staged); kernels touch only their own device
  return cudaSuccess;
}

cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attr, int device, int peer) {
  if (!value) return ret(cudaErrorInvalidValue);
  if (check_device(device) || check_device(peer) || device == peer) return ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevP2PAttrAccessSupported:
    case cudaDevP2PAttrNativeAtomicSupported:
    case cudaDevP2PAttrCudaArrayAccessSupported:
    case cudaDevP2PAttrPerformanceRank:
      *value = 0;  // as cudaDeviceCanAccessPeer: kernels touch only their own device's memory
      return cudaSuccess;
    default:
      return ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaDeviceSynchronize() {
  note_context();
  if (const cudaError_t e = check_device(current_device())) return ret(e);
  if (const cudaError_t e = check_device_wait(current_device())) return ret(e);
  return synchronize_device(current_device());
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;  // the emulation plays both parts
  return cudaSuccess;
}

// ---- errors ----------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  const cudaError_t sticky = sticky_error(current_device());
  const cudaError_t e = take_last_error();
  return sticky != cudaSuccess ? sticky : e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = sticky_error(current_device());
  return sticky != cudaSuccess ? sticky : peek_last_error();
}

const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = find_error(e);
  const char* text = t ? t->text : "unknown error";
  if (!is_fault(e)) return text;
  // A fault's string carries the emulator's report, so an rt::Error built from it says
  // what went wrong and where (the full report is on stderr).
  thread_local std::string s;
  const std::string r = last_fault();
  s = std::string(text) + (r.empty() ? "" : " [" + r + "]");
  return s.c_str();
}

// ---- memory ----------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t bytes) {
  note_context();
  if (!p) return ret(cudaErrorInvalidValue);
  *p = nullptr;
  if (const cudaError_t e = current_ok()) return ret(e);
  if (const cudaError_t e = check_unsafe_call()) return ret(e);  // Note [Capture modes] in cuda_emu/capture.cc
  if (bytes == 0) return cudaSuccess;
  *p = device_alloc(current_device(), bytes);
  return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* p) {
  note_context();
  if (!p) return cudaSuccess;
  const int d = device_of(p);
  if (d < 0) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = check_unsafe_call()) return ret(e);
  synchronize_device(d);  // as CUDA: freeing waits for the device's work
  return ret(device_free(p));
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  note_context();
  if (!free_bytes || !total) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = current_ok()) return ret(e);
  *total = heap().limit;
  *free_bytes = heap().limit - device_used(current_device());
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  note_context();
  if (!p) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = check_unsafe_call()) return ret(e);
  *p = pinned_alloc(bytes);
  return *p ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaFreeHost(void* p) {
  note_context();
  if (const cudaError_t e = check_unsafe_call()) return ret(e);
  return ret(pinned_free(p));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return copy(dst, src, n, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, n, kind, stream, false);
}

cudaError_t cudaMemset(void* dst, int value, size_t n) { return set(dst, value, n, nullptr, true); }

cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  return set(dst, value, n, stream, false);
}

// ---- streams ---------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  note_context();
  if (!s) return ret(cudaErrorInvalidValue);
  if (const cudaError_t e = current_ok()) return ret(e);
  // As CUDA: a priority outside the range cudaDeviceGetStreamPriorityRange gives is clamped to it.
  *s = create_stream(current_device(), (flags & cudaStreamNonBlocking) == 0, std::clamp(priority, -5, 0));
  return *s ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  CUstream_st* s = resolve(stream);
  if (!s || !priority) return ret(!s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue);
  *priority = s->priority;
  return cudaSuccess;
}

// As CUDA: an id unique among the process's streams, never reused after a stream is destroyed
// (a handle may be; the uid is the stream's index in stream.cc's table, which only grows).
cudaError_t cudaStreamGetId(cudaStream_t stream, unsigned long long* id) {
  CUstream_st* s = resolve(stream);
  if (!s || !id) return ret(!s ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue);
  *id = s->uid;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s != nullptr && s != cudaStreamLegacy && s != cudaStreamPerThread)
    if (CUstream_st* live = resolve(s))
      if (const cudaError_t e = check_stream_destroy(live)) return ret(e);
  return ret(destroy_stream(s));
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_host_wait(s)) return ret(e);
  return synchronize_stream(s);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(s->device)) return e;
  if (const cudaError_t e = check_host_wait(s)) return ret(e);
  return stream_done(s) ? cudaSuccess : cudaErrorNotReady;
}

namespace {
std::atomic<int> g_waits_to_skip{0}, g_waits_to_drop{0};  // drop_stream_waits
}  // namespace

void rt::emu::drop_stream_waits(int skip, int count) {
  g_waits_to_skip = skip;
  g_waits_to_drop = count;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  CUstream_st* s = resolve(stream);
  if (!s || !is_live_event(event)) return ret(cudaErrorInvalidResourceHandle);
  if (g_waits_to_drop.load() > 0) {  // a planted bug (drop_stream_waits)
    if (g_waits_to_skip.load() > 0) --g_waits_to_skip;
    else if (g_waits_to_drop.fetch_sub(1) > 0) return cudaSuccess;
  }
  return ret(wait_event(s, event));
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

// ---- events ----------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  note_context();
  if (!e) return ret(cudaErrorInvalidValue);
  if (const cudaError_t err = current_ok()) return ret(err);
  *e = create_event(current_device(), flags);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) { return ret(destroy_event(e)); }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s || !is_live_event(e)) return ret(cudaErrorInvalidResourceHandle);
  return ret(record_event(e, s));
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  note_context();
  if (!is_live_event(e)) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t err = check_event_wait(e)) return ret(err);
  return synchronize_event(e);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  note_context();
  if (!is_live_event(e)) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t err = sticky_error(e->device)) return err;
  if (const cudaError_t err = check_event_wait(e)) return ret(err);
  return event_done(e) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  note_context();
  if (!ms) return ret(cudaErrorInvalidValue);
  if (!is_live_event(start) || !is_live_event(end)) return ret(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = check_event_use(start)) return ret(e);
  if (const cudaError_t e = check_event_use(end)) return ret(e);
  if (!event_done(start) || !event_done(end)) return ret(cudaErrorNotReady);
  const uint64_t a = start->time_ns.load(), b = end->time_ns.load();
  if (!a || !b) return ret(cudaErrorInvalidResourceHandle);  // never recorded
  *ms = float(double(int64_t(b - a)) / 1e6);
  return cudaSuccess;
}
