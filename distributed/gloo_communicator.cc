#include "distributed/gloo_communicator.h"

#include <signal.h>
#include <sys/socket.h>  // before gloo's tcp attr.h, which uses sockaddr_storage

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <utility>

#include "distributed/allreduce_algos.h"
#include "distributed/communicator_liveness.h"
#include "distributed/flight_recorder.h"
#include "distributed/gloo_store.h"
#include "distributed/reduce_kernel.h"
#include "distributed/work_queue.h"

namespace rt::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Gloo slots (message ids, matched per pair of ranks) of our own transfers. Gloo's
// collectives build theirs from small prefixes in the top byte; ours stay clear of them.
constexpr uint64_t kAlgoSlot = 0xA0ull << 56;  // | call number (24 bits) << 32 | step tag
constexpr uint64_t kP2PSlot = 0xB0ull << 56;   // | the pair's transfer count

// A transfer that failed, with the peer it was for.
struct PeerFailure : std::runtime_error {
  PeerFailure(int peer, bool sending, const std::string& cause)
      : std::runtime_error(cause), peer(peer), sending(sending) {}
  int peer;
  bool sending;
};

Millis left(Clock::time_point deadline) {
  return std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
}

// Note [Aborting waits on a lost peer]
// Gloo fails the transfers queued on a pair when that pair's connection closes, but a send
// still waiting for its peer to post the matching receive is held by the context, not the
// pair: when that peer dies, nothing wakes the send, and it waits out the whole timeout
// (seen in CI: rank 0 of a 4-rank tree waited 5 s for a SIGKILLed rank 2 while its
// neighbours failed in 0.2 s). So the liveness links, which see any peer's death at once,
// abort the one wait in progress (and every later one) through this latch; the failure is
// then reported with the lost rank named. An aborted wait is not given up at once: it is
// waited again for kLossGrace (0.5 s), in which Gloo usually fails it itself as the dead
// rank's neighbours fail and exit, else times it out. Giving up at once freed the transfer's
// buffers while live peers were still sending into them: a rank crashed (SIGSEGV) in the
// 4-rank ring of gloo_communicator_fault_test. After the grace, Gloo's own timeout has
// failed the context, so nothing arrives into a freed buffer any more. It is shared with the liveness thread's callback,
// which may outlive the transport. This covers our algorithms and point-to-point calls;
// Gloo's own collectives (AllReduceAlgo::library, broadcast, all_gather, barrier) keep
// their buffers to themselves, and closing the connections does not wake them either
// (tried): there, a wait on a live peer while another rank dies lasts until the timeout.
class WaitAborter {
 public:
  // Called by the liveness thread when a peer is lost.
  void peer_lost() {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = true;
    abort_current();
  }
  // Marks `buf` as the wait in progress (nullptr: none); false when a peer is already lost,
  // in which case the wait must not start.
  bool set_current(gloo::transport::UnboundBuffer* buf, bool sending) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = buf;
    sending_ = sending;
    return !lost_;
  }

 private:
  void abort_current() {
    if (!current_) return;
    // Gloo keeps the abort until the next wait takes it, so one that lands just before the
    // wait begins still ends it.
    if (sending_) current_->abortWaitSend();
    else current_->abortWaitRecv();
  }
  std::mutex mu_;
  bool lost_ = false;
  gloo::transport::UnboundBuffer* current_ = nullptr;
  bool sending_ = false;
};

// The algorithms' P2P on Gloo's unbound buffers; reductions on this (the communication)
// thread with the CPU kernels.
class GlooP2P final : public P2P {
 public:
  GlooP2P(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<WaitAborter> aborter)
      : ctx_(std::move(ctx)), aborter_(std::move(aborter)) {}

  // The call the following transfers belong to: their slots and their deadline.
  void begin_call(uint64_t slot_base, Clock::time_point deadline) {
    slot_base_ = slot_base;
    deadline_ = deadline;
    groups_.clear();
    expected_.clear();
  }

  void start(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) override {
    Group g;
    // Receives first: a peer's send can then land at once.
    for (const Transfer& t : recvs) {
      auto it = expected_.find({t.peer, t.tag});
      if (it != expected_.end()) {  // posted by expect()
        g.push_back(std::move(it->second));
        expected_.erase(it);
        continue;
      }
      g.push_back(post_recv(t));
    }
    for (const Transfer& t : sends) {
      g.push_back({ctx_->createUnboundBuffer(t.ptr, t.bytes), t.peer, true});
      g.back().buf->send(t.peer, slot_base_ | t.tag);
    }
    groups_.push_back(std::move(g));
  }

