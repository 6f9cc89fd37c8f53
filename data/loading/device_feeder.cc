#include "data/loading/device_feeder.h"

#include "engine/ops.h"

namespace rt::data {

DeviceFeeder::DeviceFeeder(Loader& loader, Device device, MemoryFormat format, DType dtype)
    : loader_(loader), device_(device), format_(format), dtype_(dtype) {
  if (device.is_cuda()) {
    copy_stream_ = Stream::create(device);
    free_to_write_.emplace(device);
    copied_.emplace(device);
  }
}

DeviceFeeder::~DeviceFeeder() { retire(); }

void DeviceFeeder::retire() noexcept {
  try {
    if (held_) copied_->synchronize();
  } catch (...) {
    // A failed device leaves nothing to wait for; the batch is released either way.
  }
  held_.reset();
}

void DeviceFeeder::start_epoch(int64_t epoch, int64_t first_batch) {
  retire();
  loader_.start_epoch(epoch, first_batch);
}

std::optional<DeviceBatch> DeviceFeeder::next() {
  std::optional<Batch> b = loader_.next();
  if (!b) {
    retire();
    return std::nullopt;
  }
  DeviceBatch out;
  out.epoch = b->epoch;
  out.index = b->index;
  out.host_labels = b->labels;
  Tensor images = b->images, labels = b->labels;
  if (device_.is_cuda()) {
    // Note [Copy overlap]
    // The device buffers come from the caching allocator on the compute stream, where they
    // may reuse blocks whose last kernels are still queued; the copy stream waits for that
    // point before writing, and the compute stream waits for the copy before normalising.
    // Both waits are on the device.
    const Stream compute = Stream::current(device_);
    Tensor images_dev = Tensor::empty(images.shape(), images.dtype(), device_, images.format());
    Tensor labels_dev = Tensor::empty(labels.shape(), labels.dtype(), device_);
    free_to_write_->record(compute);
    free_to_write_->block(copy_stream_);
    retire();  // the previous copy is long done in practice: its host batch can go back
    if (images.is_pinned() && labels.is_pinned()) {
      copy_async(images_dev, images, copy_stream_);
      copy_async(labels_dev, labels, copy_stream_);
    } else {  // pageable memory: the copy completes before copy_ returns
      StreamGuard g(copy_stream_);
      images_dev.copy_(images);
      labels_dev.copy_(labels);
    }
    copied_->record(copy_stream_);
    copied_->block(compute);
    held_ = std::move(b);
    images = images_dev;
    labels = labels_dev;
  }
  out.labels = labels;
  if (images.dtype() == DType::u8) {
    const Batch& h = held_ ? *held_ : *b;
    out.input = normalize_pixels(images, h.norm.mean, h.norm.std, format_, dtype_);
  } else {
    out.input = images.to(format_).to(dtype_);
  }
  return out;
}

}  // namespace rt::data
