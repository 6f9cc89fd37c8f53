// Streams and events: the ordering primitives of asynchronous devices. On the CPU every
// op completes before it returns, so streams and events are trivial there; on CUDA they
// wrap cudaStream_t / cudaEvent_t. Ops take the device's current stream, so a later
// communication stream can run beside the compute stream.
#pragma once

#include <memory>

#include "engine/device.h"

namespace rt {

class Stream {
 public:
  Stream() = default;
  // A new stream on `d` (CUDA: a non-blocking cudaStream_t; CPU: trivial).
  // `high_priority` (CUDA): the device's greatest stream priority (cuda::stream_create).
  static Stream create(Device d, bool high_priority = false);
  // The stream ops on `d` run on in this thread (the device's default stream unless set).
  static Stream current(Device d);
  static void set_current(const Stream& s);

  Device device() const { return device_; }
  // cudaStream_t on CUDA, nullptr on the CPU (and for CUDA's legacy default stream).
  void* handle() const { return handle_ ? handle_.get() : nullptr; }
  void synchronize() const;

 private:
  Device device_;
  std::shared_ptr<void> handle_;
};

class Event {
 public:
  explicit Event(Device d);
  void record(const Stream& s);
  void block(const Stream& s) const;  // make `s` wait for this event (no host wait)
  void synchronize() const;           // host waits for this event
  bool query() const;                 // whether the work before it has completed (CPU: true); never waits
  float elapsed_ms(const Event& end) const;  // CUDA only; both recorded and complete
  void* handle() const { return handle_.get(); }  // cudaEvent_t on CUDA, nullptr on the CPU

 private:
  Device device_;
  std::shared_ptr<void> handle_;
};

// Sets the current stream for the scope, restores the previous one after.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s) : prev_(Stream::current(s.device())) { Stream::set_current(s); }
  ~StreamGuard() { Stream::set_current(prev_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

}  // namespace rt
