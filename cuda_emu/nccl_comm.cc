// A rank's communicator in the NCCL fake (nccl_comm.h).
//
// Note [Issue order in the fake]
// A communicator's operations run one at a time, in the order they were issued, whichever
// streams they were queued on: NCCL orders a communicator's kernels the same way, and the
// ranks' frames must follow one order on every connection. Each operation takes a ticket
// when issued; on its stream's worker it waits until the ticket before it has retired. An
// operation that never runs (a stream's sticky fault skips it, or queueing it failed)
// retires when its work is dropped, so the ones after it go on. A cycle (a stream that
// waits, through an event, for work queued after an operation of another stream) deadlocks
// on a GPU too; here it ends at the peer timeout with a message.
#include "cuda_emu/nccl_comm.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <cstdio>

#include "cuda_emu/nccl_bootstrap.h"
#include "cuda_emu/nccl_wire.h"

namespace rt::emu::nccl {

Comm::Comm(int n, int r, int dev, bool block)
    : nranks(n), rank(r), device(dev), blocking(block), sends_(size_t(n)), recvs_(size_t(n)) {}

Comm::~Comm() {
  stop_.set();
  join_threads();
}

void Comm::start_setup(const ncclUniqueId& id) {
  PeerInfo self{};
  read_id(id, &self);  // a bad id fails the call itself
  setup_thread_ = std::thread([this, id] { setup(id); });
}

void Comm::setup(ncclUniqueId id) {
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(nranks);
  try {
    const auto deadline = Clock::now() + peer_timeout();
    PeerInfo self{};
    read_id(id, &self);
    self.nranks = nranks;
    self.rank = rank;
    self.device = device;
    self.pid = int32_t(getpid());
    gethostname(self.host, sizeof self.host - 1);
    if (cudaDeviceGetPCIBusId(self.bus_id, sizeof self.bus_id, device) != cudaSuccess)
      throw Error(ncclUnhandledCudaError, "cudaDeviceGetPCIBusId(" + std::to_string(device) + ") failed");
    Fd listener = listen_loopback(&self.port);
    const std::vector<PeerInfo> all = exchange_info(id, self, deadline, stop_);
    check_devices(all);
    std::vector<Fd> conns = connect_mesh(all, rank, listener, deadline, stop_);
    {
      std::lock_guard<std::mutex> g(mu_);
      if (aborted_ || error_ != ncclSuccess) return;
      conns_ = std::move(conns);
      phase_ = Phase::ready;
    }
    cv_.notify_all();
    info(me + " on cuda:" + std::to_string(device) + " (" + self.bus_id + ") is connected");
  } catch (const Error& e) {
    fail(Error(e.code, me + " (cuda:" + std::to_string(device) + "): ncclCommInitRank failed: " + e.what()));
  } catch (const std::exception& e) {
    fail(Error(ncclInternalError, me + ": ncclCommInitRank failed: " + e.what()));
  }
}

void Comm::join_threads() {
  for (std::thread* t : {&setup_thread_, &finalize_thread_})
    if (t->joinable() && t->get_id() != std::this_thread::get_id()) t->join();
}

ncclResult_t Comm::state() const {
  std::lock_guard<std::mutex> g(mu_);
  if (error_ != ncclSuccess) return error_;
  return phase_ == Phase::setup || phase_ == Phase::finalizing ? ncclInProgress : ncclSuccess;
}

std::string Comm::message() const {
  std::lock_guard<std::mutex> g(mu_);
  return message_;
}

void Comm::check_usable(const char* api) const {
  std::lock_guard<std::mutex> g(mu_);
  if (error_ != ncclSuccess)
    throw Error(error_, std::string(api) + " on a communicator that failed earlier: " + message_);
  switch (phase_) {
    case Phase::setup:
      throw Error(ncclInvalidArgument,
                  std::string(api) + ": Attempt to use communicator before the previous operation returned "
                                     "ncclSuccess (its non-blocking setup is still in progress: wait until "
                                     "ncclCommGetAsyncError reports ncclSuccess)");
    case Phase::ready: return;
    default:
      throw Error(ncclInvalidArgument, std::string(api) + " on a communicator after ncclCommFinalize");
  }
}

void Comm::fail(const Error& e) {
  bool first = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (error_ == ncclSuccess && !aborted_) {
      error_ = e.code;
      message_ = e.what();
      first = true;
    }
    for (Fd& c : conns_)  // the peers see it at once (Note [A failed communicator])
      if (c) shutdown(c.get(), SHUT_RDWR);
  }
  stop_.set();
  cv_.notify_all();
  if (first) warn(e.what());
}

bool Comm::failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_ != ncclSuccess;
}

void Comm::hold(const std::string& what) {
  std::unique_lock<std::mutex> lk(mu_);
  auto released = [&] { return aborted_ || phase_ == Phase::closed; };
  if (error_ == ncclSuccess || released()) return;
  if (cv_.wait_for(lk, peer_timeout(), released)) return;
  const std::string why = message_;
  lk.unlock();
  std::fprintf(stderr, "nccl-emu: rank %d: %s waited %s after its communicator failed, for an ncclCommAbort that "
               "never came, and ends now (a real NCCL would wait for ever). The failure: %s\n",
               rank, what.c_str(), timeout_text().c_str(), why.c_str());
  std::fflush(stderr);
}

