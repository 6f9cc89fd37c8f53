// cuBLAS for the ops that use it (linear, matmul): a checked call with file:line, and one
// handle per device, created once and shared.
#pragma once

#include <cublas_v2.h>

#include "engine/error.h"
#include "kernels/cuda/stream.cuh"

#define CUBLAS_CHECK(call)                                                                        \
  do {                                                                                            \
    cublasStatus_t rt_st_ = (call);                                                               \
    if (rt_st_ != CUBLAS_STATUS_SUCCESS)                                                          \
      RT_FAIL(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cublasGetStatusName(rt_st_), " (", \
              cublasGetStatusString(rt_st_), ")");                                                \
  } while (0)

namespace rt::cuda {

// The current device's handle (created on first use, with reduced-precision reductions off),
// bound to stream s.
cublasHandle_t blas_handle_for(cudaStream_t s);

}  // namespace rt::cuda
