// The NCCL fake reports what goes wrong between ranks, where a real NCCL hangs, corrupts
// memory or fails without saying why: ncclCommAbort ends an operation blocked on a silent
// peer from another thread; a killed rank becomes the others' asynchronous error, naming
// it, within seconds, and their operations wait for the abort as NCCL's kernels do;
// mismatched collectives and transfers name both ranks' operations; two ranks on one GPU
// fail their init ("Duplicate GPU detected"); a peer that never issues its part is
// reported at RINGTAPE_EMU_NCCL_TIMEOUT; a stream or buffer of another device is refused;
// queued work is checked like a kernel. Ranks are real processes (or threads).
// Outside --config=cuda-emu the test says SKIPPED.
#include <doctest/doctest.h>

#include <cstdio>

#if RINGTAPE_CUDA_EMU
#include <signal.h>

#include <future>

#include "cuda_emu/emu.h"
#include "tests/cuda_emu/nccl_test_util.h"
#include "tests/distributed/launch.h"

namespace rt::emu_test {
namespace {

using rt::dist::testing::launch;
using rt::dist::testing::LaunchOptions;

LaunchOptions within(int seconds, const char* timeout = nullptr) {
  LaunchOptions o;
  o.limit = std::chrono::seconds(seconds);
  if (timeout) o.env["RINGTAPE_EMU_NCCL_TIMEOUT"] = timeout;
  return o;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// After a failure: the rank's operations wait for this, as on a GPU
// (Note [A failed communicator] in cuda_emu/nccl_comm.h); without it, freeing their buffers
// would wait.
void abort_comm(Rank& R) {
  NCCL_OK(ncclCommAbort(R.comm()));
  R.forget();
}

// The rank's communicator fails asynchronously within `seconds` with `code`; its message
// (ncclGetLastError) contains every one of `parts`. Returns the message.
std::string expect_async_error(const Rank& R, ncclResult_t code, double seconds, const std::vector<std::string>& parts) {
  const auto start = Clock::now();
  const ncclResult_t got = R.wait_error(seconds);
  const std::string msg = ncclGetLastError(R.comm());
  expect(got == code, "rank ", R.rank(), ": async error ", ncclGetErrorString(got), " after ", seconds_since(start),
         " s, expected ", ncclGetErrorString(code), ": ", msg);
  for (const std::string& p : parts) expect(has(msg, p), "rank ", R.rank(), ": '", p, "' not in: ", msg);
  return msg;
}

TEST_CASE("nccl fake: ncclCommAbort from another thread ends an operation blocked on a silent peer") {
  const std::string id = fresh_path("id"), done = fresh_path("done");
  const auto r = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id);
        if (rank == 1) {  // joins, then never issues the all-reduce
          expect(wait_file(done, 30), "rank 0 never finished");
          return 0;
        }
        DeviceVec<float> x(std::vector<float>(1000, 1.0f));
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 1000, ncclFloat32, ncclSum, R.comm(), R.stream()));
        const auto start = Clock::now();
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          NCCL_OK(ncclCommAbort(R.comm()));
        });
        const cudaError_t e = cudaStreamSynchronize(R.stream());  // returns once the abort ended the operation
        const double waited = seconds_since(start);
        aborter.join();
        R.forget();
        signal_file(done);
        expect(e == cudaSuccess, "the aborted operation faulted the device: ", cudaGetErrorString(e));
        expect(waited > 0.2 && waited < 10, "the stream waited ", waited, " s for the aborted operation");
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());
}