  void finish() override {
    Group g = std::move(groups_.front());
    groups_.pop_front();
    for (Pending& p : g) {
      // A wait that a lost peer aborted (or that starts after the loss) is waited again for
      // at most kLossGrace: Note [Aborting waits on a lost peer].
      const bool lost = !aborter_->set_current(p.buf.get(), p.sending);
      bool ok = false;
      try {
        ok = !lost && wait(p, left(deadline_));
        aborter_->set_current(nullptr, false);
        if (!ok) ok = wait(p, std::min(left(deadline_), kLossGrace));  // Gloo throws at its end
      } catch (const std::exception& e) {
        aborter_->set_current(nullptr, false);
        throw PeerFailure(p.peer, p.sending, e.what());
      }
      if (!ok) throw PeerFailure(p.peer, p.sending, "the transfer was aborted: a peer's process is gone");
    }
  }

  bool early_receives() const override { return true; }
  void expect(const std::vector<Transfer>& recvs) override {
    for (const Transfer& t : recvs) expected_.emplace(std::make_pair(t.peer, t.tag), post_recv(t));
  }

  void reduce(ReduceOp op, DType t, int64_t n, const void* in, void* inout) override {
    reduce_cpu(op, t, n, in, inout);
  }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void scale(DType t, int64_t n, void* x, double s) override { scale_cpu(t, n, x, s); }
  void* scratch(size_t bytes) override {
    if (scratch_.size() * sizeof(double) < bytes) scratch_.resize((bytes + sizeof(double) - 1) / sizeof(double));
    return scratch_.data();
  }

 private:
  struct Pending {
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    int peer;
    bool sending;
  };

  static constexpr Millis kLossGrace{500};

  // True when the transfer completed, false when aborted; throws what Gloo throws.
  static bool wait(Pending& p, Millis timeout) {
    return p.sending ? p.buf->waitSend(nullptr, timeout) : p.buf->waitRecv(nullptr, timeout);
  }
  using Group = std::vector<Pending>;

  Pending post_recv(const Transfer& t) {
    Pending p{ctx_->createUnboundBuffer(t.ptr, t.bytes), t.peer, false};
    p.buf->recv(t.peer, slot_base_ | t.tag);
    return p;
  }

  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<WaitAborter> aborter_;
  uint64_t slot_base_ = 0;
  Clock::time_point deadline_;
  std::deque<Group> groups_;
  std::map<std::pair<int, uint32_t>, Pending> expected_;  // (peer, tag): posted by expect()
  std::vector<double> scratch_;  // 8-byte aligned
};

// Gloo's reduction callback for `op`: c = a op b over n elements (c may be a or b).
gloo::AllreduceOptions::Func gloo_reduction(ReduceOp op, DType t) {
  const ReduceOp local = op == ReduceOp::avg ? ReduceOp::sum : op;
  const size_t elem = dtype_size(t);
  return [local, t, elem](void* c, const void* a, const void* b, size_t n) {
    if (c == b) std::swap(a, b);
    if (c != a) std::memcpy(c, a, n * elem);
    reduce_cpu(local, t, int64_t(n), b, c);
  };
}

bool timed_out(const std::string& cause, Clock::duration ran, Millis timeout) {
  return ran >= timeout || cause.find("imed out") != std::string::npos;
}

}  // namespace

struct GlooCommunicator::Impl {
  Impl(GlooCommunicator& self, Store& store);

  void execute(const Call& c, uint64_t call_no, Clock::time_point deadline);
  void all_reduce(const Call& c, uint64_t call_no, Clock::time_point deadline);
  void p2p(const Call& c, Clock::time_point deadline);
  std::string describe(const std::string& what, Millis timeout, Clock::duration ran, std::exception_ptr e);
  // After a failed call: closes every connection, so that no receive still posted can write
  // into a tensor the call no longer holds, then drops the call's pending transfers.
  void abandon() noexcept;

  const int rank, world;
  const CommOptions opts;
  std::unique_ptr<PeerLiveness> liveness;
  std::shared_ptr<gloo::Context> ctx;
  std::unique_ptr<GlooP2P> transport;
  uint64_t calls = 0;                            // collective calls issued (their slots and tags)
  std::vector<uint64_t> sent_to, received_from;  // point-to-point transfers issued, per peer
  std::unique_ptr<WorkQueue> queue;              // last: its thread uses everything above
};

