// GPU activity for the profiler: CUPTI's activity records of every kernel, copy and
// memset (cuDNN's, cuBLAS's and NCCL's own kernels included), with their stream and
// device timestamps, linked to the op that launched them (Note [GPU correlation] in
// engine/profiler.h). Only constructed when the profiled device is a GPU.
//
// Note [CUPTI timestamps]
// CUPTI stamps records with its own nanosecond clock (cuptiGetTimestamp); the tracer reads
// both clocks back to back at start and shifts the records onto the profiler's steady
// clock, so GPU slices line up with host slices to within the microsecond or so the two
// reads take.
#pragma once

#include <memory>
#include <vector>

#include "engine/profiler.h"

namespace rt::prof {

class CuptiTracer final : public OpHooks {
 public:
  CuptiTracer();  // enables the activity kinds; throws rt::Error naming CUPTI's error
  ~CuptiTracer() override;
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  void op_begin(uint64_t id) override;  // pushes the op's id as the external correlation id
  void op_end(uint64_t id) override;

  // Flushes CUPTI's buffers (waits for the GPU's records) and returns the records since
  // construction as events (kernel, memcpy, memset; `id` = the launching op's id or 0).
  std::vector<Event> finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rt::prof
