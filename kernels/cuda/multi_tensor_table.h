// The device copy of a multi-tensor list (Note [Multi-tensor apply] in
// kernels/cuda/multi_tensor_plan.h): planned and uploaded when the list changes, reused as it
// is while it does not. One per list that a caller updates step after step (an optimizer's
// parameters of one dtype, the gradients a loss scaler checks). Readable by the host compiler.
//
// A list the same as the last one (pointers, sizes, scalar-set ids) costs a comparison: no
// plan, no upload. Uploads go through a pinned staging buffer (two, used in turn) and
// cudaMemcpyAsync on the caller's stream, so a change of the list costs no host
// synchronisation; the device table is rewritten in stream order after the launches that
// read it (an upload on another stream first waits for them: used_on), and launches on
// another stream than the upload's wait for it. Growing the device table frees the old one (cudaFree
// waits for the device): that happens on the first uploads only.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/multi_tensor_plan.h"
#include "kernels/cuda/stream.h"

namespace rt::cuda {

// What a kernel receives: the table's rows and chunk map in device memory.
struct MtaView {
  const MtaRow* rows = nullptr;            // [count]
  const int32_t* chunk_tensor = nullptr;   // [chunks]
  int64_t chunks = 0;
  int32_t count = 0;
};

class MultiTensorTable {
 public:
  MultiTensorTable() = default;
  ~MultiTensorTable();  // frees its memory; never throws
  // A copy starts empty (its first set() uploads), so that the objects holding a table
  // (an optimizer, a loss scaler) keep their value semantics.
  MultiTensorTable(const MultiTensorTable&) {}
  MultiTensorTable& operator=(const MultiTensorTable&) { return *this; }

  // Plans `rows` (plan_multi_tensor: ptr and n set, `set_id` per row) and makes the device
  // table hold them for work on `stream`, uploading only when they differ from the last
  // upload. On the current CUDA device.
  void set(std::vector<MtaRow> rows, const std::vector<int>& set_id, cudaStream_t stream);

  const std::vector<MtaRow>& rows() const { return rows_; }        // as planned
  const std::vector<MtaRange>& ranges() const { return ranges_; }  // one launch each
  int64_t chunks() const { return int64_t(chunk_tensor_.size()); }
  MtaView view() const;  // empty (count 0) when the list has no chunks
  // After the launches that read the table were enqueued on `stream`: a later upload (on
  // any stream) waits for them.
  void used_on(cudaStream_t stream);
  int64_t uploads() const { return uploads_; }  // how many times set() uploaded
  // Uploads by every table of the process: a CUDA graph's rehearsal that made none left
  // every table as a capture of the same work will find it (an upload is refused there).
  static int64_t total_uploads();

 private:
  // Whether `stream` must wait for the last upload (made on another stream) before reading.
  void wait_for_upload(cudaStream_t stream);

  std::vector<MtaRow> rows_;
  std::vector<int> set_id_;  // as given: with rows_' pointers and sizes, what the plan depends on
  std::vector<int32_t> chunk_tensor_;
  std::vector<MtaRange> ranges_;
  std::vector<unsigned char> image_, uploaded_;  // the table's bytes: being built, on the device
  void* device_ = nullptr;                       // the device table
  size_t device_bytes_ = 0;
  void* staging_[2] = {nullptr, nullptr};        // pinned; staging_[k] free once staged_[k] passed
  size_t staging_bytes_[2] = {0, 0};
  void* staged_[2] = {nullptr, nullptr};         // events after each staging buffer's copy
  bool staged_recorded_[2] = {false, false};
  int next_ = 0;
  // The stream of the last upload (cudaStreamGetId), whose copy staged_[next_ ^ 1] follows.
  unsigned long long upload_stream_ = 0;
  bool uploaded_once_ = false;
  // Streams other than upload_stream_ that already wait for the last upload: each waits once,
  // later work on it is ordered after that wait. So a stream that waited eagerly (a CUDA
  // graph's rehearsal) makes no wait on the uncaptured upload when it is captured, which
  // CUDA refuses (cudaErrorStreamCaptureIsolation).
  std::vector<unsigned long long> waited_;  // cudaStreamGetId's
  void* used_ = nullptr;  // event after the last launches that read the table
  bool used_recorded_ = false;
  int64_t uploads_ = 0;
};

}  // namespace rt::cuda
