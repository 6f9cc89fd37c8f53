// Work: the handle of one communication call in flight (PyTorch's Work, NCCL-style). Every
// Communicator call returns one at once; the call itself runs on the backend's own thread
// (Gloo) or stream (NCCL), so the caller keeps computing.
//
// Note [Issue order]
// A communicator runs its calls one after another in the order they were issued (one queue,
// one thread; or one CUDA stream), so they also complete in that order: when work k is
// done, every work issued before k on the same communicator is done. After a failure (a
// timeout, a lost peer) the communicator is broken for good: later and pending calls fail
// with the first failure's message.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

namespace rt {
class Event;
class Stream;
}

namespace rt::dist {

// Note [Device timeline]
// On a GPU the host's clock says when a call was queued, not when it ran. A communicator made
// with CommOptions::timed_events records timed CUDA events around each call: `ready` on the
// caller's stream (the data the call reads was produced), `started` on the communication
// stream after it waited for `ready` and for the calls before it, `done` after the call.
// Their times, in milliseconds after a reference event the caller recorded earlier on its own
// stream, are what the reducer's timeline uses on GPUs.
struct DeviceTimes {
  double ready_ms = 0, started_ms = 0, done_ms = 0;
};

// What a backend implements behind a Work.
class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  // Blocks the host until the call completed; throws rt::Error (naming the operation, the
  // peer rank when known and the time it ran) when it failed or timed out.
  virtual void wait() = 0;
  // Whether the call has completed (successfully or not); never blocks, never throws.
  virtual bool done() = 0;
  // Makes `s` wait for the call's completion without blocking the host (CUDA: an event the
  // stream waits on). Where that is not possible (CPU) it is wait().
  virtual void block_stream(const Stream& s) = 0;
  // When the call finished (host steady clock), once done(); nullopt where the backend does
  // not know it (a CUDA call completes on the device). For timelines (the reducer's overlap).
  virtual std::optional<std::chrono::steady_clock::time_point> finished_at() { return std::nullopt; }
  // Note [Device timeline]; nullopt until the call completed, when it failed, and where the
  // backend records no timed events. Never blocks, never throws.
  virtual std::optional<DeviceTimes> device_times(const Event& /*reference*/) { return std::nullopt; }
};

class Work {
 public:
  Work() = default;  // nothing in flight: done, and wait() returns at once
  explicit Work(std::shared_ptr<WorkImpl> impl) : impl_(std::move(impl)) {}

  void wait() const {
    if (impl_) impl_->wait();
  }
  bool done() const { return !impl_ || impl_->done(); }
  void block_stream(const Stream& s) const {
    if (impl_) impl_->block_stream(s);
  }
  std::optional<std::chrono::steady_clock::time_point> finished_at() const {
    return impl_ ? impl_->finished_at() : std::nullopt;
  }
  std::optional<DeviceTimes> device_times(const Event& reference) const {
    return impl_ ? impl_->device_times(reference) : std::nullopt;
  }

 private:
  std::shared_ptr<WorkImpl> impl_;
};

}  // namespace rt::dist
