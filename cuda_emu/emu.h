// The emulated CUDA device as the library fakes (cuBLAS, cuDNN, NCCL, CUPTI) and the tests
// see it: work queued on streams with the device memory it uses, faults, and the launch
// log. Part of --config=cuda-emu only (docs/cuda-on-cpu.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rt::emu {

// A range of device memory that queued work reads and/or writes.
struct MemUse {
  enum Access { read, write, read_write };
  const void* ptr;
  size_t bytes;
  Access access;
};

// Queues `fn` on `stream` (nullptr: the current device's default stream) as one operation
// named `name`, as a library call queues its kernels. When it runs, each use is checked
// first (device memory of the stream's device, inside an allocation, reads initialised,
// ordered after the last access from another stream) and its writes are marked written
// after. Returns the launch error (the device's sticky error, an invalid stream).
cudaError_t enqueue(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                    std::function<void()> fn);
// The kernel lab's view of a library call (Note [Kernel lab] in perf.cc): its FLOPs and the
// fewest bytes it must move (each operand read once, each output written once; workspace
// not counted), from the call's shape, and the math mode whose peak bounds it ("bf16",
// "f16", "tf32", "f32", "f64-tensor"). `api` is the library function ("cublasGemmEx").
struct LibraryCost {
  std::string api, shape, math;
  double flops = 0, min_bytes = 0;
};
cudaError_t enqueue(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                    std::function<void()> fn, LibraryCost cost);
// The same for work with host-side state per execution (an NCCL operation's ticket and
// sequence numbers, a nondeterministic engine's order): `issue` is called on the host when
// the work is queued and returns the work to run. Work captured into a CUDA graph keeps
// `issue`, and each launch of the graph calls it anew (Note [Stream capture] in
// cuda_emu/capture.cc); plain `fn` work is run again as it is, so it must not move out of
// its captures.
cudaError_t enqueue_issued(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                           std::function<std::function<void()>()> issue);
cudaError_t enqueue_issued(cudaStream_t stream, const std::string& name, std::vector<MemUse> uses,
                           std::function<std::function<void()>()> issue, LibraryCost cost);

// ---- the kernel lab (docs/kernel-lab.md) --------------------------------------------------
// With RINGTAPE_EMU_PERF=FILE the emulator counts, per kernel instantiation and launch
// configuration, what Nsight Compute would report of its memory behaviour, and writes FILE
// at exit. By default every launch of the process is recorded; the first call of
// perf_window starts a window: from then on only work queued while it is open (between
// perf_window(true) and perf_window(false)) is recorded. The profiler opens it around its
// --profile-steps (profile/session.cc).
void perf_window(bool open);
// Writes the records now (they are written at exit too); false when the lab is off.
bool perf_write();
// Inside queued work: ends it with a fault, reported like a kernel's (Note [Sticky faults]
// in internal.h). `what` names the problem.
[[noreturn]] void fail(cudaError_t code, const std::string& what);
// Inside queued work: it ended without producing its outputs (an aborted collective), so
// its write uses are not marked written: their old bytes stay what they were, initialised
// or not.
void discard_writes();

// The device a stream belongs to (nullptr: the calling thread's current device).
int stream_device(cudaStream_t stream);
// An id unique to the stream in this process (the legacy stream of device d included).
uint32_t stream_id(cudaStream_t stream);
// Device memory: the device it belongs to, or -1.
int device_of(const void* p);
// Host memory from cudaHostAlloc.
bool is_pinned_host(const void* p, size_t bytes);
// The first never-written byte in [p, p + bytes) of device memory, or -1 (for fakes that
// want to say which input was not initialised).
int64_t first_uninitialised(const void* p, size_t bytes);

// ---- the device's math library (Note [Device numerics] in device_math.cc) ------------------
// exact: kernels get the host's libm results; ulp: a value within the CUDA Programming
// Guide's maximum error for the function (RINGTAPE_EMU_MATH=exact|ulp sets it at start).
enum class DeviceMath { exact, ulp };
DeviceMath device_math();
void set_device_math(DeviceMath m);

// What reproduces this process's emulated runs: "RINGTAPE_EMU_SCHEDULE=shuffle
// RINGTAPE_EMU_SEED=1 RINGTAPE_EMU_MATH=exact" (thread order and device numerics), for
// fault reports and the GPU tests' mismatch messages.
std::string emulation_settings();

// ---- for tests ---------------------------------------------------------------------------
// The report of the most recent fault ("" when none), and clearing every device's sticky
// error so that a test can go on after a planted bug (a real context would be lost).
std::string last_fault();
void clear_faults();
// Plants a deleted line in real code: of the process's next calls of cudaStreamWaitEvent,
// `skip` are made as usual, then `count` are accepted but do nothing (a test says which wait
// of the code under test that is). The cross-stream check must then report the hazard.
void drop_stream_waits(int skip, int count);

// ---- the launch log (CUPTI) ---------------------------------------------------------------
struct Activity {
  enum class Kind { kernel, memcpy, memset, library } kind;
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;  // now_ns() clock
  int device = 0;
  uint32_t stream = 0;                // stream_id()
  uint64_t correlation_id = 0;
  std::vector<uint64_t> external_ids; // pushed on the launching thread, innermost last
  dim3 grid, block;
  size_t shared_bytes = 0;
  size_t bytes = 0;
  int copy_kind = 0;                  // cudaMemcpyKind
};
// Called on the stream's worker after each operation completes (null: no log).
void set_activity_sink(std::function<void(const Activity&)> sink);
uint64_t now_ns();
// The launching thread's external correlation ids (cuptiActivityPush/PopExternalCorrelationId).
void push_external_id(uint64_t id);
bool pop_external_id(uint64_t* id);

}  // namespace rt::emu