TEST_CASE("nccl fake: ncclCommAbort ends a non-blocking setup whose peer never comes") {
  const auto r = launch(
      1,
      [](int) {
        CUDA_OK(cudaSetDevice(0));
        ncclUniqueId id;
        NCCL_OK(ncclGetUniqueId(&id));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm;
        expect(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress, "init did not say in progress");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ncclResult_t st;
        NCCL_OK(ncclCommGetAsyncError(comm, &st));
        expect(st == ncclInProgress, "rank 1 never came, yet the setup says ", ncclGetErrorString(st));
        const auto start = Clock::now();
        NCCL_OK(ncclCommAbort(comm));
        expect(seconds_since(start) < 2, "ncclCommAbort took ", seconds_since(start), " s");
        DeviceVec<float> x(std::vector<float>{1});
        expect(ncclAllReduce(x.get(), x.get(), 1, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument,
               "an aborted communicator was accepted");
        return 0;
      },
      within(30));
  CHECK_MESSAGE(r.ok(), r.report());
}

TEST_CASE("nccl fake: a killed rank becomes the others' asynchronous error, naming it; ncclCommAbort ends their operations") {
  const std::string id = fresh_path("id");
  const auto r = launch(
      3,
      [&](int rank) {
        Rank R(rank, 3, id);
        DeviceVec<float> x(std::vector<float>(4096, 1.0f));
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 4096, ncclFloat32, ncclSum, R.comm(), R.stream()));
        expect(x.read(R.stream())[0] == 3.0f, "the first all-reduce went wrong");
        if (rank == 2) raise(SIGKILL);
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 4096, ncclFloat32, ncclSum, R.comm(), R.stream()));
        const auto start = Clock::now();
        const std::string msg = expect_async_error(R, ncclRemoteError, 20, {"rank 2"});
        expect(seconds_since(start) < 10, "noticed after ", seconds_since(start), " s: ", msg);
        // Later calls fail at once. The operation in flight waits for the abort, as NCCL's
        // kernels do: a program that only watched its stream would hang as on a GPU.
        expect(ncclAllReduce(x.get(), x.get(), 4096, ncclFloat32, ncclSum, R.comm(), R.stream()) == ncclRemoteError,
               "a call on the failed communicator was accepted");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        expect(cudaStreamQuery(R.stream()) == cudaErrorNotReady, "the failed operation ended before the abort");
        const auto abort_start = Clock::now();
        abort_comm(R);
        CUDA_OK(cudaStreamSynchronize(R.stream()));  // no device fault: the operation just ends
        expect(seconds_since(abort_start) < 5, "the stream ended ", seconds_since(abort_start), " s after the abort");
        return 0;
      },
      within(60));
  INFO(r.report());
  REQUIRE(r.ranks.size() == 3);
  CHECK(r.ranks[0].exit_code == 0);
  CHECK(r.ranks[1].exit_code == 0);
  CHECK(r.ranks[2].signal == SIGKILL);
}

TEST_CASE("nccl fake: mismatched collectives are reported on both ranks, naming both operations") {
  const std::string id = fresh_path("id");
  const auto r = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id);
        DeviceVec<float> x(std::vector<float>(12, 1.0f));
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 12, ncclFloat32, ncclSum, R.comm(), R.stream()));  // #1 matches
        const size_t n = rank == 0 ? 10 : 12;
        NCCL_OK(ncclAllReduce(x.get(), x.get(), n, ncclFloat32, ncclSum, R.comm(), R.stream()));
        expect_async_error(R, ncclInvalidUsage, 20,
                           {"mismatched operations", "ncclAllReduce #2 (10 x ncclFloat32, ncclSum)",
                            "ncclAllReduce #2 (12 x ncclFloat32, ncclSum)", "rank 0", "rank 1"});
        abort_comm(R);
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());
}

TEST_CASE("nccl fake: a rank that issues another collective is named by all three ranks") {
  const std::string id = fresh_path("id");
  const auto r = launch(
      3,
      [&](int rank) {
        Rank R(rank, 3, id);
        DeviceVec<float> x(std::vector<float>(64, 1.0f));
        if (rank == 2) NCCL_OK(ncclBroadcast(x.get(), x.get(), 64, ncclFloat32, 0, R.comm(), R.stream()));
        else NCCL_OK(ncclAllReduce(x.get(), x.get(), 64, ncclFloat32, ncclSum, R.comm(), R.stream()));
        // Ranks 0 and 1 see it from rank 2's frame or from a notice relayed by the other.
        const ncclResult_t e = R.wait_error(20);
        const std::string msg = ncclGetLastError(R.comm());
        expect(e == ncclInvalidUsage || e == ncclRemoteError, "rank ", rank, ": ", ncclGetErrorString(e), ": ", msg);
        expect(has(msg, "ncclBroadcast #1 (64 x ncclFloat32, root 0)") && has(msg, "ncclAllReduce #1"), "rank ",
               rank, ": ", msg);
        abort_comm(R);
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());
}

TEST_CASE("nccl fake: an ncclRecv of another count than its ncclSend names both; a finalized peer is named") {
  const std::string id = fresh_path("id"), done = fresh_path("done");
  const auto r = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id);
        DeviceVec<float> x(std::vector<float>(12, 1.0f));
        if (rank == 0) {  // a small send completes into the socket's buffer, as into NCCL's
          NCCL_OK(ncclSend(x.get(), 10, ncclFloat32, 1, R.comm(), R.stream()));
          CUDA_OK(cudaStreamSynchronize(R.stream()));
          expect(wait_file(done, 30), "rank 1 never finished");
          return 0;
        }
        NCCL_OK(ncclRecv(x.get(), 12, ncclFloat32, 0, R.comm(), R.stream()));
        expect_async_error(R, ncclInvalidUsage, 20,
                           {"rank 0 issued ncclSend #1 to rank 1 (10 x ncclFloat32) where rank 1 issued ncclRecv #1 "
                            "from rank 0 (12 x ncclFloat32)"});
        abort_comm(R);
        signal_file(done);
        return 0;
      },
      within(60));
  CHECK_MESSAGE(r.ok(), r.report());

  const std::string id2 = fresh_path("id"), done2 = fresh_path("done");
  const auto f = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id2);
        if (rank == 0) {
          NCCL_OK(ncclCommFinalize(R.comm()));
          expect(wait_file(done2, 30), "rank 1 never finished");
          return 0;
        }
        DeviceVec<float> x(std::vector<float>(4, 1.0f));
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 4, ncclFloat32, ncclSum, R.comm(), R.stream()));
        expect_async_error(R, ncclInvalidUsage, 20,
                           {"rank 0 finalized its communicator after 0 collectives", "ncclAllReduce #1"});
        abort_comm(R);
        signal_file(done2);
        return 0;
      },
      within(60));
  CHECK_MESSAGE(f.ok(), f.report());
}

