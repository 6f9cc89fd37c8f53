// Stream capture and CUDA graphs under --config=cuda-emu (Note [Stream capture] in
// cuda_emu/capture.cc, Note [Graph replay] in cuda_emu/graph.cc): captured work does not
// run, and its replays compute what the same work queued eagerly computes, with the inputs of
// each launch; forks and joins across streams; every call CUDA refuses during a capture
// returns CUDA's code and invalidates the capture; the checks apply at each launch (a race
// between two branches of a graph is a cross-stream hazard, a read of a buffer freed since
// the capture a read of unallocated memory); the kernel lab and the launch log count a graph's kernels and the
// graph launch; an NCCL collective in a graph is a collective of its own at each launch.
// Outside --config=cuda-emu (and under its sanitizer configs, whose instrumentation
// replaces the emulator's checks) the test says SKIPPED.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/json.h"
#include "tests/cuda_emu/nccl_test_util.h"
#include "tests/cuda_emu/planted.h"

#if RINGTAPE_CUDA_EMU && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#include "cuda_emu/emu.h"

namespace {

using rt::emu_test::scale;

// The lab reads RINGTAPE_EMU_PERF at the first queued work: set before main.
std::string perf_path() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/graph_test_lab.json";
}
const bool kPerfSet = [] { return setenv("RINGTAPE_EMU_PERF", perf_path().c_str(), 1) == 0; }();

struct Buf {
  float* p = nullptr;
  size_t n = 0;
  explicit Buf(size_t count) : n(count) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), bytes()) == cudaSuccess); }
  Buf(const std::vector<float>& v) : Buf(v.size()) { put(v); }
  ~Buf() { cudaFree(p); }
  size_t bytes() const { return n * sizeof(float); }
  void put(const std::vector<float>& v) const {
    REQUIRE(cudaMemcpy(p, v.data(), bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> get() const {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  }
  ~Stream() { cudaStreamDestroy(s); }
  operator cudaStream_t() const { return s; }
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess); }
  ~Event() { cudaEventDestroy(e); }
  operator cudaEvent_t() const { return e; }
};

// An instantiated graph, destroyed with its graph at the end of its scope.
struct Exec {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  explicit Exec(cudaGraph_t g) : graph(g) {
    REQUIRE(g != nullptr);
    REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess);
  }
  ~Exec() {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  void launch(cudaStream_t s) const { REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess); }
};

std::vector<float> ramp(size_t n, float start, float step) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * float(i);
  return v;
}

cudaStreamCaptureStatus status(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  return st;
}

cudaGraph_t end_capture(cudaStream_t s) {
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  return g;
}

size_t node_count(cudaGraph_t g) {
  size_t n = 0;
  REQUIRE(cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess);
  return n;
}

// A launcher's error (planted.h's launchers throw what cudaGetLastError said), or "".
template <typename F>
std::string launch_error(F&& launch) {
  try {
    launch();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The device's work ends in a fault whose report contains every one of `parts`; the fault
// is cleared for the next case (as in checks_test.cc).
void expect_fault(const std::vector<std::string>& parts) {
  const cudaError_t e = cudaDeviceSynchronize();
  CHECK_MESSAGE(e != cudaSuccess, "the planted bug was not caught");
  const std::string report = rt::emu::last_fault();
  for (const std::string& p : parts) CHECK_MESSAGE(report.find(p) != std::string::npos, "'", p, "' not in:\n", report);
  rt::emu::clear_faults();
}

void expect_clean() {
  const cudaError_t e = cudaDeviceSynchronize();
  REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e));
}

}  // namespace

