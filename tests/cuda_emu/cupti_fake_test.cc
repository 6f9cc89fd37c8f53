// The CUPTI fake of --config=cuda-emu (cuda_emu/cupti_*.cc), as profile/cupti_tracer.cc
// uses it: copies, a memset, a kernel and a library operation recorded with their kinds,
// names, stream ids and timestamps on cuptiGetTimestamp's clock; external correlation ids
// per kind; disabled kinds recording nothing; buffers of the client's size and record
// count handed back, none lost; cuptiActivityGetNextRecord's walk and its errors; and the
// profiler's own tracer on top. Outside --config=cuda-emu it says SKIPPED.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu/emu.h"
#include "engine/profiler.h"
#include "profile/cupti_tracer.h"
#include "tests/cuda_emu/planted.h"

namespace {

// CUPTI's records are packed structs, whose fields doctest cannot bind by reference: V
// checks a copy.
#define V(field) decltype(field)(field)

// One record as the client copied it out of a buffer.
struct Rec {
  CUpti_ActivityKind kind{};
  CUpti_ActivityKernel10 kernel{};
  CUpti_ActivityMemcpy6 memcpy{};
  CUpti_ActivityMemset4 memset{};
  CUpti_ActivityExternalCorrelation external{};
  std::string name;  // kernels
  uint32_t correlation = 0;
  uint64_t start = 0, end = 0;
  uint32_t stream = 0;
  uint32_t device = 0;
};

// The client: buffers of `buffer_bytes` (at most `max_records` records, 0: any number), and
// everything the completion callback saw. Callbacks run on the emulator's stream workers.
struct Client {
  std::mutex mu;
  size_t buffer_bytes = 64 << 10;
  size_t max_records = 0;
  std::vector<Rec> recs;
  int buffers = 0;                 // handed back
  std::vector<size_t> per_buffer;  // records in each
  int bad_walks = 0;               // walks that ended in anything but MAX_LIMIT_REACHED
  void reset(size_t bytes, size_t max) {
    std::lock_guard<std::mutex> g(mu);
    buffer_bytes = bytes, max_records = max;
    recs.clear(), per_buffer.clear();
    buffers = 0, bad_walks = 0;
  }
};
Client g_client;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  std::lock_guard<std::mutex> g(g_client.mu);
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, g_client.buffer_bytes));
  *size = g_client.buffer_bytes;
  *max_records = g_client.max_records;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<Rec> got;
  CUpti_Activity* r = nullptr;
  CUptiResult st;
  while ((st = cuptiActivityGetNextRecord(buffer, valid, &r)) == CUPTI_SUCCESS) {
    Rec x;
    x.kind = r->kind;
    switch (r->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        std::memcpy(&x.kernel, r, sizeof x.kernel);
        x.name = x.kernel.name ? x.kernel.name : "(null)";
        x.correlation = x.kernel.correlationId, x.start = x.kernel.start, x.end = x.kernel.end;
        x.stream = x.kernel.streamId, x.device = x.kernel.deviceId;
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        std::memcpy(&x.memcpy, r, sizeof x.memcpy);
        x.correlation = x.memcpy.correlationId, x.start = x.memcpy.start, x.end = x.memcpy.end;
        x.stream = x.memcpy.streamId, x.device = x.memcpy.deviceId;
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        std::memcpy(&x.memset, r, sizeof x.memset);
        x.correlation = x.memset.correlationId, x.start = x.memset.start, x.end = x.memset.end;
        x.stream = x.memset.streamId, x.device = x.memset.deviceId;
        break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        std::memcpy(&x.external, r, sizeof x.external);
        x.correlation = x.external.correlationId;
        break;
      default: break;
    }
    got.push_back(x);
  }
  std::free(buffer);
  std::lock_guard<std::mutex> g(g_client.mu);
  if (st != CUPTI_ERROR_MAX_LIMIT_REACHED) ++g_client.bad_walks;
  ++g_client.buffers;
  g_client.per_buffer.push_back(got.size());
  g_client.recs.insert(g_client.recs.end(), got.begin(), got.end());
}

const CUpti_ActivityKind kAllKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

// Flushes and returns what the client has, after every queued operation completed.
std::vector<Rec> collect() {
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cuptiActivityFlushAll(0) == CUPTI_SUCCESS);
  std::lock_guard<std::mutex> g(g_client.mu);
  CHECK(g_client.bad_walks == 0);
  return g_client.recs;
}