TEST_CASE("nccl fake: two ranks on one GPU fail their init with \"Duplicate GPU detected\"") {
  const std::string id = fresh_path("id");
  auto on_device_zero = [](int rank, const ncclUniqueId& u) {
    CUDA_OK(cudaSetDevice(0));  // the planted bug: no cudaSetDevice(LOCAL_RANK)
    ncclComm_t comm = nullptr;
    const ncclResult_t e = ncclCommInitRank(&comm, 2, u, rank);
    const std::string msg = ncclGetLastError(nullptr);
    expect(e == ncclInvalidUsage && !comm, "rank ", rank, ": init returned ", ncclGetErrorString(e), ": ", msg);
    expect(has(msg, "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0"), "rank ", rank, ": ", msg);
  };
  const auto procs = launch(
      2,
      [&](int rank) {
        on_device_zero(rank, share_id(rank, id));
        return 0;
      },
      within(60));
  CHECK_MESSAGE(procs.ok(), procs.report());
  const auto threads = launch(
      1,
      [&](int) {
        ncclUniqueId u;
        NCCL_OK(ncclGetUniqueId(&u));
        auto a = std::async(std::launch::async, [&] { on_device_zero(0, u); });
        auto b = std::async(std::launch::async, [&] { on_device_zero(1, u); });
        a.get();
        b.get();
        return 0;
      },
      within(60));
  CHECK_MESSAGE(threads.ok(), threads.report());
}

TEST_CASE("nccl fake: a peer that never issues its part is reported at RINGTAPE_EMU_NCCL_TIMEOUT") {
  const std::string id = fresh_path("id"), done = fresh_path("done");
  const auto r = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id);
        if (rank == 1) {
          expect(wait_file(done, 30), "rank 0 never finished");
          return 0;
        }
        DeviceVec<float> x(std::vector<float>(16, 1.0f));
        NCCL_OK(ncclAllReduce(x.get(), x.get(), 16, ncclFloat32, ncclSum, R.comm(), R.stream()));
        const auto start = Clock::now();
        expect_async_error(R, ncclRemoteError, 20,
                           {"waited 1.5 s (RINGTAPE_EMU_NCCL_TIMEOUT) in ncclAllReduce #1", "rank 1 (receiving from it)"});
        const double t = seconds_since(start);
        expect(t > 1.0 && t < 10, "reported after ", t, " s");
        abort_comm(R);
        signal_file(done);
        return 0;
      },
      within(60, "1.5"));
  CHECK_MESSAGE(r.ok(), r.report());

  // Large sends to each other, each before its receive and outside a group: both wait in
  // their send for ever on a GPU. Here the first to time out says so; the other learns it
  // as a closed connection (exit code 3) when the first shuts its connections.
  const std::string id2 = fresh_path("id");
  const auto pair = launch(
      2,
      [&](int rank) {
        Rank R(rank, 2, id2);
        const size_t n = 32 << 20;
        DeviceVec<uint8_t> a(std::vector<uint8_t>(n, 1)), b(n);
        NCCL_OK(ncclSend(a.get(), n, ncclUint8, 1 - rank, R.comm(), R.stream()));
        NCCL_OK(ncclRecv(b.get(), n, ncclUint8, 1 - rank, R.comm(), R.stream()));
        const ncclResult_t e = R.wait_error(20);
        const std::string msg = ncclGetLastError(R.comm());
        const std::string peer = std::to_string(1 - rank);
        expect(e == ncclRemoteError, "rank ", rank, ": ", ncclGetErrorString(e), ": ", msg);
        const bool timed_out = has(msg, "waited 1.5 s (RINGTAPE_EMU_NCCL_TIMEOUT) in ncclSend #1 to rank " + peer) &&
                               has(msg, "outside ncclGroupStart/End");
        const bool closed = has(msg, "the connection to rank " + peer + " closed during ncclSend #1 to rank " + peer);
        expect(timed_out || closed, "rank ", rank, ": ", msg);
        abort_comm(R);
        return timed_out ? 0 : 3;
      },
      within(60, "1.5"));
  INFO(pair.report());
  REQUIRE(pair.ranks.size() == 2);
  for (const auto& rank : pair.ranks) CHECK((rank.exit_code == 0 || rank.exit_code == 3));
  CHECK((pair.ranks[0].exit_code == 0 || pair.ranks[1].exit_code == 0));
}

