// The CUDA runtime as the engine sees it: a plain C++ interface (no CUDA headers), so
// engine code compiles with the host compiler alone. Every call is checked; failures
// throw rt::Error naming file:line, the CUDA call and the driver's message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/dtype.h"

namespace rt::cuda {

// 0 when no device or no driver is present; never throws. `why` receives the reason.
int device_count(std::string* why = nullptr);

struct DeviceProps {
  std::string name;
  size_t total_bytes = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
};
DeviceProps device_props(int device);
std::string runtime_versions();  // "runtime 13.0, driver 13.0" (driver 0 when absent)

// nullptr when the device is out of memory (the error is cleared); other failures throw.
void* try_malloc(int device, size_t bytes);
void free(int device, void* ptr) noexcept;
void mem_get_info(int device, size_t* free_bytes, size_t* total_bytes);

// The process's own GPU: threads that touch CUDA without naming a device (the loader's
// workers allocating pinned buffers, the NCCL watchdog) make it their current device first,
// so a data-parallel rank holds a context on its GPU only (a context costs hundreds of MB of
// device memory, and exclusive-process compute mode refuses a second process). Also makes it
// the calling thread's current device. 0 until set.
void set_home_device(int device);

// Page-locked host memory (cudaHostAlloc, portable; on the home device's context): nullptr
// when out of memory; other failures throw.
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* ptr) noexcept;

enum class CopyKind { h2d, d2h, d2d };
// Asynchronous on `stream` (cudaStream_t or nullptr); d2h copies synchronise the stream
// before returning so the host can read the result.
void memcpy(void* dst, const void* src, size_t bytes, CopyKind kind, int device, void* stream);
// Host-to-device copy that returns at once. `src` must be pinned (host_alloc_pinned) and
// stay unchanged until `stream` has passed this point (record an event after it).
void memcpy_h2d_async(void* dst, const void* src, size_t bytes, int device, void* stream);
// Device-to-host copy that returns at once. `dst` must be pinned; read it once `stream` has
// passed this point (an event recorded after it has completed).
void memcpy_d2h_async(void* dst, const void* src, size_t bytes, int device, void* stream);

// A non-blocking stream; `high_priority`: the device's greatest priority (its kernels are
// scheduled before those of default-priority streams: communication that backward waits on).
void* stream_create(int device, bool high_priority = false);
int stream_priority(void* stream);  // cudaStreamGetPriority
void stream_destroy(void* stream) noexcept;
void stream_synchronize(int device, void* stream);

// `timing`: cudaEventElapsedTime works on it; without, the event is cheaper to record and
// query (cudaEventDisableTiming), what events that only order or signal should be.
void* event_create(int device, bool timing = true);
void event_destroy(void* event) noexcept;
void event_record(void* event, void* stream);
void stream_wait_event(void* stream, void* event);
void event_synchronize(void* event);
// Whether the work before the event has completed; never waits (cudaEventQuery:
// cudaErrorNotReady is false, other errors throw).
bool event_query(void* event);
float event_elapsed_ms(void* start, void* end);

// Stream capture and CUDA graphs (engine/cuda_graph.h says how the engine uses them).
// CUDA's capture modes (cudaStreamCaptureMode): which threads may not make potentially unsafe
// calls (cudaMalloc, host waits and queries) while a capture is active.
enum class CaptureMode { global, thread_local_, relaxed };
void stream_begin_capture(void* stream, CaptureMode mode);
// The captured graph (cudaGraph_t); throws when the capture failed (invalidated, unjoined).
void* stream_end_capture(void* stream);
bool stream_is_capturing(void* stream);  // an active (or invalidated) capture on `stream`
void* graph_instantiate(void* graph);    // cudaGraphExec_t
void graph_launch(void* exec, void* stream);
void graph_destroy(void* graph) noexcept;
void graph_exec_destroy(void* exec) noexcept;
// The calling thread's capture mode (cudaThreadExchangeStreamCaptureMode): sets `mode` and
// returns the previous one.
CaptureMode exchange_capture_mode(CaptureMode mode);

// dst[0:n] = value (converted to dtype) on `stream`.
void fill(void* dst, DType dtype, int64_t n, double value, int device, void* stream);

}  // namespace rt::cuda
