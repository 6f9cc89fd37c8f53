#include "distributed/nccl_communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "distributed/allreduce_algos.h"
#include "distributed/communicator_liveness.h"
#include "distributed/flight_recorder.h"
#include "distributed/nccl_check.h"
#include "distributed/reduce_kernel_cuda.h"
#include "engine/stream.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

namespace rt::dist {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    default: RT_FAIL("NCCL reduces f32, f64, bf16 and f16, not ", dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  RT_FAIL("unknown ReduceOp ", int(op));
}

// A CUDA event, destroyed when its last holder lets go (CUDA frees a pending event's
// resources once it completes). Without timing unless CommOptions::timed_events: they only
// order streams and signal completion (a timing event costs more to record and query).
using EventPtr = std::shared_ptr<void>;
EventPtr make_event(int device, bool timing) {
  return EventPtr(cuda::event_create(device, timing), [](void* e) { cuda::event_destroy(e); });
}

// Sets the current CUDA device for a scope (NCCL enqueues on the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&prev_));
    CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { CUDA_WARN(cudaSetDevice(prev_)); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

// One call's completion, shared by its Work and the watchdog.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // "" on success
  void finish(std::string e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
};

}  // namespace

struct NcclCommunicator::Impl {
  Impl(NcclCommunicator& self, Store& store, int device);
  ~Impl();

  // A call queued on the stream, until the watchdog sees it complete.
  struct Entry {
    std::string what;
    Clock::time_point start;  // issue, or when the call before it completed if later
    Millis timeout;
    EventPtr done;
    std::shared_ptr<State> state;
    std::vector<Tensor> keep;  // alive until the stream has passed the call
    uint64_t flight = 0;       // its flight record (Note [Flight recorder] in distributed/flight_recorder.h)
  };

  void enqueue(const Call& c, std::vector<Tensor>& keep);
  // After a call that may answer ncclInProgress: waits until NCCL has set it up.
  void wait_ready(const std::string& what, Clock::time_point deadline);
  void watchdog();
  // Fails every call in flight with `why` after aborting NCCL; the communicator is broken.
  void abort(const std::string& why);  // needs mu
  std::string describe(const Entry& e, const std::string& why) const;

  class StepP2P;  // the algorithms' P2P on this communicator

  const int rank, world, device;
  const CommOptions opts;
  std::unique_ptr<PeerLiveness> liveness;
  ncclComm_t comm = nullptr;
  Stream stream;
  Tensor scratch;      // (max_scratch_bytes,) u8: ring/tree receive slots (reserve_scratch)
  std::mutex scratch_mu;  // its one allocation
  void reserve_scratch();
  Tensor barrier_buf;  // one f32 the barrier all-reduces

  std::mutex issue_mu;  // one call issued at a time
  std::mutex mu;        // the fields below
  std::condition_variable cv;
  std::deque<Entry> inflight;
  std::vector<Tensor> aborted_keep;  // Note [Tensors of aborted calls]
  std::string broken;  // the failure that broke the communicator; "" while it works
  std::atomic<bool> aborting{false};
  bool stopping = false;
  std::thread thread;  // the watchdog; last
};

// The algorithms' P2P on NCCL: each step is one ncclGroupStart/End of ncclSend/ncclRecv on
// the communication stream, the reductions our kernel on the same stream. Stream order does
// the waiting, so finish() has nothing to do.
class NcclCommunicator::Impl::StepP2P final : public P2P {
 public:
  StepP2P(Impl& m, const std::string& what, Clock::time_point deadline)
      : m_(m), what_(what), deadline_(deadline), s_(static_cast<cudaStream_t>(m.stream.handle())) {}