TEST_CASE("nccl fake: a stream or a buffer of another device is refused, naming both devices") {
  const auto r = launch(
      1,
      [](int) {
        int devices = 0;
        CUDA_OK(cudaGetDeviceCount(&devices));
        expect(devices >= 2, "RINGTAPE_EMU_DEVICES gives ", devices, " devices; the test needs 2");
        ncclUniqueId u;
        NCCL_OK(ncclGetUniqueId(&u));
        Rank R(0, 1, u, 0);
        DeviceVec<float> on0(std::vector<float>(8, 1.0f));
        CUDA_OK(cudaSetDevice(1));
        cudaStream_t s1;
        CUDA_OK(cudaStreamCreate(&s1));
        DeviceVec<float> on1(std::vector<float>(8, 1.0f));
        ncclResult_t e = ncclAllReduce(on0.get(), on0.get(), 8, ncclFloat32, ncclSum, R.comm(), s1);
        std::string msg = ncclGetLastError(nullptr);
        expect(e == ncclInvalidUsage && has(msg, "the stream belongs to cuda:1 but rank 0's communicator is on cuda:0"),
               ncclGetErrorString(e), ": ", msg);
        // nullptr is the current device's stream: cuda:1 here (a missing cudaSetDevice).
        e = ncclAllReduce(on0.get(), on0.get(), 8, ncclFloat32, ncclSum, R.comm(), nullptr);
        expect(e == ncclInvalidUsage && has(ncclGetLastError(nullptr), "missing cudaSetDevice"), ncclGetErrorString(e));
        CUDA_OK(cudaSetDevice(0));
        e = ncclAllReduce(on1.get(), on1.get(), 8, ncclFloat32, ncclSum, R.comm(), R.stream());
        msg = ncclGetLastError(nullptr);
        expect(e == ncclInvalidArgument && has(msg, "is memory of cuda:1, but rank 0's communicator is on cuda:0"),
               ncclGetErrorString(e), ": ", msg);
        std::vector<float> host(8, 1.0f);
        e = ncclAllReduce(host.data(), on0.get(), 8, ncclFloat32, ncclSum, R.comm(), R.stream());
        expect(e == ncclInvalidArgument && has(ncclGetLastError(nullptr), "is not device memory"), ncclGetErrorString(e));
        // Partly overlapping buffers are not NCCL's in-place form.
        e = ncclAllReduce(on0.get(), on0.get() + 1, 4, ncclFloat32, ncclSum, R.comm(), R.stream());
        expect(e == ncclInvalidArgument && has(ncclGetLastError(nullptr), "overlap"), ncclGetErrorString(e));
        CUDA_OK(cudaStreamDestroy(s1));
        return 0;
      },
      within(30));
  CHECK_MESSAGE(r.ok(), r.report());
}

// Not under a sanitizer config: there the kernels' writes go to the sanitizer's runtime, not
// the emulator's shadow, so reads of never-written memory are not checked (memcheck.cc).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("nccl fake: an operation is checked like a kernel when it runs (a never-written input)") {
  const auto r = launch(
      1,
      [](int) {
        ncclUniqueId u;
        NCCL_OK(ncclGetUniqueId(&u));
        Rank R(0, 1, u, 0);
        DeviceVec<float> never_written(256);
        NCCL_OK(ncclAllReduce(never_written.get(), never_written.get(), 256, ncclFloat32, ncclSum, R.comm(), R.stream()));
        const cudaError_t e = cudaStreamSynchronize(R.stream());
        const std::string report = rt::emu::last_fault();
        expect(e != cudaSuccess && has(report, "'ncclAllReduce' reads never-written device memory"),
               cudaGetErrorString(e), ": ", report);
        return 0;
      },
      within(30));
  CHECK_MESSAGE(r.ok(), r.report());
}
#endif

}  // namespace
}  // namespace rt::emu_test

#else

TEST_CASE("nccl fake faults") { std::printf("SKIPPED: the NCCL fake runs under --config=cuda-emu\n"); }

#endif
