// The NCCL backend at world size 1 (NCCL refuses two ranks on one GPU: more ranks need a
// machine with more GPUs; run bench/allreduce_bench under torchrun there). What one rank
// can check: NCCL comes up through our store, every call and algorithm runs on the
// communication stream after the caller's work and hands its result back to the caller's
// stream (Work::block_stream) or the host (Work::wait), calls complete in issue order, and
// a bad call fails with its name. Without a GPU each case prints "SKIPPED: no CUDA device".
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "distributed/nccl_communicator.h"
#include "distributed/rendezvous.h"
#include "engine/cuda_graph.h"
#include "engine/ops.h"
#include "engine/stream.h"
#include "kernels/cuda/runtime.h"
#include "tests/distributed/communicator_test_util.h"

namespace rt::dist {
namespace {

// Device work that keeps a stream busy for a while: kBusyAdds adds of kBusyElements floats.
#if RINGTAPE_CUDA_EMU
constexpr int64_t kBusyElements = 1 << 16;  // ~40 ms an add emulated: ~1.6 s of device work
constexpr int kBusyAdds = 40;
#else
constexpr int64_t kBusyElements = 1 << 24;  // ~50 us an add on an H200: ~50 ms of device work
constexpr int kBusyAdds = 1000;
#endif

// A world of one: its own store, its communicator on cuda:0.
struct OneGpu {
  RendezvousStore store = connect_store(LaunchEnv{}, std::chrono::seconds(30));
  NcclCommunicator comm{*store.store, 0, 1, 0};
};

TEST_CASE("nccl: every call at world size 1 hands the caller's values back on the caller's stream") {
  if (!testing::have_gpu("NcclCommunicator, world 1")) return;
  OneGpu one;
  Communicator& c = one.comm;
  const Stream caller = Stream::create(Device::cuda(0));
  StreamGuard guard(caller);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (AllReduceAlgo a : {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        const std::vector<double> want = testing::int_tensor(0, 1003, t).to_vector<double>();
        // Written on the caller's stream just before the call: the call must wait for it.
        Tensor x = Tensor::full({1003}, 5.0, t, Device::cuda(0));
        x.copy_(testing::int_tensor(0, 1003, t));
        Work w = c.all_reduce(x, op, a);
        w.block_stream(caller);  // no host wait; to_vector reads on the caller's stream
        testing::expect_equal(x, want, detail::cat("all_reduce ", algo_name(a), " ", reduce_op_name(op), " ",
                                                   dtype_name(t)));
        w.wait();
        CHECK(w.done());
      }
  Tensor x = testing::int_tensor(0, 64, DType::f32).to(Device::cuda(0));
  Tensor out = Tensor::zeros({64}, DType::f32, Device::cuda(0));
  c.broadcast(x, 0).wait();
  c.all_gather(out, x).wait();
  testing::expect_equal(out, testing::int_tensor(0, 64, DType::f32).to_vector<double>(), "all_gather");
  out.fill_(0);
  c.reduce_scatter(out, x, ReduceOp::max).wait();
  testing::expect_equal(out, testing::int_tensor(0, 64, DType::f32).to_vector<double>(), "reduce_scatter");
  c.barrier().wait();
}

TEST_CASE("nccl: calls in flight complete in issue order") {
  if (!testing::have_gpu("NcclCommunicator issue order")) return;
  OneGpu one;
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 32; ++k) {
    ts.push_back(Tensor::full({k % 2 ? 1 << 22 : 7}, double(k), DType::f32, Device::cuda(0)));
    works.push_back(one.comm.all_reduce(ts.back(), ReduceOp::sum, k % 3 ? AllReduceAlgo::ring : AllReduceAlgo::library));
  }
  while (!works.back().done()) {
    bool seen_done = false;
    for (size_t k = works.size(); k-- > 0;) {
      const bool d = works[k].done();
      REQUIRE_MESSAGE((d || !seen_done), "a call after call ", k, " completed before it");
      seen_done = seen_done || d;
    }
  }
  for (size_t k = 0; k < works.size(); ++k) {
    works[k].wait();
    CHECK(ts[k].to_vector<double>().back() == double(k));
  }
}

// Issue order without host waits (the design's overlap of all-reduce and backward): while the
// caller's stream is still busy, a series of calls returns to the host, and the first call's
// result includes that busy work's output. Before the fix the watchdog kept its lock for as
// long as any call was in flight (a condition-variable wait whose predicate was already
// true returns without unlocking), so the second call's run() waited for the first to
// complete on the device, that is, for all of the caller's work.
TEST_CASE("nccl: calls return to the host while the caller's work still runs, and reduce its output") {
  if (!testing::have_gpu("NcclCommunicator issue without host waits")) return;
  OneGpu one;
  const Stream caller = Stream::create(Device::cuda(0));
  StreamGuard guard(caller);
  const int64_t n = kBusyElements;
  const int reps = kBusyAdds;
  const Tensor one_each = Tensor::full({n}, 1.0, DType::f32, Device::cuda(0));
  Tensor y = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  // The first ring call reserves the ring's scratch, an allocation that may wait for the
  // device (Note [Scratch outside the issue lock]): done here, before the busy work.
  Tensor warm = Tensor::full({7}, 1.0, DType::f32, Device::cuda(0));
  one.comm.all_reduce(warm, ReduceOp::sum, AllReduceAlgo::ring).wait();
  caller.synchronize();
  for (int i = 0; i < reps; ++i) y = add(y, one_each);
  void* busy_done = cuda::event_create(0);
  cuda::event_record(busy_done, caller.handle());

  std::vector<Tensor> small;
  std::vector<Work> works;
  works.push_back(one.comm.all_reduce(y, ReduceOp::sum, AllReduceAlgo::library));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the watchdog sees the call in flight
  for (int k = 0; k < 8; ++k) {
    small.push_back(Tensor::full({7}, double(k), DType::f32, Device::cuda(0)));
    works.push_back(one.comm.all_reduce(small.back(), ReduceOp::sum, k % 2 ? AllReduceAlgo::ring : AllReduceAlgo::library));
  }
  const bool busy_was_done = cuda::event_query(busy_done);
  CHECK_MESSAGE(!busy_was_done, "the calls returned to the host only after the caller's work had finished");
  for (Work& w : works) w.wait();
  cuda::event_destroy(busy_done);
  const std::vector<double> got = y.to_vector<double>();
  CHECK(got.front() == double(reps));
  CHECK(got.back() == double(reps));
  for (int k = 0; k < 8; ++k) CHECK(small[size_t(k)].to_vector<double>().back() == double(k));
}

// Note [Communication stream priority]. Before: the stream had the default priority, so a
// ready bucket's all-reduce queued behind the rest of backward's kernels.
TEST_CASE("nccl: the communication stream has the device's greatest priority") {
  if (!testing::have_gpu("NcclCommunicator stream priority")) return;
  OneGpu one;
  const Stream plain = Stream::create(Device::cuda(0));
  CHECK(cuda::stream_priority(one.comm.stream().handle()) < cuda::stream_priority(plain.handle()));  // lower: sooner
  CHECK(cuda::stream_priority(Stream::create(Device::cuda(0), /*high_priority=*/true).handle()) ==
        cuda::stream_priority(one.comm.stream().handle()));
}

// Note [Collectives in a CUDA graph]. At world size 1 an all-reduce hands the values back, so
// what one rank shows is the graph's part: each replay runs the captured calls again on the
// communication stream, after the caller's work before them (the copy of this replay's input)
// and before the work after them (block_stream joins them back); the host cannot wait for a
// captured call, and a replay is watched whole.
TEST_CASE("nccl: calls captured in a CUDA graph run at every replay, joined back by block_stream") {
  if (!testing::have_gpu("NcclCommunicator in a CUDA graph")) return;
  OneGpu one;
  Communicator& c = one.comm;
  const Stream caller = Stream::create(Device::cuda(0));
  StreamGuard guard(caller);
  Tensor warm = Tensor::full({7}, 1.0, DType::f32, Device::cuda(0));
  c.all_reduce(warm, ReduceOp::sum, AllReduceAlgo::ring).wait();  // the ring's scratch, eagerly
  const int64_t n = 1003;
  Tensor in = Tensor::zeros({n}, DType::f32, Device::cuda(0)), x = Tensor::zeros({n}, DType::f32, Device::cuda(0));
  Tensor y;
  CudaGraph graph;
  graph.capture(caller, [&] {
    x.copy_(in);
    for (AllReduceAlgo a : {AllReduceAlgo::library, AllReduceAlgo::ring, AllReduceAlgo::tree}) {
      Work w = c.all_reduce(x, ReduceOp::avg, a);
      CHECK_THROWS_WITH_AS(w.wait(), doctest::Contains("cannot be waited for on the host"), Error);
      CHECK_THROWS_WITH_AS(w.done(), doctest::Contains("cannot be queried on the host"), Error);
      w.block_stream(caller);
    }
    CHECK_THROWS_WITH_AS(c.watch(caller, "a capture", std::chrono::seconds(30)), doctest::Contains("being captured"),
                         Error);
    y = add(x, x);
  });
  for (int k = 1; k <= 3; ++k) {
    CAPTURE(k);
    in.copy_(testing::int_tensor(k, n, DType::f32));
    graph.replay(caller);
    Work r = c.watch(caller, "replay " + std::to_string(k), std::chrono::seconds(30));
    r.wait();
    CHECK(r.done());
    std::vector<double> want = testing::int_tensor(k, n, DType::f32).to_vector<double>();
    for (double& v : want) v *= 2;
    testing::expect_equal(y, want, "the replay's result");
  }
}

// A watched stream that does not pass its point within the timeout fails the watch like a
// call, naming what was watched (a replay whose collectives hang:
// Note [Collectives in a CUDA graph] in distributed/communicator.h). The stream is held here by work queued before the
// watch point, longer than the watch's timeout.
TEST_CASE("nccl: a watched stream late past its timeout fails the watch, naming it") {
  if (!testing::have_gpu("NcclCommunicator watch timeout")) return;
  OneGpu one;
  const Stream caller = Stream::create(Device::cuda(0));
  StreamGuard guard(caller);
  const Tensor one_each = Tensor::full({kBusyElements}, 1.0, DType::f32, Device::cuda(0));
  Tensor y = Tensor::zeros({kBusyElements}, DType::f32, Device::cuda(0));
  caller.synchronize();
  for (int i = 0; i < kBusyAdds; ++i) y = add(y, one_each);
  Work w = one.comm.watch(caller, "the late replay", std::chrono::milliseconds(5));
  std::string msg;
  try {
    w.wait();
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find("the late replay failed after") != std::string::npos, msg);
  CHECK_MESSAGE(msg.find("timed out") != std::string::npos, msg);
  caller.synchronize();
}

TEST_CASE("nccl: a CPU tensor is refused, naming the device to move it to") {
  if (!testing::have_gpu("NcclCommunicator misuse")) return;
  OneGpu one;
  std::string msg;
  try {
    one.comm.all_reduce(Tensor::zeros({4})).wait();
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find("is on cpu but this nccl communicator works on cuda:0") != std::string::npos, msg);
}

}  // namespace
}  // namespace rt::dist