  void start(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) override {
    if (sends.empty() && recvs.empty()) return;
    // A pair's transfers meet in the order they are issued: order both sides by tag.
    auto by_peer_tag = [](const Transfer& a, const Transfer& b) {
      return a.peer != b.peer ? a.peer < b.peer : a.tag < b.tag;
    };
    std::vector<Transfer> s = sends, r = recvs;
    std::sort(s.begin(), s.end(), by_peer_tag);
    std::sort(r.begin(), r.end(), by_peer_tag);
    NCCL_CHECK(ncclGroupStart());
    for (const Transfer& t : s) NCCL_CHECK(ncclSend(t.ptr, t.bytes, ncclInt8, t.peer, m_.comm, s_));
    for (const Transfer& t : r) NCCL_CHECK(ncclRecv(t.ptr, t.bytes, ncclInt8, t.peer, m_.comm, s_));
    NCCL_CHECK(ncclGroupEnd());
    m_.wait_ready(what_, deadline_);
  }
  void finish() override {}
  void reduce(ReduceOp op, DType t, int64_t n, const void* in, void* inout) override {
    reduce_cuda(op, t, n, in, inout, s_);
  }
  void scale(DType t, int64_t n, void* x, double s) override { scale_cuda(t, n, x, s, s_); }
  void copy(void* dst, const void* src, size_t bytes) override {
    cuda::memcpy(dst, src, bytes, cuda::CopyKind::d2d, m_.device, s_);
  }
  void* scratch(size_t bytes) override {
    RT_CHECK(m_.scratch.defined() && m_.scratch.nbytes() >= bytes, "NCCL communicator: the ring/tree all-reduce asks ",
             bytes, " bytes of scratch, ", m_.scratch.defined() ? m_.scratch.nbytes() : 0,
             " were reserved (a bug: max_scratch_bytes must bound every request)");
    return m_.scratch.raw_data();
  }

 private:
  Impl& m_;
  const std::string& what_;
  Clock::time_point deadline_;
  cudaStream_t s_;
};

NcclCommunicator::Impl::Impl(NcclCommunicator& self, Store& store, int dev)
    : rank(self.rank()), world(self.world_size()), device(dev), opts(self.options()) {
  const auto deadline = Clock::now() + opts.timeout;
  liveness = std::make_unique<PeerLiveness>(store, opts.prefix, rank, world, listen_host(opts), opts.timeout);
  liveness->on_stacks_request([](int from) { flight::answer_stacks_request(from); });
  DeviceGuard guard(device);
  ncclUniqueId id;
  const std::string key = opts.prefix + "/nccl/id";
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(key, Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof id));
  } else {
    const Bytes b = store.get(key, std::chrono::ceil<Millis>(deadline - Clock::now()));
    RT_CHECK(b.size() == sizeof id, "rank ", rank, ": NCCL's unique id in the store (", key, ") has ", b.size(),
             " bytes, expected ", sizeof id, ": another program uses the same keys? Give this communicator its ",
             "own CommOptions::prefix");
    std::memcpy(&id, b.data(), sizeof id);
  }
  // Non-blocking: NCCL's setup (and every later call) can be watched against a deadline.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  NCCL_CHECK(ncclCommInitRankConfig(&comm, world, id, rank, &config));
  try {
    wait_ready(detail::cat("rank ", rank, ": NCCL's communicator setup"), deadline);
  } catch (...) {
    NCCL_WARN(ncclCommAbort(comm));  // no watchdog yet: this is the only owner
    throw;
  }
  // Note [Communication stream priority]
  // The greatest, so that a bucket's all-reduce, once its gradients are ready, is scheduled
  // ahead of the backward kernels queued after them (PyTorch's NCCL process groups do the
  // same).
  stream = Stream::create(Device::cuda(device), /*high_priority=*/true);
  {
    // Zeroed and owned by the stream that all-reduces it in barrier(): zeroed on the caller's
    // stream it raced with the first barrier (found under --config=cuda-emu).
    StreamGuard on_comm(stream);
    barrier_buf = Tensor::zeros({1}, DType::f32, Device::cuda(device));
  }
  thread = std::thread([this] { watchdog(); });
}

NcclCommunicator::Impl::~Impl() {
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return inflight.empty(); });  // each call ends by its timeout at the latest
    stopping = true;
  }
  cv.notify_all();
  if (thread.joinable()) thread.join();
  if (aborting) {  // NCCL freed it; what aborted calls used goes once the stream has passed them
    try {
      stream.synchronize();
    } catch (const std::exception& e) {  // a faulted device: the memory is not touched again
      std::fprintf(stderr, "warning: NCCL communicator teardown: %s\n", e.what());
    }
    aborted_keep.clear();
    return;
  }
  // Finalize (flushes NCCL's own work), then destroy; abort if that does not end in time.
  const auto deadline = Clock::now() + opts.timeout;
  ncclResult_t st = ncclCommFinalize(comm);
  while (st == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
  }
  if (st == ncclSuccess) NCCL_WARN(ncclCommDestroy(comm));
  else NCCL_WARN(ncclCommAbort(comm));
}

