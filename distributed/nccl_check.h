// Checked NCCL calls: NCCL_CHECK(ncclAllReduce(...)) throws rt::Error with file:line, the
// call, NCCL's name for the result and its last error message (what NCCL_DEBUG=WARN would
// print). ncclInProgress passes: a non-blocking communicator (distributed/nccl_communicator.cc)
// returns it for work still being set up, and the caller waits for it with
// ncclCommGetAsyncError. NCCL_WARN is for destructors and other paths that must not throw.
#pragma once

#include <nccl.h>

#include <cstdio>

#include "base/error.h"

#define NCCL_CHECK(call)                                                                      \
  do {                                                                                        \
    ncclResult_t rt_nccl_ = (call);                                                           \
    if (rt_nccl_ != ncclSuccess && rt_nccl_ != ncclInProgress)                                \
      RT_FAIL(__FILE__, ":", __LINE__, ": ", #call, " failed: ", ncclGetErrorString(rt_nccl_), \
              " (", ncclGetLastError(nullptr), "); NCCL_DEBUG=INFO shows more");               \
  } while (0)

#define NCCL_WARN(call)                                                                            \
  do {                                                                                             \
    ncclResult_t rt_nccl_ = (call);                                                                \
    if (rt_nccl_ != ncclSuccess && rt_nccl_ != ncclInProgress)                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(rt_nccl_)); \
  } while (0)