TEST_CASE("captured kernels and copies do not run; each replay computes what eager work computes, with its inputs") {
  const int64_t n = 1000;
  Buf x(n), y(n), z(n), w(n), v(n);
  float* out = nullptr;  // pinned: a copy into it can be captured
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&out), v.bytes()) == cudaSuccess);
  Stream s;
  auto step = [&](cudaStream_t st) {
    scale(x.p, n, y.p, 64, st);                                                        // y = 2x
    rt::emu_test::pair_sum(y.p, n, z.p, false, st);                                    // z[i] = y[i] + y[i + 1]
    REQUIRE(cudaMemcpyAsync(w.p, z.p, z.bytes(), cudaMemcpyDeviceToDevice, st) == cudaSuccess);
    scale(w.p, n, v.p, 128, st);                                                       // v = 2z
    REQUIRE(cudaMemcpyAsync(out, v.p, v.bytes(), cudaMemcpyDeviceToHost, st) == cudaSuccess);
  };

  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(status(s) == cudaStreamCaptureStatusActive);
  step(s);
  const Exec g(end_capture(s));
  CHECK(status(s) == cudaStreamCaptureStatusNone);
  CHECK(node_count(g.graph) == 5);
  std::vector<cudaGraphNode_t> nodes(7, reinterpret_cast<cudaGraphNode_t>(1));
  size_t asked = nodes.size();
  REQUIRE(cudaGraphGetNodes(g.graph, nodes.data(), &asked) == cudaSuccess);
  CHECK(asked == 5);
  CHECK(nodes[4] != nullptr);
  CHECK(nodes[5] == nullptr);  // as CUDA: the rest of the array is nulled
  // Nothing ran: the first kernel's output was never written.
  CHECK(rt::emu::first_uninitialised(y.p, y.bytes()) == 0);

  for (int k = 0; k < 3; ++k) {
    const std::vector<float> in = ramp(size_t(n), float(k + 1), 0.5f * float(k + 1));
    x.put(in);
    step(s);  // eagerly: the reference
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    const std::vector<float> eager(out, out + n);
    CHECK(eager[10] == doctest::Approx(4 * (in[10] + in[11])));
    std::fill(out, out + n, 0.0f);
    REQUIRE(cudaMemset(v.p, 0, v.bytes()) == cudaSuccess);
    x.put(in);
    g.launch(s);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(std::vector<float>(out, out + n) == eager);
  }
  cudaFreeHost(out);
}

TEST_CASE("a fork and join over two streams through events is captured and replayed; an unjoined fork is refused") {
  const int64_t n = 4096;
  Buf x(n), y(n), z(n), w(n), sum(n), ones(std::vector<float>(size_t(n), 1.0f));
  Stream s0, s1;
  Event fork, join;
  REQUIRE(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal) == cudaSuccess);
  scale(x.p, n, y.p, 256, s0);  // y = 2x
  REQUIRE(cudaEventRecord(fork, s0) == cudaSuccess);
  CHECK(status(s1) == cudaStreamCaptureStatusNone);
  REQUIRE(cudaStreamWaitEvent(s1, fork, 0) == cudaSuccess);
  CHECK(status(s1) == cudaStreamCaptureStatusActive);  // it joined the capture
  unsigned long long id0 = 0, id1 = 0;
  cudaStreamCaptureStatus st;
  REQUIRE(cudaStreamGetCaptureInfo(s0, &st, &id0) == cudaSuccess);
  REQUIRE(cudaStreamGetCaptureInfo(s1, &st, &id1) == cudaSuccess);
  CHECK(id0 == id1);
  scale(y.p, n, z.p, 256, s1);  // z = 4x on the fork
  scale(y.p, n, w.p, 128, s0);  // w = 4x beside it
  REQUIRE(cudaEventRecord(join, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s0, join, 0) == cudaSuccess);
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  REQUIRE(cudaStreamGetCaptureInfo(s0, &st, nullptr, nullptr, &deps, nullptr, &ndeps) == cudaSuccess);
  CHECK(st == cudaStreamCaptureStatusActive);
  CHECK(ndeps == 2);  // the next node depends on both branches
  rt::emu_test::mul_add_rn(z.p, ones.p, w.p, int(n), sum.p, s0);  // sum = z + w = 8x
  const Exec g(end_capture(s0));
  CHECK(status(s1) == cudaStreamCaptureStatusNone);
  CHECK(node_count(g.graph) == 4);
  for (int k = 0; k < 2; ++k) {
    const std::vector<float> in = ramp(size_t(n), float(3 * k), 1.0f);
    x.put(in);
    g.launch(s0);
    REQUIRE(cudaStreamSynchronize(s0) == cudaSuccess);
    const std::vector<float> got = sum.get();
    CHECK(got[0] == doctest::Approx(8 * in[0]));
    CHECK(got[size_t(n) - 1] == doctest::Approx(8 * in[size_t(n) - 1]));
  }

  REQUIRE(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(cudaEventRecord(fork, s0) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s1, fork, 0) == cudaSuccess);
  scale(x.p, n, z.p, 256, s1);  // never joined back into s0
  cudaGraph_t unjoined = reinterpret_cast<cudaGraph_t>(1);
  CHECK(cudaStreamEndCapture(s0, &unjoined) == cudaErrorStreamCaptureUnjoined);
  CHECK(unjoined == nullptr);
  CHECK(status(s0) == cudaStreamCaptureStatusNone);
  CHECK(status(s1) == cudaStreamCaptureStatusNone);
  cudaGetLastError();
  scale(x.p, n, z.p, 256, s1);  // the streams work eagerly again
  expect_clean();
}