// Note [Scratch outside the issue lock]
// The ring and tree all-reduces receive into scratch. Grown on demand inside enqueue(), it was
// allocated while run() held issue_mu; an allocation that reaches cudaMalloc can wait for the
// device, and a device stuck in a collective whose peer died never lets it return, so the
// watchdog (which aborts only when it can take issue_mu) could not abort it: a hang. It is
// allocated once, before issue_mu, at the size that bounds every request (max_scratch_bytes:
// 24 slices plus rounding, or 4 MiB; 24 MiB at the default 1 MiB slices), and only for a
// communicator that runs them. Allocated on the communication stream, which uses it: on the
// caller's stream the caching allocator could hand the block to the caller's later ops while
// the communication stream works in it (found under --config=cuda-emu, when the scratch was
// still replaced as it grew).
void NcclCommunicator::Impl::reserve_scratch() {
  std::lock_guard<std::mutex> lock(scratch_mu);
  if (scratch.defined()) return;
  DeviceGuard guard(device);
  StreamGuard on_comm(stream);
  scratch = Tensor::empty({int64_t(max_scratch_bytes(opts.slice_bytes))}, DType::u8, Device::cuda(device));
}

void NcclCommunicator::Impl::wait_ready(const std::string& what, Clock::time_point deadline) {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &st));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress)
      RT_FAIL(what, ": NCCL failed: ", ncclGetErrorString(st), " (", ncclGetLastError(comm), ")");
    if (Clock::now() >= deadline) {
      const std::string lost = liveness->describe_lost();
      RT_FAIL(what, ": NCCL did not finish setting it up within the timeout",
              lost.empty() ? std::string(" (every peer's process is alive: NCCL_DEBUG=INFO shows NCCL's network "
                                         "and topology choices)")
                           : "; lost " + lost);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::string NcclCommunicator::Impl::describe(const Entry& e, const std::string& why) const {
  return detail::cat("rank ", rank, " of ", world, ": ", e.what, " failed after ", net::seconds(Clock::now() - e.start),
                     ": ", why, ". This communicator is unusable from now on; restart the job");
}

void NcclCommunicator::Impl::abort(const std::string& why) {
  // Calls that completed before the abort succeeded; the abort makes the rest "complete".
  // A query that fails (the device faulted) counts as not completed: abort() runs in the
  // watchdog's catch, and a second throw there ended the process in std::terminate (found
  // under --config=cuda-emu).
  const auto completed = [](void* event) {
    try {
      return cuda::event_query(event);
    } catch (const std::exception&) {
      return false;
    }
  };
  while (!inflight.empty() && completed(inflight.front().done.get())) {
    flight::ended(inflight.front().flight, true);
    inflight.front().state->finish("");
    inflight.pop_front();
  }
  if (!aborting.exchange(true)) NCCL_WARN(ncclCommAbort(comm));
  broken = inflight.empty() ? why : describe(inflight.front(), why);
  if (!inflight.empty()) flight::ended(inflight.front().flight, false);
  for (size_t i = 0; i < inflight.size(); ++i)
    inflight[i].state->finish(i == 0 ? broken : inflight[i].what + " not run: " + broken);
  // Note [Tensors of aborted calls]
  // NCCL's kernels and our reduce kernels queued on the stream may still read and write these
  // after the abort (ncclCommAbort does not wait for the stream); freed now, the caching
  // allocator could hand their memory to the caller's next tensors while that happens. They
  // stay until ~Impl has synchronised the stream.
  for (Entry& e : inflight)
    for (Tensor& t : e.keep) aborted_keep.push_back(std::move(t));
  inflight.clear();
  cv.notify_all();
}

void NcclCommunicator::Impl::watchdog() {
  // Its event queries on the communicator's device: a thread's current device is 0 until it
  // chooses one, and the first query would give a rank other than 0 a context on cuda:0.
  CUDA_WARN(cudaSetDevice(device));
  auto last_liveness = Clock::now();
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    // Note [Watchdog lock]
    // Every round waits with `mu` released: asleep until a call is in flight, then 1 ms
    // between polls. (A wait_for whose predicate is already true returns at once without
    // unlocking: while any call was in flight the watchdog kept `mu` for good, so run() could
    // not queue the next call until the device had finished the earlier ones, and with a call
    // that never completed it held issue_mu waiting for `mu` while the watchdog waited for
    // issue_mu to abort: a hang.)
    if (inflight.empty()) cv.wait(lock, [&] { return stopping || !inflight.empty(); });
    else cv.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping; });
    if (stopping) return;
    if (inflight.empty() || !broken.empty()) continue;
    try {
      // Release what completed, in order.
      bool released = false;
      while (!inflight.empty() && cuda::event_query(inflight.front().done.get())) {
        flight::ended(inflight.front().flight, true);
        inflight.front().state->finish("");
        inflight.pop_front();
        released = true;
      }
      if (inflight.empty()) {
        cv.notify_all();
        continue;
      }
      Entry& head = inflight.front();
      const auto now = Clock::now();
      if (released) head.start = std::max(head.start, now);
      ncclResult_t st = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm, &st));
      if (st != ncclSuccess && st != ncclInProgress) {
        std::unique_lock<std::mutex> issuing(issue_mu, std::try_to_lock);
        if (issuing.owns_lock())
          abort(detail::cat("NCCL reported ", ncclGetErrorString(st), " (", ncclGetLastError(comm), ")"));
        continue;
      }
      std::string lost;
      if (now - last_liveness > std::chrono::milliseconds(10)) {
        lost = liveness->describe_lost();
        last_liveness = now;
      }
      const bool late = now - head.start > head.timeout;
      if (lost.empty() && !late) continue;
      // Never abort under a call being queued (it would use the freed communicator); that
      // call ends by its own deadline, and the next round aborts.
      std::unique_lock<std::mutex> issuing(issue_mu, std::try_to_lock);
      if (!issuing.owns_lock()) continue;
      if (lost.empty()) liveness->ask_for_stacks();  // Note [Stacks of a rank without ringtape's launcher]
      if (!lost.empty()) abort("lost " + lost);
      else if (const std::string silent = liveness->describe_silent(); !silent.empty())
        abort(detail::cat("timed out (timeout ", net::seconds(head.timeout), "); not taking part: ", silent));
      else
        abort(detail::cat("timed out (timeout ", net::seconds(head.timeout), "); NCCL does not say which peer ",
                          "it waited for. Every peer's process is alive (their liveness links are open), so some ",
                          "rank did not take part: check that every rank issues the same calls in the same ",
                          "order, or raise the timeout"));
    } catch (const std::exception& e) {
      std::unique_lock<std::mutex> issuing(issue_mu, std::try_to_lock);
      if (issuing.owns_lock()) abort(e.what());
    }
  }
}

