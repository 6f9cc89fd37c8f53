// MultiTensorTable: the planned list's upload (kernels/cuda/multi_tensor_table.h).
#include <atomic>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/multi_tensor_table.h"

namespace rt::cuda {

namespace {
std::atomic<int64_t> all_uploads{0};  // MultiTensorTable::total_uploads
}  // namespace

int64_t MultiTensorTable::total_uploads() { return all_uploads.load(std::memory_order_relaxed); }

MultiTensorTable::~MultiTensorTable() {
  if (device_ != nullptr) CUDA_WARN(cudaFree(device_));  // waits for the launches that read it
  for (int k = 0; k < 2; ++k) {
    if (staged_[k] != nullptr) {
      if (staged_recorded_[k]) CUDA_WARN(cudaEventSynchronize(static_cast<cudaEvent_t>(staged_[k])));
      CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(staged_[k])));
    }
    if (staging_[k] != nullptr) CUDA_WARN(cudaFreeHost(staging_[k]));
  }
  if (used_ != nullptr) CUDA_WARN(cudaEventDestroy(static_cast<cudaEvent_t>(used_)));
}

void MultiTensorTable::wait_for_upload(cudaStream_t stream) {
  if (!uploaded_once_) return;
  unsigned long long id = 0;  // not the handle: a destroyed stream's handle may come back for a new one
  CUDA_CHECK(cudaStreamGetId(stream, &id));
  if (id == upload_stream_) return;
  for (unsigned long long w : waited_)
    if (w == id) return;
  CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(staged_[next_ ^ 1]), 0));
  waited_.push_back(id);
}

void MultiTensorTable::set(std::vector<MtaRow> rows, const std::vector<int>& set_id, cudaStream_t stream) {
  bool same = rows.size() == rows_.size() && set_id == set_id_;
  for (size_t i = 0; same && i < rows.size(); ++i)
    same = rows[i].n == rows_[i].n && std::memcmp(rows[i].ptr, rows_[i].ptr, sizeof(rows[i].ptr)) == 0;
  if (same) {  // the plan and the device table stand
    if (!chunk_tensor_.empty()) wait_for_upload(stream);
    return;
  }
  plan_multi_tensor(rows, set_id, chunk_tensor_, ranges_);
  rows_ = std::move(rows);
  set_id_ = set_id;
  const size_t row_bytes = rows_.size() * sizeof(MtaRow), map_bytes = chunk_tensor_.size() * sizeof(int32_t);
  image_.resize(row_bytes + map_bytes);
  if (row_bytes) std::memcpy(image_.data(), rows_.data(), row_bytes);
  if (map_bytes) std::memcpy(image_.data() + row_bytes, chunk_tensor_.data(), map_bytes);
  // Nothing to upload when the device holds this list already, or when no launch will read
  // it (no chunks: view() is then empty). So a list of empty tensors needs no GPU.
  if (chunk_tensor_.empty()) return;
  if (image_ == uploaded_) {
    wait_for_upload(stream);
    return;
  }

  const size_t bytes = image_.size();
  if (bytes > device_bytes_) {
    if (device_ != nullptr) CUDA_CHECK(cudaFree(device_));  // waits for every launch that read it
    device_ = nullptr;
    device_bytes_ = 0;
    uploaded_.clear();
    CUDA_CHECK(cudaMalloc(&device_, bytes));
    device_bytes_ = bytes;
  }
  const int k = next_;
  next_ ^= 1;
  if (staged_[k] == nullptr) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    staged_[k] = e;
  }
  // The copy of two uploads ago may still read this buffer (it normally finished long ago).
  if (staged_recorded_[k]) CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(staged_[k])));
  if (bytes > staging_bytes_[k]) {
    if (staging_[k] != nullptr) CUDA_CHECK(cudaFreeHost(staging_[k]));
    staging_[k] = nullptr;
    staging_bytes_[k] = 0;
    CUDA_CHECK(cudaHostAlloc(&staging_[k], bytes, cudaHostAllocPortable));
    staging_bytes_[k] = bytes;
  }
  std::memcpy(staging_[k], image_.data(), bytes);
  // Launches on another stream may still read the old table.
  if (used_recorded_) CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(used_), 0));
  CUDA_CHECK(cudaMemcpyAsync(device_, staging_[k], bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(staged_[k]), stream));
  staged_recorded_[k] = true;
  CUDA_CHECK(cudaStreamGetId(stream, &upload_stream_));
  uploaded_once_ = true;
  waited_.clear();
  uploaded_ = image_;
  ++uploads_;
  all_uploads.fetch_add(1, std::memory_order_relaxed);
}

MtaView MultiTensorTable::view() const {
  MtaView v;
  if (chunk_tensor_.empty()) return v;  // nothing uploaded for this list
  v.rows = static_cast<const MtaRow*>(device_);
  v.chunk_tensor = reinterpret_cast<const int32_t*>(static_cast<const unsigned char*>(device_) +
                                                    rows_.size() * sizeof(MtaRow));
  v.chunks = chunks();
  v.count = int32_t(rows_.size());
  return v;
}

void MultiTensorTable::used_on(cudaStream_t stream) {
  if (used_ == nullptr) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    used_ = e;
  }
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(used_), stream));
  used_recorded_ = true;
}

}  // namespace rt::cuda