TEST_CASE("what CUDA refuses during a capture returns its code and invalidates the capture") {
  const int64_t n = 256;
  Buf x(std::vector<float>(size_t(n), 1.0f)), y(n);
  Stream s, other, blocking(cudaStreamDefault);
  Event e, outside;
  std::vector<float> host(static_cast<size_t>(n));
  // Begins a capture on `on` holding one node, expects `refused` to return `code`, and the
  // capture to be invalidated: later work on it fails, and cudaStreamEndCapture says so
  // and returns no graph.
  auto expect_refused = [&](const char* what, cudaStream_t on, cudaStreamCaptureMode mode, cudaError_t code,
                            auto&& refused) {
    CAPTURE(what);
    REQUIRE(cudaStreamBeginCapture(on, mode) == cudaSuccess);
    scale(x.p, n, y.p, 64, on);
    CHECK(refused() == code);
    CHECK(status(on) == cudaStreamCaptureStatusInvalidated);
    CHECK(cudaMemsetAsync(y.p, 0, y.bytes(), on) == cudaErrorStreamCaptureInvalidated);
    CHECK(launch_error([&] { scale(x.p, n, y.p, 64, on); }).find("cudaErrorStreamCaptureInvalidated") !=
          std::string::npos);
    cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
    CHECK(cudaStreamEndCapture(on, &g) == cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr);
    CHECK(status(on) == cudaStreamCaptureStatusNone);
    cudaGetLastError();
    expect_clean();  // the device itself is fine
  };
  const auto global = cudaStreamCaptureModeGlobal;
  expect_refused("stream sync", s, global, cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamSynchronize(s); });
  expect_refused("stream query", s, global, cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamQuery(s); });
  expect_refused("device sync", s, global, cudaErrorStreamCaptureUnsupported, [&] { return cudaDeviceSynchronize(); });
  expect_refused("event sync", s, global, cudaErrorCapturedEvent, [&] {
    REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
    return cudaEventSynchronize(e);
  });
  expect_refused("event query", s, global, cudaErrorCapturedEvent, [&] {
    REQUIRE(cudaEventRecord(e, s) == cudaSuccess);
    return cudaEventQuery(e);
  });
  expect_refused("cudaMemcpy", s, global, cudaErrorStreamCaptureUnsupported,
                 [&] { return cudaMemcpy(host.data(), y.p, y.bytes(), cudaMemcpyDeviceToHost); });
  expect_refused("cudaMemset", s, global, cudaErrorStreamCaptureUnsupported,
                 [&] { return cudaMemset(y.p, 0, y.bytes()); });
  expect_refused("pageable copy", s, global, cudaErrorStreamCaptureUnsupported,
                 [&] { return cudaMemcpyAsync(host.data(), y.p, y.bytes(), cudaMemcpyDeviceToHost, s); });
  void* p = nullptr;
  expect_refused("cudaMalloc, global", s, global, cudaErrorStreamCaptureUnsupported,
                 [&] { return cudaMalloc(&p, 64); });
  expect_refused("cudaMalloc, thread-local", s, cudaStreamCaptureModeThreadLocal, cudaErrorStreamCaptureUnsupported,
                 [&] { return cudaMalloc(&p, 64); });
  expect_refused("wait for uncaptured work", s, global, cudaErrorStreamCaptureIsolation, [&] {
    REQUIRE(cudaEventRecord(outside, other) == cudaSuccess);  // `other` is not capturing
    return cudaStreamWaitEvent(s, outside, 0);
  });
  expect_refused("legacy stream work", blocking, global, cudaErrorStreamCaptureImplicit,
                 [&] { return cudaMemsetAsync(y.p, 0, y.bytes(), nullptr); });
  expect_refused("legacy stream copy", blocking, global, cudaErrorStreamCaptureImplicit,
                 [&] { return cudaMemcpy(host.data(), y.p, y.bytes(), cudaMemcpyDeviceToHost); });
  expect_refused("bad launch", s, global, cudaErrorInvalidConfiguration, [&] {
    return launch_error([&] { scale(x.p, n, y.p, 2048, s); }).find("cudaErrorInvalidConfiguration") != std::string::npos
               ? cudaErrorInvalidConfiguration
               : cudaSuccess;
  });
  expect_refused("stream destroy", s, global, cudaErrorStreamCaptureUnsupported, [&] { return cudaStreamDestroy(s); });
  expect_refused("merge", s, global, cudaErrorStreamCaptureMerge, [&] {
    REQUIRE(cudaStreamBeginCapture(other, global) == cudaSuccess);
    REQUIRE(cudaEventRecord(e, other) == cudaSuccess);
    const cudaError_t r = cudaStreamWaitEvent(s, e, 0);
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(other, &g) == cudaErrorStreamCaptureInvalidated);  // both are
    return r;
  });
  // The legacy stream while a blocking stream captures: its status query is refused too,
  // but invalidates nothing.
  REQUIRE(cudaStreamBeginCapture(blocking, global) == cudaSuccess);
  cudaStreamCaptureStatus st;
  CHECK(cudaStreamIsCapturing(nullptr, &st) == cudaErrorStreamCaptureImplicit);
  CHECK(status(blocking) == cudaStreamCaptureStatusActive);
  cudaGraph_t empty = nullptr;
  CHECK(cudaStreamEndCapture(blocking, &empty) == cudaSuccess);
  CHECK(node_count(empty) == 0);
  CHECK(cudaGraphDestroy(empty) == cudaSuccess);
  cudaGetLastError();

  for (cudaError_t code :
       {cudaErrorStreamCaptureUnsupported, cudaErrorStreamCaptureInvalidated, cudaErrorStreamCaptureMerge,
        cudaErrorStreamCaptureUnmatched, cudaErrorStreamCaptureUnjoined, cudaErrorStreamCaptureIsolation,
        cudaErrorStreamCaptureImplicit, cudaErrorCapturedEvent, cudaErrorStreamCaptureWrongThread,
        cudaErrorIllegalState}) {
    CHECK(std::string(cudaGetErrorName(code)) != "cudaErrorUnknown");
    CHECK(std::string(cudaGetErrorString(code)) != "unknown error");
  }
}