GlooCommunicator::Impl::Impl(GlooCommunicator& self, Store& store)
    : rank(self.rank()), world(self.world_size()), opts(self.options()), sent_to(size_t(world)),
      received_from(size_t(world)) {
  // Gloo writes its sockets without MSG_NOSIGNAL: a write to a peer that has just exited
  // would kill this process with SIGPIPE (seen in gloo_communicator_fault_test: a rank still
  // sending, in Note [Aborting waits on a lost peer]'s grace, after its neighbours exited)
  // instead of failing the call with EPIPE and naming the lost rank. So SIGPIPE is ignored
  // unless the program handles it itself, as network servers do.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  const std::string host = listen_host(opts);
  liveness = std::make_unique<PeerLiveness>(store, opts.prefix, rank, world, host, opts.timeout);
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto c = std::make_shared<gloo::rendezvous::Context>(rank, world);
    c->setTimeout(opts.timeout);
    GlooStore gs(store, opts.prefix, opts.timeout);
    c->connectFullMesh(gs, device);
    ctx = std::move(c);
  } catch (const gloo::Exception& e) {
    RT_FAIL("rank ", rank, " of ", world, ": Gloo could not connect to its peers from ", host, ": ", e.what(),
            ". Check that every rank runs and that ", host, " is reachable from the other machines (or set ",
            "CommOptions::host to the interface they can reach)");
  }
  auto aborter = std::make_shared<WaitAborter>();
  transport = std::make_unique<GlooP2P>(ctx, aborter);
  liveness->on_loss([aborter] { aborter->peer_lost(); });
  liveness->on_stacks_request([](int from) { flight::answer_stacks_request(from); });
  queue = std::make_unique<WorkQueue>([this](const std::string& what, Millis timeout, Clock::duration ran,
                                             std::exception_ptr e) { return describe(what, timeout, ran, e); });
}

std::string GlooCommunicator::Impl::describe(const std::string& what, Millis timeout, Clock::duration ran,
                                             std::exception_ptr e) {
  int peer = -1;
  bool sending = false;
  std::string cause;
  try {
    std::rethrow_exception(e);
  } catch (const PeerFailure& f) {
    peer = f.peer;
    sending = f.sending;
    cause = f.what();
  } catch (const std::exception& x) {
    cause = x.what();
  }
  // An I/O error (not a timeout) is most often a peer that died: give the liveness links a
  // moment to see its other sockets close.
  const bool timeout_hit = timed_out(cause, ran, timeout);
  // Note [Stacks of a rank without ringtape's launcher] in distributed/stack_dump.h
  if (timeout_hit) liveness->ask_for_stacks();
  const std::string lost = liveness->describe_lost(timeout_hit ? Millis(0) : Millis(250));
  std::string why;
  if (!lost.empty()) {
    why = "lost " + lost + "; Gloo reported: " + cause;
  } else if (const std::string silent = timeout_hit ? liveness->describe_silent() : ""; !silent.empty()) {
    why = detail::cat("timed out (timeout ", net::seconds(timeout), ")",
                      peer >= 0 ? detail::cat(" waiting for rank ", peer, sending ? " to receive" : " to send") : "",
                      "; not taking part: ", silent);
  } else if (timeout_hit) {
    why = detail::cat("timed out (timeout ", net::seconds(timeout), ")",
                      peer >= 0 ? detail::cat(" waiting for rank ", peer, sending ? " to receive" : " to send") : "",
                      ". Every peer's process is alive (their liveness links are open), so some rank did not take ",
                      "part: check that every rank issues the same calls in the same order, or raise the timeout");
  } else {
    why = (peer >= 0 ? detail::cat("rank ", peer, ": ") : std::string()) + cause;
  }
  return detail::cat("rank ", rank, " of ", world, ": ", what, " failed after ", net::seconds(ran), ": ", why,
                     ". This communicator is unusable from now on; restart the job");
}

void GlooCommunicator::Impl::abandon() noexcept {
  try {
    ctx->closeConnections();
    transport->begin_call(0, Clock::now());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: closing Gloo's connections after a failure: %s\n", rank, e.what());
  }
}

void GlooCommunicator::Impl::all_reduce(const Call& c, uint64_t call_no, Clock::time_point deadline) {
  const Tensor& t = c.a;
  const int64_t n = t.numel();
  if (n == 0 || world == 1) return;  // avg over one rank is the value itself
  void* data = t.raw_data();
  switch (c.algo) {
    case AllReduceAlgo::library: {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      if (t.dtype() == DType::f32) o.setOutput(static_cast<float*>(data), size_t(n));
      else o.setOutput(static_cast<double*>(data), size_t(n));
      o.setReduceFunction(gloo_reduction(c.op, t.dtype()));
      o.setTag(uint32_t(call_no));
      o.setTimeout(left(deadline));
      gloo::allreduce(o);
      if (c.op == ReduceOp::avg) scale_cpu(t.dtype(), n, data, 1.0 / world);
      return;
    }
    case AllReduceAlgo::ring:
      return ring_all_reduce(*transport, AlgoShape{rank, world, t.dtype(), n, opts.slice_bytes}, data, c.op);
    case AllReduceAlgo::tree:
      return tree_all_reduce(*transport, AlgoShape{rank, world, t.dtype(), n, opts.slice_bytes}, data, c.op);
  }
}