struct DevFloats {
  float* p = nullptr;
  explicit DevFloats(size_t n) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess); }
  ~DevFloats() { cudaFree(p); }
};

// A memset, a memcpy and a kernel, each with external id 7 of kind CUSTOM2 on the thread.
void three_operations(float* x, float* y, size_t n, std::vector<float>& host) {
  REQUIRE(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, 7) == CUPTI_SUCCESS);
  REQUIRE(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  rt::emu_test::scale(x, int64_t(n), y, 128, nullptr);
  uint64_t popped = 0;
  REQUIRE(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2, &popped) == CUPTI_SUCCESS);
  CHECK(popped == 7);
}

}  // namespace

TEST_CASE("before callbacks: flushing is an invalid operation; argument and kind errors") {
  CHECK(cuptiActivityFlushAll(0) == CUPTI_ERROR_INVALID_OPERATION);
  CHECK(cuptiActivityRegisterCallbacks(nullptr, completed) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cuptiActivityEnable(CUpti_ActivityKind(100000)) == CUPTI_ERROR_INVALID_KIND);
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) == CUPTI_ERROR_NOT_COMPATIBLE);  // not emulated
  CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1) ==
        CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, uint64_t(1) << 62) ==
        CUPTI_ERROR_INVALID_PARAMETER);
  uint64_t id = 0;
  CHECK(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id) == CUPTI_ERROR_QUEUE_EMPTY);
  CHECK(cuptiGetTimestamp(nullptr) == CUPTI_ERROR_INVALID_PARAMETER);
  const char* s = nullptr;
  REQUIRE(cuptiGetResultString(CUPTI_ERROR_MAX_LIMIT_REACHED, &s) == CUPTI_SUCCESS);
  CHECK(std::string(s) == "CUPTI_ERROR_MAX_LIMIT_REACHED");
  REQUIRE(cuptiGetResultString(CUPTI_SUCCESS, &s) == CUPTI_SUCCESS);
  CHECK(std::string(s) == "CUPTI_SUCCESS");
  CHECK(cuptiGetResultString(CUptiResult(123456), &s) == CUPTI_ERROR_INVALID_PARAMETER);
  // cuptiGetTimestamp is the records' clock (the emulator's now_ns).
  const uint64_t a = rt::emu::now_ns();
  uint64_t t = 0;
  REQUIRE(cuptiGetTimestamp(&t) == CUPTI_SUCCESS);
  const uint64_t b = rt::emu::now_ns();
  CHECK(a <= t);
  CHECK(t <= b);
}