TEST_CASE("capture modes decide which thread may make potentially unsafe calls; capture calls misused") {
  Stream s, s1;
  Event fork;
  void* p = nullptr;
  auto other_thread_malloc = [&] {
    return std::async(std::launch::async, [] {
             void* q = nullptr;
             const cudaError_t r = cudaMalloc(&q, 64);
             cudaFree(q);
             return r;
           }).get();
  };
  // Relaxed: this thread's allocations are allowed.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaMalloc(&p, 64) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  CHECK(other_thread_malloc() == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphDestroy(g);
  // Thread-local: another thread's allocations are allowed, and this thread's too once its
  // own mode is relaxed (cudaThreadExchangeStreamCaptureMode, push and pop).
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(other_thread_malloc() == cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  CHECK(cudaMalloc(&p, 64) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeRelaxed);
  REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
  cudaGraphDestroy(g);
  // Global: another thread in the global mode may not allocate, and its call invalidates
  // this thread's capture.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(other_thread_malloc() == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureMode(7)) == cudaErrorInvalidValue);
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorIllegalState);  // not capturing
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
  const cudaError_t elsewhere =
      std::async(std::launch::async, [&] { cudaGraph_t h = nullptr; return cudaStreamEndCapture(s, &h); }).get();
  CHECK(elsewhere == cudaErrorStreamCaptureWrongThread);
  CHECK(status(s) == cudaStreamCaptureStatusActive);
  REQUIRE(cudaEventRecord(fork, s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(s1, fork, 0) == cudaSuccess);
  CHECK(cudaStreamEndCapture(s1, &g) == cudaErrorStreamCaptureUnmatched);  // not where it began
  CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
  // Relaxed captures may end on another thread.
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  g = nullptr;
  CHECK(std::async(std::launch::async, [&] { return cudaStreamEndCapture(s, &g); }).get() == cudaSuccess);
  CHECK(g != nullptr);
  cudaGraphDestroy(g);
  cudaGetLastError();
}

TEST_CASE("two branches of a graph writing one buffer without a dependency are a cross-stream hazard at replay") {
  const int64_t n = 4096;
  Buf x(ramp(size_t(n), 1.0f, 1.0f)), y(n);
  Stream s0, s1;
  Event fork, mid, join;
  auto capture = [&](bool ordered) {
    REQUIRE(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal) == cudaSuccess);
    REQUIRE(cudaEventRecord(fork, s0) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(s1, fork, 0) == cudaSuccess);
    scale(x.p, n, y.p, 256, s0);
    if (ordered) {
      REQUIRE(cudaEventRecord(mid, s0) == cudaSuccess);
      REQUIRE(cudaStreamWaitEvent(s1, mid, 0) == cudaSuccess);
    }
    scale(x.p, n, y.p, 128, s1);  // the planted bug when not ordered: both branches write y
    REQUIRE(cudaEventRecord(join, s1) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(s0, join, 0) == cudaSuccess);
    return end_capture(s0);
  };
  {
    const Exec g(capture(true));
    for (int k = 0; k < 2; ++k) g.launch(s0);
    expect_clean();
    CHECK(y.get()[size_t(n) - 1] == doctest::Approx(2.0 * n));
  }
  const Exec g(capture(false));  // captured without complaint: nothing ran
  g.launch(s0);
  expect_fault({"cross-stream hazard", "by 'scale_kernel'", "graph lane stream"});
}