uint64_t Comm::issue_ticket() {
  std::lock_guard<std::mutex> g(mu_);
  return issued_++;
}

uint64_t Comm::next_collective() {
  std::lock_guard<std::mutex> g(mu_);
  return ++collectives_;
}

uint64_t Comm::next_send(int peer) {
  std::lock_guard<std::mutex> g(mu_);
  return ++sends_[size_t(peer)];
}

uint64_t Comm::next_recv(int peer) {
  std::lock_guard<std::mutex> g(mu_);
  return ++recvs_[size_t(peer)];
}

bool Comm::begin(uint64_t ticket, const std::string& what) {
  std::unique_lock<std::mutex> lk(mu_);
  auto usable = [&] { return error_ == ncclSuccess && !aborted_ && phase_ != Phase::closed; };
  // Waits until the ticket before this one has retired (Note [Issue order in the fake]).
  if (!cv_.wait_for(lk, peer_timeout(), [&] { return turn_ == ticket || !usable(); })) {
    lk.unlock();
    fail(Error(ncclInvalidUsage,
               "rank " + std::to_string(rank) + ": " + what + " waited " + timeout_text() +
                   " for the operations issued before it on this communicator, which are queued on other streams: "
                   "a stream waits (through an event) for work queued after one of them, a cycle that deadlocks "
                   "on a GPU too"));
    return false;
  }
  if (!usable()) return false;
  ++running_;
  return true;
}

void Comm::end() {
  {
    std::lock_guard<std::mutex> g(mu_);
    --running_;
  }
  cv_.notify_all();
}

void Comm::retire(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> g(mu_);
    retired_.insert(ticket);
    while (retired_.erase(turn_)) ++turn_;
  }
  cv_.notify_all();
}

ncclResult_t Comm::finalize() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (error_ != ncclSuccess) return error_;
    if (phase_ != Phase::ready) {
      warn("ncclCommFinalize: the communicator is " +
           std::string(phase_ == Phase::setup ? "still being set up" : "already finalized"));
      return ncclInvalidUsage;
    }
    phase_ = Phase::finalizing;
  }
  if (!blocking) {
    finalize_thread_ = std::thread([this] { do_finalize(); });
    return ncclInProgress;
  }
  do_finalize();
  return state();
}

void Comm::do_finalize() {
  uint64_t collectives;
  {
    std::unique_lock<std::mutex> lk(mu_);
    const bool idle = cv_.wait_for(lk, peer_timeout(), [&] { return turn_ == issued_ || error_ || aborted_; });
    if (!idle) {
      const uint64_t left = issued_ - turn_;
      lk.unlock();
      fail(Error(ncclRemoteError, "rank " + std::to_string(rank) + ": ncclCommFinalize waited " + timeout_text() +
                                      " for " + std::to_string(left) +
                                      " operations still in flight; their peers did not take part"));
      return;
    }
    if (error_ != ncclSuccess || aborted_) return;
    collectives = collectives_;
  }
  // The ranks are idle: nothing else reads or writes the connections now.
  say_goodbye(conns_, rank, collectives, Clock::now() + std::chrono::seconds(5));
  {
    std::lock_guard<std::mutex> g(mu_);
    if (phase_ == Phase::finalizing) phase_ = Phase::finalized;
  }
  cv_.notify_all();
}

void Comm::destroy() {
  join_threads();  // a setup or a finalize in progress ends first (each is bounded)
  bool implicit_finalize;
  {
    std::lock_guard<std::mutex> g(mu_);
    implicit_finalize = phase_ == Phase::ready && error_ == ncclSuccess;
    if (implicit_finalize) phase_ = Phase::finalizing;
  }
  if (implicit_finalize) do_finalize();
  close_connections();
}

void Comm::abort() {
  {
    std::lock_guard<std::mutex> g(mu_);
    aborted_ = true;
    for (Fd& c : conns_)
      if (c) shutdown(c.get(), SHUT_RDWR);
  }
  stop_.set();
  cv_.notify_all();
  join_threads();  // each ends at once: its waits watch stop_
  close_connections();
}

void Comm::close_connections() {
  std::unique_lock<std::mutex> lk(mu_);
  // An operation still inside exchange() leaves at once (failed, aborted) or is already
  // done (idle): wait for it before its descriptors go.
  if (!cv_.wait_for(lk, peer_timeout(), [&] { return running_ == 0; })) return;  // leave them open, not reused
  phase_ = Phase::closed;
  for (Fd& c : conns_) {
    if (!c) continue;
    drain(c.get());  // unread bytes (a peer's goodbye) would turn the close into a reset
    c.reset();
  }
  lk.unlock();
  cv_.notify_all();  // operations held after a failure end now
}

}  // namespace rt::emu::nccl
