// Host-side CUDA runtime wrappers (see runtime.h). No kernels here.
#include <atomic>
#include <cstdio>

#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt::cuda {

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = detail::cat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return 0;
  }
  if (why) *why = n ? "" : "no CUDA device";
  return n;
}

DeviceProps device_props(int device) {
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceProps r;
  r.name = p.name;
  r.total_bytes = p.totalGlobalMem;
  r.sm_count = p.multiProcessorCount;
  r.cc_major = p.major;
  r.cc_minor = p.minor;
  return r;
}

std::string runtime_versions() {
  int rv = 0, dv = 0;
  cudaRuntimeGetVersion(&rv);
  cudaDriverGetVersion(&dv);
  return detail::cat("runtime ", rv / 1000, ".", (rv % 1000) / 10, ", driver ", dv / 1000, ".",
                     (dv % 1000) / 10);
}

void* try_malloc(int device, size_t bytes) {
  CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  CUDA_CHECK(e);
  return p;
}

void free(int device, void* ptr) noexcept {
  if (!ptr) return;
  CUDA_WARN(cudaSetDevice(device));
  CUDA_WARN(cudaFree(ptr));
}

void mem_get_info(int device, size_t* free_bytes, size_t* total_bytes) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, int device, void* stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  const cudaMemcpyKind k = kind == CopyKind::h2d   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::d2h ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
  auto s = static_cast<cudaStream_t>(stream);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, s));
  // Pageable host memory: the host buffer must stay valid until the copy is done, and a
  // d2h result must be readable on return.
  if (kind != CopyKind::d2d) CUDA_CHECK(cudaStreamSynchronize(s));
}

void memcpy_h2d_async(void* dst, const void* src, size_t bytes, int device, void* stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
}

void memcpy_d2h_async(void* dst, const void* src, size_t bytes, int device, void* stream) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)));
}

namespace {
std::atomic<int> g_home_device{0};
}  // namespace

void set_home_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  g_home_device.store(device);
}

void* host_alloc_pinned(size_t bytes) {
  // A thread that never chose a device is on device 0: the allocation would give this
  // process a context there.
  CUDA_CHECK(cudaSetDevice(g_home_device.load()));
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: the caller reports out-of-memory
    return nullptr;
  }
  CUDA_CHECK(e);
  return p;
}
void host_free_pinned(void* ptr) noexcept { CUDA_WARN(cudaFreeHost(ptr)); }

void* stream_create(int device, bool high_priority) {
  CUDA_CHECK(cudaSetDevice(device));
  int least = 0, greatest = 0;
  if (high_priority) CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least));
  return s;
}
int stream_priority(void* stream) {
  int p = 0;
  CUDA_CHECK(cudaStreamGetPriority(static_cast<cudaStream_t>(stream), &p));
  return p;
}
void stream_destroy(void* stream) noexcept { CUDA_WARN(cudaStreamDestroy(static_cast<cudaStream_t>(stream))); }
void stream_synchronize(int device, void* stream) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void* event_create(int device, bool timing) {
  CUDA_CHECK(cudaSetDevice(device));
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
void event_destroy(void* event) noexcept { CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(event))); }
void event_record(void* event, void* stream) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
}
void stream_wait_event(void* stream, void* event) {
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
}
void event_synchronize(void* event) { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
bool event_query(void* event) {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it so the next launch check starts clean
    return false;
  }
  CUDA_CHECK(e);
  return true;
}
float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

namespace {
cudaStreamCaptureMode to_cuda(CaptureMode m) {
  return m == CaptureMode::global          ? cudaStreamCaptureModeGlobal
         : m == CaptureMode::thread_local_ ? cudaStreamCaptureModeThreadLocal
                                           : cudaStreamCaptureModeRelaxed;
}
}  // namespace

void stream_begin_capture(void* stream, CaptureMode mode) {
  CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), to_cuda(mode)));
}
void* stream_end_capture(void* stream) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &g);
  // The capture is over either way: the next launch check must not see its error.
  if (e != cudaSuccess) (void)cudaGetLastError();
  CUDA_CHECK(e);
  return g;
}
bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &st));
  return st != cudaStreamCaptureStatusNone;
}
void* graph_instantiate(void* graph) {
  cudaGraphExec_t x = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&x, static_cast<cudaGraph_t>(graph), 0));
  return x;
}
void graph_launch(void* exec, void* stream) {
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}
void graph_destroy(void* graph) noexcept { CUDA_WARN(cudaGraphDestroy(static_cast<cudaGraph_t>(graph))); }
void graph_exec_destroy(void* exec) noexcept { CUDA_WARN(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec))); }
CaptureMode exchange_capture_mode(CaptureMode mode) {
  cudaStreamCaptureMode m = to_cuda(mode);
  CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&m));
  return m == cudaStreamCaptureModeGlobal       ? CaptureMode::global
         : m == cudaStreamCaptureModeThreadLocal ? CaptureMode::thread_local_
                                                 : CaptureMode::relaxed;
}

}  // namespace rt::cuda