TEST_CASE("a buffer freed after the capture is caught when the graph is launched") {
  const int64_t n = 1024;
  float* x = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)) == cudaSuccess);
  const std::vector<float> ones(size_t(n), 1.0f);
  REQUIRE(cudaMemcpy(x, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  Buf y(n);
  Stream s;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  scale(x, n, y.p, 64, s);
  const Exec g(end_capture(s));
  g.launch(s);
  expect_clean();
  CHECK(y.get()[0] == 2.0f);
  REQUIRE(cudaFree(x) == cudaSuccess);
  g.launch(s);
  expect_fault({"out-of-bounds read", "in unallocated memory", "scale_kernel"});  // cudaFree'd: unallocated again
}

TEST_CASE("the kernel lab and the launch log count a graph's kernels at each launch, and a launch as one host launch") {
  REQUIRE(kPerfSet);
  std::atomic<int> logged{0};
  rt::emu::set_activity_sink([&](const rt::emu::Activity& a) {
    if (a.kind == rt::emu::Activity::Kind::kernel && a.name == "count_kernel") ++logged;
  });
  auto lab = [] {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(rt::emu::perf_write());
    std::ifstream in(perf_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return rt::json::parse(ss.str());
  };
  auto count_record = [](const rt::json::Value& doc, const char* field) -> int64_t {
    for (const rt::json::Value& r : doc.find("records")->as_array()) {
      const std::string& k = r.find("kernel")->as_string();
      const bool count_kernel = k.size() >= 12 && k.compare(k.size() - 12, 12, "count_kernel") == 0;
      if (r.find("kind")->as_string() == "kernel" && count_kernel)
        return r.find(field)->as_int();
    }
    return 0;
  };
  unsigned* c = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&c), sizeof(unsigned)) == cudaSuccess);
  REQUIRE(cudaMemset(c, 0, sizeof(unsigned)) == cudaSuccess);
  Stream s;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  rt::emu_test::count(1000, c, s);
  rt::emu_test::count(1000, c, s);
  const Exec g(end_capture(s));
  const rt::json::Value before = lab();
  CHECK(count_record(before, "launches") == 0);  // capturing ran nothing
  for (int k = 0; k < 3; ++k) g.launch(s);
  const rt::json::Value after = lab();
  CHECK(count_record(after, "launches") == 6);
  CHECK(count_record(after, "graph_node_launches") == 6);
  CHECK(after.find("graph_launches")->as_int() - before.find("graph_launches")->as_int() == 3);
  CHECK(after.find("host_launches")->as_int() - before.find("host_launches")->as_int() == 3);
  CHECK(logged.load() == 6);
  rt::emu::set_activity_sink(nullptr);
  unsigned got = 0;
  REQUIRE(cudaMemcpy(&got, c, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == 6000u);
  cudaFree(c);
}