void NcclCommunicator::Impl::enqueue(const Call& c, std::vector<Tensor>& keep) {
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  const Clock::time_point deadline = Clock::now() + c.timeout;
  switch (c.kind) {
    case Kind::all_reduce: {
      const int64_t n = c.a.numel();
      if (n == 0) return;
      if (c.algo == AllReduceAlgo::library) {
        NCCL_CHECK(ncclAllReduce(c.a.raw_data(), c.a.raw_data(), size_t(n), nccl_type(c.a.dtype()), nccl_op(c.op),
                                 comm, s));
        return wait_ready(c.what, deadline);
      }
      StepP2P p(*this, c.what, deadline);
      const AlgoShape shape{rank, world, c.a.dtype(), n, opts.slice_bytes};
      if (c.algo == AllReduceAlgo::ring) ring_all_reduce(p, shape, c.a.raw_data(), c.op);
      else tree_all_reduce(p, shape, c.a.raw_data(), c.op);
      if (scratch.defined()) keep.push_back(scratch);
      return;
    }
    case Kind::broadcast:
      if (c.a.nbytes() == 0) return;
      NCCL_CHECK(ncclBroadcast(c.a.raw_data(), c.a.raw_data(), c.a.nbytes(), ncclInt8, c.root, comm, s));
      return wait_ready(c.what, deadline);
    case Kind::all_gather:
      if (c.b.nbytes() == 0) return;
      NCCL_CHECK(ncclAllGather(c.b.raw_data(), c.a.raw_data(), c.b.nbytes(), ncclInt8, comm, s));
      return wait_ready(c.what, deadline);
    case Kind::reduce_scatter:
      if (c.a.numel() == 0) return;
      NCCL_CHECK(ncclReduceScatter(c.b.raw_data(), c.a.raw_data(), size_t(c.a.numel()), nccl_type(c.a.dtype()),
                                   nccl_op(c.op), comm, s));
      return wait_ready(c.what, deadline);
    case Kind::barrier:
      NCCL_CHECK(ncclAllReduce(barrier_buf.raw_data(), barrier_buf.raw_data(), 1, ncclFloat32, ncclSum, comm, s));
      return wait_ready(c.what, deadline);
    case Kind::p2p: {
      std::vector<Transfer> sends, recvs;
      if (c.a.defined() && c.a.nbytes() > 0) sends.push_back({c.dst, c.a.raw_data(), c.a.nbytes(), 0});
      if (c.b.defined() && c.b.nbytes() > 0) recvs.push_back({c.src, c.b.raw_data(), c.b.nbytes(), 0});
      StepP2P(*this, c.what, deadline).start(sends, recvs);
      return;
    }
  }
}