void GlooCommunicator::Impl::p2p(const Call& c, Clock::time_point deadline) {
  std::vector<Transfer> sends, recvs;
  // A pair's transfers are numbered on both sides, so the n-th send from a to b meets the
  // n-th recv on b from a (each side's own count is the slot).
  if (c.a.defined() && c.a.nbytes() > 0)
    sends.push_back({c.dst, c.a.raw_data(), c.a.nbytes(), uint32_t(sent_to[size_t(c.dst)]++)});
  if (c.b.defined() && c.b.nbytes() > 0)
    recvs.push_back({c.src, c.b.raw_data(), c.b.nbytes(), uint32_t(received_from[size_t(c.src)]++)});
  transport->begin_call(kP2PSlot, deadline);
  transport->start(sends, recvs);
  transport->finish();
}

void GlooCommunicator::Impl::execute(const Call& c, uint64_t call_no, Clock::time_point deadline) {
  transport->begin_call(kAlgoSlot | ((call_no & 0xFFFFFF) << 32), deadline);
  const uint32_t tag = uint32_t(call_no);
  switch (c.kind) {
    case Kind::all_reduce: return all_reduce(c, call_no, deadline);
    case Kind::broadcast: {
      if (c.a.nbytes() == 0 || world == 1) return;
      gloo::BroadcastOptions o(ctx);
      o.setOutput(static_cast<uint8_t*>(c.a.raw_data()), c.a.nbytes());
      o.setRoot(c.root);
      o.setTag(tag);
      o.setTimeout(left(deadline));
      return gloo::broadcast(o);
    }
    case Kind::all_gather: {
      if (c.b.nbytes() == 0) return;
      if (world == 1) {
        std::memcpy(c.a.raw_data(), c.b.raw_data(), c.b.nbytes());
        return;
      }
      gloo::AllgatherOptions o(ctx);
      o.setInput(static_cast<uint8_t*>(c.b.raw_data()), c.b.nbytes());
      o.setOutput(static_cast<uint8_t*>(c.a.raw_data()), c.a.nbytes());
      o.setTag(tag);
      o.setTimeout(left(deadline));
      return gloo::allgather(o);
    }
    case Kind::reduce_scatter: {
      const int64_t n = c.a.numel();
      if (n == 0) return;
      Tensor work = c.b.clone();  // the ring reduces in place
      ring_reduce_scatter(*transport, AlgoShape{rank, world, c.b.dtype(), n, opts.slice_bytes}, work.raw_data(), c.op);
      std::memcpy(c.a.raw_data(), static_cast<const char*>(work.raw_data()) + size_t(rank) * c.a.nbytes(),
                  c.a.nbytes());
      return;
    }
    case Kind::barrier: {
      if (world == 1) return;
      gloo::BarrierOptions o(ctx);
      o.setTag(tag);
      o.setTimeout(left(deadline));
      return gloo::barrier(o);
    }
    case Kind::p2p: return p2p(c, deadline);
  }
}

GlooCommunicator::GlooCommunicator(Store& store, int rank, int world, CommOptions opts)
    : Communicator(rank, world, Device::cpu(), std::move(opts)), impl_(std::make_unique<Impl>(*this, store)) {}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::check_reducible(DType t, const std::string& what) const {
  RT_CHECK(t == DType::f32 || t == DType::f64, what, ": the Gloo (CPU) backend reduces f32 and f64, not ",
           dtype_name(t), ": reduce a .to(DType::f32) copy (bf16/f16 are storage types on the CPU)");
}

Work GlooCommunicator::run(Call call) {
  Impl& m = *impl_;
  const uint64_t call_no = call.kind == Kind::p2p ? 0 : m.calls++;
  std::string what = call.what;
  const Millis timeout = call.timeout;
  return m.queue->submit(std::move(what), timeout, [&m, c = std::move(call), call_no](Clock::time_point deadline) {
    flight::started(c.flight);  // the queue's thread took it (Note [Flight recorder])
    try {
      m.execute(c, call_no, deadline);
    } catch (...) {
      flight::ended(c.flight, false);
      m.abandon();
      throw;
    }
    flight::ended(c.flight, true);
  });
}

}  // namespace rt::dist