TEST_CASE("copies, a memset, a kernel and a library operation: kinds, names, streams, times, external ids") {
  g_client.reset(64 << 10, 0);
  REQUIRE(cuptiActivityRegisterCallbacks(requested, completed) == CUPTI_SUCCESS);
  for (CUpti_ActivityKind k : kAllKinds) REQUIRE(cuptiActivityEnable(k) == CUPTI_SUCCESS);
  const size_t n = 4096, bytes = n * sizeof(float);
  DevFloats x(n), y(n);
  std::vector<float> host(n, 1.5f);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  uint64_t t0 = 0, t1 = 0, id = 0;
  REQUIRE(cuptiGetTimestamp(&t0) == CUPTI_SUCCESS);

  const auto C0 = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, C1 = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
  REQUIRE(cuptiActivityPushExternalCorrelationId(C0, 42) == CUPTI_SUCCESS);
  REQUIRE(cudaMemcpy(x.p, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);  // 1
  REQUIRE(cudaMemset(y.p, 0, bytes) == cudaSuccess);                                    // 2
  REQUIRE(cuptiActivityPushExternalCorrelationId(C0, 43) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityPushExternalCorrelationId(C1, 99) == CUPTI_SUCCESS);
  rt::emu_test::scale(x.p, int64_t(n), y.p, 256, s);  // 3: CUSTOM0 43 (innermost), CUSTOM1 99
  // CUSTOM0's 43 lies under CUSTOM1's 99: popping CUSTOM0 takes 43 and leaves 99.
  REQUIRE(cuptiActivityPopExternalCorrelationId(C0, &id) == CUPTI_SUCCESS);
  CHECK(id == 43);
  REQUIRE(rt::emu::enqueue(s, "fakeLibraryGemm f32", {}, [] {}) == cudaSuccess);  // 4: CUSTOM0 42, CUSTOM1 99
  REQUIRE(cuptiActivityPopExternalCorrelationId(C1, &id) == CUPTI_SUCCESS);
  CHECK(id == 99);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaMemcpy(host.data(), y.p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);  // 5
  REQUIRE(cuptiActivityPopExternalCorrelationId(C0, &id) == CUPTI_SUCCESS);
  CHECK(id == 42);
  CHECK(cuptiActivityPopExternalCorrelationId(C0, &id) == CUPTI_ERROR_QUEUE_EMPTY);
  REQUIRE(cudaMemcpy(x.p, y.p, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);  // 6: no external id
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  uint32_t legacy1 = 0;
  {
    DevFloats z(16);
    REQUIRE(cudaMemset(z.p, 0, 16 * sizeof(float)) == cudaSuccess);  // 7: on cuda:1
    legacy1 = rt::emu::stream_id(nullptr);
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(host[0] == 3.0f);  // the kernel ran: y = 2 x

  std::vector<Rec> recs = collect();
  REQUIRE(cuptiGetTimestamp(&t1) == CUPTI_SUCCESS);
  std::vector<Rec> ops;
  std::map<uint32_t, std::map<int, uint64_t>> external;  // correlation -> kind -> id
  for (const Rec& r : recs) {
    if (r.kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
      CHECK_MESSAGE(external[r.correlation].count(int(r.external.externalKind)) == 0, "two records of one kind");
      external[r.correlation][int(r.external.externalKind)] = r.external.externalId;
    } else {
      ops.push_back(r);
    }
  }
  std::sort(ops.begin(), ops.end(), [](const Rec& a, const Rec& b) { return a.correlation < b.correlation; });
  REQUIRE(ops.size() == 7);  // in launch order by correlation id
  const uint32_t legacy = rt::emu::stream_id(nullptr), mine = rt::emu::stream_id(s);
  CHECK(legacy != mine);

  CHECK(ops[0].kind == CUPTI_ACTIVITY_KIND_MEMCPY);
  CHECK(V(ops[0].memcpy.copyKind) == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
  CHECK(V(ops[0].memcpy.bytes) == bytes);
  CHECK(V(ops[0].memcpy.dstKind) == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CHECK(ops[0].stream == legacy);
  CHECK(ops[1].kind == CUPTI_ACTIVITY_KIND_MEMSET);
  CHECK(V(ops[1].memset.bytes) == bytes);
  CHECK(ops[1].stream == legacy);
  CHECK(ops[2].kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  CHECK(ops[2].name == "scale_kernel");
  CHECK(V(ops[2].kernel.gridX) == 4);
  CHECK(V(ops[2].kernel.blockX) == 256);
  CHECK(V(ops[2].kernel.gridY) == 1);
  CHECK(ops[2].stream == mine);
  CHECK(ops[3].kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);  // a library call, as its kernels would be
  CHECK(ops[3].name == "fakeLibraryGemm f32");
  CHECK(ops[3].stream == mine);
  CHECK(ops[4].kind == CUPTI_ACTIVITY_KIND_MEMCPY);
  CHECK(V(ops[4].memcpy.copyKind) == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
  CHECK(V(ops[4].memcpy.srcKind) == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CHECK(ops[4].stream == legacy);
  CHECK(ops[5].kind == CUPTI_ACTIVITY_KIND_MEMCPY);
  CHECK(V(ops[5].memcpy.copyKind) == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD);
  CHECK(ops[6].kind == CUPTI_ACTIVITY_KIND_MEMSET);
  CHECK(ops[6].device == 1);
  CHECK(ops[6].stream == legacy1);
  CHECK(legacy1 != legacy);

  // Times: inside [t0, t1] of cuptiGetTimestamp, each start <= end, and on each stream one
  // operation after another in launch order.
  std::map<uint32_t, uint64_t> last_end;
  for (const Rec& r : ops) {
    if (r.correlation != ops[6].correlation) CHECK(r.device == 0);
    CHECK(t0 <= r.start);
    CHECK(r.start <= r.end);
    CHECK(r.end <= t1);
    CHECK(r.start >= last_end[r.stream]);
    last_end[r.stream] = r.end;
  }
  CHECK(ops[2].start >= ops[1].end);  // the blocking stream waited for the legacy stream's memset

  using Ids = std::map<int, uint64_t>;
  CHECK(external[ops[0].correlation] == Ids{{C0, 42}});
  CHECK(external[ops[1].correlation] == Ids{{C0, 42}});
  CHECK(external[ops[2].correlation] == Ids{{C0, 43}, {C1, 99}});
  CHECK(external[ops[3].correlation] == Ids{{C0, 42}, {C1, 99}});
  CHECK(external[ops[4].correlation] == Ids{{C0, 42}});
  CHECK(external.count(ops[5].correlation) == 0);
  CHECK(external.count(ops[6].correlation) == 0);
  size_t n_external = 0;
  for (const auto& [corr, ids] : external) n_external += ids.size();
  CHECK(n_external == 7);  // none for operations outside the test
  cudaStreamDestroy(s);
  for (CUpti_ActivityKind k : kAllKinds) CHECK(cuptiActivityDisable(k) == CUPTI_SUCCESS);
}

TEST_CASE("disabled kinds record nothing") {
  g_client.reset(64 << 10, 0);
  REQUIRE(cuptiActivityRegisterCallbacks(requested, completed) == CUPTI_SUCCESS);
  const size_t n = 1024;
  DevFloats x(n), y(n);
  std::vector<float> host(n, 1.0f);

  REQUIRE(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  three_operations(x.p, y.p, n, host);
  std::vector<Rec> recs = collect();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].kind == CUPTI_ACTIVITY_KIND_MEMCPY);

  g_client.reset(64 << 10, 0);
  REQUIRE(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  three_operations(x.p, y.p, n, host);
  recs = collect();
  REQUIRE(recs.size() == 4);  // the kernel, and one external record per operation
  int kernels = 0, externals = 0;
  for (const Rec& r : recs) {
    kernels += r.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    externals += r.kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION &&
                 r.external.externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 && r.external.externalId == 7;
  }
  CHECK(kernels == 1);
  CHECK(externals == 3);

  // KERNEL instead of CONCURRENT_KERNEL: kernels come as KERNEL records.
  g_client.reset(64 << 10, 0);
  REQUIRE(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL) == CUPTI_SUCCESS);
  three_operations(x.p, y.p, n, host);
  recs = collect();
  REQUIRE(recs.size() == 1);
  CHECK(recs[0].kind == CUPTI_ACTIVITY_KIND_KERNEL);
  CHECK(recs[0].name == "scale_kernel");

  g_client.reset(64 << 10, 0);
  REQUIRE(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_KERNEL) == CUPTI_SUCCESS);
  three_operations(x.p, y.p, n, host);
  CHECK(collect().empty());
  CHECK(g_client.buffers == 0);
}

TEST_CASE("buffers: the client's size and record limit, none lost; a buffer too small drops records, counted") {
  REQUIRE(cuptiActivityRegisterCallbacks(requested, completed) == CUPTI_SUCCESS);
  REQUIRE(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS);
  DevFloats x(64);
  const size_t memset_size = sizeof(CUpti_ActivityMemset4);
  struct Setup {
    size_t bytes, max;
    size_t per_buffer;  // records that fit in each
  };
  for (const Setup& st : {Setup{3 * memset_size + 8, 0, 3}, Setup{64 << 10, 2, 2}, Setup{64 << 10, 1, 1}}) {
    g_client.reset(st.bytes, st.max);
    for (int i = 0; i < 20; ++i) REQUIRE(cudaMemsetAsync(x.p, i, 64 * sizeof(float), nullptr) == cudaSuccess);
    const std::vector<Rec> recs = collect();
    CHECK(recs.size() == 20);
    std::lock_guard<std::mutex> g(g_client.mu);
    CHECK(g_client.buffers == int((20 + st.per_buffer - 1) / st.per_buffer));
    for (size_t i = 0; i + 1 < g_client.per_buffer.size(); ++i) CHECK(g_client.per_buffer[i] == st.per_buffer);
  }
  // Buffers smaller than one record: every record dropped and counted; the unusable
  // buffers still come back (empty), so the client can free them.
  size_t dropped = 0;
  REQUIRE(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS);  // resets the count
  g_client.reset(16, 0);
  for (int i = 0; i < 5; ++i) REQUIRE(cudaMemsetAsync(x.p, i, 64 * sizeof(float), nullptr) == cudaSuccess);
  CHECK(collect().empty());
  REQUIRE(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS);
  CHECK(dropped == 5);
  {
    std::lock_guard<std::mutex> g(g_client.mu);
    CHECK(g_client.buffers == 5);
    for (size_t k : g_client.per_buffer) CHECK(k == 0);
  }
  REQUIRE(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS);
}

TEST_CASE("cuptiActivityGetNextRecord walks a buffer and stops at its end or at a record that is not one") {
  alignas(8) uint8_t buf[512] = {};
  CUpti_ActivityMemset4 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.bytes = 7;
  std::memcpy(buf, &m, sizeof m);
  m.bytes = 8;
  std::memcpy(buf + sizeof m, &m, sizeof m);
  CUpti_Activity* r = nullptr;
  CHECK(cuptiActivityGetNextRecord(nullptr, 10, &r) == CUPTI_ERROR_INVALID_PARAMETER);
  CHECK(cuptiActivityGetNextRecord(buf, 0, &r) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  REQUIRE(cuptiActivityGetNextRecord(buf, 2 * sizeof m, &r) == CUPTI_SUCCESS);
  CHECK(V(reinterpret_cast<CUpti_ActivityMemset4*>(r)->bytes) == 7);
  REQUIRE(cuptiActivityGetNextRecord(buf, 2 * sizeof m, &r) == CUPTI_SUCCESS);
  CHECK(V(reinterpret_cast<CUpti_ActivityMemset4*>(r)->bytes) == 8);
  CHECK(cuptiActivityGetNextRecord(buf, 2 * sizeof m, &r) == CUPTI_ERROR_MAX_LIMIT_REACHED);
  r = nullptr;
  CHECK(cuptiActivityGetNextRecord(buf, sizeof m - 8, &r) == CUPTI_ERROR_INVALID_KIND);  // cut off
  const CUpti_ActivityKind nonsense = CUpti_ActivityKind(0x5555);
  std::memcpy(buf + sizeof m, &nonsense, sizeof nonsense);
  r = nullptr;
  REQUIRE(cuptiActivityGetNextRecord(buf, 2 * sizeof m, &r) == CUPTI_SUCCESS);
  CHECK(cuptiActivityGetNextRecord(buf, 2 * sizeof m, &r) == CUPTI_ERROR_INVALID_KIND);
}

// Last: the tracer registers its own callbacks for the rest of the process.
TEST_CASE("the profiler's CuptiTracer (profile/cupti_tracer.cc) reads the fake's records and external ids") {
  const size_t n = 256, bytes = n * sizeof(float);
  DevFloats x(n), y(n);
  std::vector<float> host(n, 2.0f);
  std::vector<rt::prof::Event> events;
  const int64_t before = rt::prof::now_ns();
  {
    rt::prof::CuptiTracer tracer;
    tracer.op_begin(11);
    REQUIRE(cudaMemcpy(x.p, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    rt::emu_test::scale(x.p, int64_t(n), y.p, 64, nullptr);
    tracer.op_end(11);
    REQUIRE(cudaMemset(y.p, 0, bytes) == cudaSuccess);  // outside any op
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    events = tracer.finish();
  }
  const int64_t after = rt::prof::now_ns();
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.begin_ns < b.begin_ns; });
  REQUIRE(events.size() == 3);
  CHECK(events[0].kind == rt::prof::EventKind::memcpy);
  CHECK(events[0].name == "memcpy HtoD");
  CHECK(events[0].cost.bytes == double(bytes));
  CHECK(events[0].id == 11);
  CHECK(events[1].kind == rt::prof::EventKind::kernel);
  CHECK(events[1].name == "scale_kernel");
  CHECK(events[1].id == 11);
  CHECK(events[2].kind == rt::prof::EventKind::memset);
  CHECK(events[2].id == 0);
  // On the profiler's clock (Note [CUPTI timestamps]): within the test's window, give or
  // take the offset measured at the tracer's start (both clocks are steady_clock here).
  constexpr int64_t kSlackNs = 100000;
  for (const auto& e : events) {
    CHECK(e.begin_ns >= before - kSlackNs);
    CHECK(e.begin_ns <= e.end_ns);
    CHECK(e.end_ns <= after + kSlackNs);
    CHECK(e.stream == rt::emu::stream_id(nullptr));
  }
}

#else

TEST_CASE("CUPTI fake") { std::printf("SKIPPED: the CUPTI fake runs under --config=cuda-emu\n"); }

#endif