namespace {

class NcclWork final : public WorkImpl {
 public:
  // captured: a call queued while the caller's stream was being captured
  // (Note [Collectives in a CUDA graph] in distributed/communicator.h): it orders streams only.
  NcclWork(std::shared_ptr<State> s, EventPtr done, const std::atomic<bool>* aborting, EventPtr ready = nullptr,
           EventPtr started = nullptr, bool captured = false)
      : s_(std::move(s)), done_(std::move(done)), ready_(std::move(ready)), started_(std::move(started)),
        aborting_(aborting), captured_(captured) {}

  void wait() override {
    refuse_captured("waited for");
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->done) return rethrow();
    }
    // The event completes when the call does, or when an abort ended it: only the watchdog
    // can tell which, so after an abort the answer is its verdict.
    if (done_) cuda::event_synchronize(done_.get());
    if (!done_ || aborting_->load()) {
      std::unique_lock<std::mutex> lock(s_->mu);
      s_->cv.wait(lock, [&] { return s_->done; });
      return rethrow();
    }
  }
  bool done() override {
    refuse_captured("queried");
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->done) return true;
    }
    return done_ && !aborting_->load() && cuda::event_query(done_.get());
  }
  void block_stream(const Stream& s) override {
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->done && !s_->error.empty()) throw Error(s_->error);
    }
    if (done_) cuda::stream_wait_event(s.handle(), done_.get());
  }
  std::optional<DeviceTimes> device_times(const Event& ref) override {
    if (captured_ || !started_ || !ref.handle()) return std::nullopt;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      if (s_->done && !s_->error.empty()) return std::nullopt;
    }
    if (aborting_->load()) return std::nullopt;  // the events fired, but not because the call ran
    try {
      // Both queried first: cudaEventElapsedTime on an event not yet passed fails, and the
      // failure would linger for the next launch's error check.
      if (!cuda::event_query(ref.handle()) || !cuda::event_query(done_.get())) return std::nullopt;
      const auto ms = [&](const EventPtr& e) { return double(cuda::event_elapsed_ms(ref.handle(), e.get())); };
      return DeviceTimes{ms(ready_), ms(started_), ms(done_)};
    } catch (const std::exception&) {  // a faulted device: the training's next CUDA call says so
      return std::nullopt;
    }
  }

 private:
  void rethrow() {
    if (!s_->error.empty()) throw Error(s_->error);
  }
  void refuse_captured(const char* how) const {
    RT_CHECK(!captured_, "a collective captured in a CUDA graph cannot be ", how, " on the host (it runs at every "
             "replay): order a stream after it with block_stream (Note [Collectives in a CUDA graph] in "
             "distributed/communicator.h)");
  }
  std::shared_ptr<State> s_;
  EventPtr done_;            // null: the call failed before it was queued
  EventPtr ready_, started_;  // Note [Device timeline]; null without CommOptions::timed_events
  const std::atomic<bool>* aborting_;
  bool captured_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(Store& store, int rank, int world, int device, CommOptions opts)
    : Communicator(rank, world, Device::cuda(device), std::move(opts)),
      impl_(std::make_unique<Impl>(*this, store, device)) {}

NcclCommunicator::~NcclCommunicator() = default;

const Stream& NcclCommunicator::stream() const { return impl_->stream; }

std::string nccl_versions() {
  // NCCL >= 2.9 encodes x.y.z as x * 10000 + y * 100 + z.
  const auto text = [](int v) { return detail::cat(v / 10000, ".", v / 100 % 100, ".", v % 100); };
  int v = 0;
  const ncclResult_t st = ncclGetVersion(&v);
  return detail::cat(st == ncclSuccess ? text(v) : std::string("unknown (") + ncclGetErrorString(st) + ")",
                     " (compiled against ", text(NCCL_VERSION_CODE), ")");
}