TEST_CASE("an NCCL all-reduce captured by each rank is a collective of its own at every launch") {
  int ndev = 0;
  REQUIRE(cudaGetDeviceCount(&ndev) == cudaSuccess);
  if (ndev < 2) {
    std::printf("SKIPPED: one emulated device (set RINGTAPE_EMU_DEVICES=2)\n");
    return;
  }
  const int world = 2;
  const size_t n = 512;
  std::promise<ncclUniqueId> made;
  std::shared_future<ncclUniqueId> id = made.get_future().share();
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < world; ++rank)
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      if (rank == 0) {
        ncclUniqueId u;
        NCCL_OK(ncclGetUniqueId(&u));
        made.set_value(u);
      }
      rt::emu_test::Rank R(rank, world, id.get(), rank);
      rt::emu_test::DeviceVec<float> send(n), recv(n);
      // Thread-local, as a rank's thread must not forbid the other ranks' copies.
      CUDA_OK(cudaStreamBeginCapture(R.stream(), cudaStreamCaptureModeThreadLocal));
      NCCL_OK(ncclAllReduce(send.get(), recv.get(), n, ncclFloat32, ncclSum, R.comm(), R.stream()));
      cudaGraph_t graph = nullptr;
      CUDA_OK(cudaStreamEndCapture(R.stream(), &graph));
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int k = 0; k < 3; ++k) {
        CUDA_OK(cudaMemcpy(send.get(), ramp(n, float(rank + 10 * k), 1.0f).data(), send.bytes(),
                           cudaMemcpyHostToDevice));
        CUDA_OK(cudaGraphLaunch(exec, R.stream()));
        const std::vector<float> got = recv.read(R.stream());
        rt::emu_test::expect(got[5] == float(2 * 5 + 1 + 20 * k), "rank ", rank, " launch ", k, ": ", got[5]);
      }
      CUDA_OK(cudaGraphExecDestroy(exec));
      CUDA_OK(cudaGraphDestroy(graph));
      CUDA_OK(cudaStreamSynchronize(R.stream()));
    }));
  for (auto& f : ranks) {
    try {
      f.get();
    } catch (const std::exception& e) {
      FAIL_CHECK(e.what());  // a rank's failure
    }
  }
}

#else

TEST_CASE("cuda-emu graphs") {
  std::printf("SKIPPED: stream capture and CUDA graphs are tested under --config=cuda-emu (not -asan, -tsan)\n");
}

#endif
