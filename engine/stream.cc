#include "engine/stream.h"

#include <map>

#include "base/error.h"
#include "kernels/cuda/runtime.h"

namespace rt {
namespace {
// Per thread: the current stream of each CUDA device (absent = the legacy default stream).
thread_local std::map<int, Stream> t_current;
}  // namespace

Stream Stream::create(Device d, bool high_priority) {
  Stream s;
  s.device_ = d;
  if (d.is_cuda()) {
    allocator_for(d);  // validates the index with a clear message
    s.handle_ = std::shared_ptr<void>(cuda::stream_create(d.index, high_priority),
                                      [](void* h) { cuda::stream_destroy(h); });
  }
  return s;
}

Stream Stream::current(Device d) {
  if (d.is_cuda()) {
    auto it = t_current.find(d.index);
    if (it != t_current.end()) return it->second;
  }
  Stream s;
  s.device_ = d;
  return s;
}

void Stream::set_current(const Stream& s) {
  if (s.device_.is_cuda()) t_current[s.device_.index] = s;
}

void Stream::synchronize() const {
  if (device_.is_cuda()) cuda::stream_synchronize(device_.index, handle());
}

Event::Event(Device d) : device_(d) {
  if (d.is_cuda()) handle_ = std::shared_ptr<void>(cuda::event_create(d.index), [](void* h) { cuda::event_destroy(h); });
}
void Event::record(const Stream& s) {
  RT_CHECK(s.device() == device_, "Event::record: event on ", device_.str(), ", stream on ", s.device().str());
  if (handle_) cuda::event_record(handle_.get(), s.handle());
}
void Event::block(const Stream& s) const {
  if (handle_ && s.device().is_cuda()) cuda::stream_wait_event(s.handle(), handle_.get());
}
void Event::synchronize() const {
  if (handle_) cuda::event_synchronize(handle_.get());
}
bool Event::query() const { return !handle_ || cuda::event_query(handle_.get()); }
float Event::elapsed_ms(const Event& end) const {
  RT_CHECK(handle_ && end.handle_, "Event::elapsed_ms needs two CUDA events");
  return cuda::event_elapsed_ms(handle_.get(), end.handle_.get());
}

}  // namespace rt
