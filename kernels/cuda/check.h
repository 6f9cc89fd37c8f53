// Checked CUDA calls: CUDA_CHECK(cudaMalloc(...)) throws rt::Error with file:line, the
// call and the driver's message. CUDA_CHECK_LAUNCH() after every kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "base/error.h"

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t rt_err_ = (call);                                                          \
    if (rt_err_ != cudaSuccess)                                                            \
      RT_FAIL(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cudaGetErrorName(rt_err_), \
              " (", cudaGetErrorString(rt_err_), ")");                                     \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// For destructors and other noexcept paths: report, never throw.
#define CUDA_WARN(call)                                                                          \
  do {                                                                                           \
    cudaError_t rt_err_ = (call);                                                                \
    if (rt_err_ != cudaSuccess)                                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(rt_err_)); \
  } while (0)
