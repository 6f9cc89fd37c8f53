// DeviceFeeder: a Loader's batches as model inputs on the training device.
//
//   DeviceFeeder feed(loader, device, MemoryFormat::channels_last);
//   feed.start_epoch(epoch, first_batch);
//   while (auto b = feed.next()) loss = cross_entropy(model.forward(b->input), b->labels);
//
// u8 batches are normalised on the device by normalize_pixels, the first kernel of the
// step. On a GPU the loader builds batches in page-locked memory (LoaderOptions::pin_memory)
// and next() queues their copy on a dedicated copy stream; the compute stream waits for it
// with an event, not the host. Because the host queues work ahead of the GPU, the copy of
// batch k runs while the GPU still computes step k - 1 (Note [Copy overlap]).
#pragma once

#include <cstdint>
#include <optional>

#include "data/loading/loader.h"
#include "engine/stream.h"
#include "engine/tensor.h"

namespace rt::data {

struct DeviceBatch {
  Tensor input;        // (N, C, H, W) normalised, dtype and memory format as asked, on the device
  Tensor labels;       // (N) i64 on the device
  Tensor host_labels;  // (N) i64 on the CPU (accuracy counting without a device read)
  int64_t epoch = 0, index = 0;
};

class DeviceFeeder {
 public:
  // `loader` must outlive the feeder. On CUDA the loader should pin its batches
  // (otherwise each copy waits for completion on the host).
  DeviceFeeder(Loader& loader, Device device, MemoryFormat format, DType dtype = DType::f32);
  ~DeviceFeeder();  // waits for a copy still reading a host batch; never throws

  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  std::optional<DeviceBatch> next();
  Loader& loader() { return loader_; }

 private:
  void retire() noexcept;  // waits for the last copy, then releases its host batch

  Loader& loader_;
  Device device_;
  MemoryFormat format_;
  DType dtype_;
  Stream copy_stream_;
  // CUDA only, created once and recorded again every step: the compute stream's point
  // after which the copy may write, and the end of the copy.
  std::optional<Event> free_to_write_, copied_;
  // The host batch of the last copy: kept until the copy is done, because its page-locked
  // block goes back to the cache for a worker to refill.
  std::optional<Batch> held_;
};

}  // namespace rt::data