void NcclCommunicator::check_healthy() {
  Impl& m = *impl_;
  // Every call queued ends, completed or ended by an abort (then `aborting` is already set:
  // abort() sets it, under `mu`, before it aborts NCCL).
  m.stream.synchronize();
  std::lock_guard<std::mutex> lock(m.mu);
  if (!m.broken.empty()) throw Error(m.broken);
  RT_CHECK(!m.aborting, "rank ", m.rank, " of ", m.world, ": the NCCL communicator was aborted");
}

void NcclCommunicator::check_reducible(DType, const std::string&) const {}  // every floating dtype

Work NcclCommunicator::run(Call call) {
  Impl& m = *impl_;
  if (call.kind == Kind::all_reduce && call.algo != AllReduceAlgo::library) m.reserve_scratch();
  std::lock_guard<std::mutex> issue(m.issue_mu);
  auto state = std::make_shared<State>();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.broken.empty()) {
      state->finish(call.what + " not run: this communicator failed earlier: " + m.broken);
      return Work(std::make_shared<NcclWork>(state, nullptr, &m.aborting));
    }
  }
  DeviceGuard guard(m.device);
  // A captured call has no timing events, and the watchdog does not see it
  // (Note [Collectives in a CUDA graph] in distributed/communicator.h).
  const bool captured = cuda::stream_is_capturing(Stream::current(device()).handle());
  RT_CHECK(!captured || call.kind != Kind::all_reduce || call.algo == AllReduceAlgo::library ||
               m.scratch.defined(),
           call.what, ": the first ", algo_name(call.algo), " all-reduce cannot be captured in a CUDA graph (it "
           "allocates its scratch); run one eagerly first");
  // After everything the caller queued so far (Note [Communication stream]).
  const bool timed = m.opts.timed_events && !captured;
  EventPtr ready = make_event(m.device, timed);
  cuda::event_record(ready.get(), Stream::current(device()).handle());
  cuda::stream_wait_event(m.stream.handle(), ready.get());
  EventPtr started;  // Note [Device timeline]
  if (timed) {
    started = make_event(m.device, true);
    cuda::event_record(started.get(), m.stream.handle());
  }

  Impl::Entry e{call.what, Clock::now(), call.timeout, make_event(m.device, timed), state, {}};
  for (const Tensor* t : {&call.a, &call.b})
    if (t->defined()) e.keep.push_back(*t);
  try {
    m.enqueue(call, e.keep);
  } catch (const std::exception& x) {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.broken.empty()) m.abort(x.what());
    throw;
  }
  cuda::event_record(e.done.get(), m.stream.handle());
  // Started: queued on the communication stream (Note [Flight recorder]). A captured call is
  // recorded once, when captured, as ended there: its replays run inside graphs watched whole.
  flight::started(call.flight);
  if (captured) flight::ended(call.flight, true);
  e.flight = call.flight;
  if (captured) return Work(std::make_shared<NcclWork>(state, e.done, &m.aborting, nullptr, nullptr, true));
  Work w(std::make_shared<NcclWork>(state, e.done, &m.aborting, timed ? ready : nullptr, started));
  {
    std::lock_guard<std::mutex> lock(m.mu);
    // Under issue_mu: the watchdog never keeps `mu` while it waits (Note [Watchdog lock]).
    m.inflight.push_back(std::move(e));
  }
  m.cv.notify_all();
  return w;
}

Work NcclCommunicator::watch(const Stream& s, const std::string& what, Millis timeout) {
  Impl& m = *impl_;
  RT_CHECK(s.device() == device(), "watch: the stream is on ", s.device().str(), ", the communicator on ",
           device().str());
  RT_CHECK(!cuda::stream_is_capturing(s.handle()), "watch(", what, "): the stream is being captured; watch it after "
           "the graph's launch");
  std::lock_guard<std::mutex> issue(m.issue_mu);
  auto state = std::make_shared<State>();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.broken.empty()) {
      state->finish(what + " not watched: this communicator failed earlier: " + m.broken);
      return Work(std::make_shared<NcclWork>(state, nullptr, &m.aborting));
    }
  }
  DeviceGuard guard(m.device);
  Impl::Entry e{what, Clock::now(), timeout, make_event(m.device, false), state, {}};
  cuda::event_record(e.done.get(), s.handle());
  Work w(std::make_shared<NcclWork>(state, e.done, &m.aborting));
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.inflight.push_back(std::move(e));
  }
  m.cv.notify_all();
  return w;
}

}  // namespace rt::dist
