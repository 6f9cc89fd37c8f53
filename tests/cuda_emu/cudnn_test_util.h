// What the cuDNN fake's graph-level tests share (cudnn_attr_test, cudnn_graph_test,
// cudnn_fusion_test): the last error's text, a status check that also names the message, and
// the steps from a finalized operation graph to a plan and a variant pack, as kernels/cuda
// takes them. For --config=cuda-emu builds only (the tests include it under RINGTAPE_CUDA_EMU).
#pragma once

#include <cudnn.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernels/cuda/cudnn_backend.cuh"

namespace cudnn_test {

using rt::cuda::detail::Desc;

inline std::string last_error() {
  char buf[1024];
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

// `call` returns `want`, and the last error message contains `part`.
#define EXPECT_STATUS(call, want, part)                                                                             \
  do {                                                                                                              \
    const cudnnStatus_t got_ = (call);                                                                              \
    const std::string msg_ = ::cudnn_test::last_error();                                                            \
    CHECK_MESSAGE(got_ == (want), #call, ": got ", cudnnGetErrorString(got_), ", want ", cudnnGetErrorString(want), \
                  " (", msg_, ")");                                                                                 \
    CHECK_MESSAGE(msg_.find(part) != std::string::npos, #call, ": '", part, "' not in '", msg_, "'");              \
  } while (0)

// The engine configs heuristics offer for `graph` in `mode`, in their order.
inline std::vector<Desc> heuristics(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, mode);
  heur.finalize();
  int64_t n = 0;
  CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                       nullptr));
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  if (n > 0)
    CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n,
                                         &n, raw.data()));
  return cfgs;
}

inline cudnnStatus_t try_plan(const Desc& cfg, cudnnHandle_t h, Desc* plan) {
  *plan = Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, h).set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  return plan->try_finalize();
}

// The plan of the first config heuristics offer in `mode` that finalizes.
inline Desc first_plan(const Desc& graph, cudnnHandle_t h, cudnnBackendHeurMode_t mode) {
  for (const Desc& cfg : heuristics(graph, mode)) {
    Desc plan;
    if (try_plan(cfg, h, &plan) == CUDNN_STATUS_SUCCESS) return plan;
  }
  FAIL("no plan finalizes");
  return Desc();
}

inline int64_t workspace_of(const Desc& plan) {
  int64_t n = 0, ws = -1;
  CUDNN_CHECK(
      cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws));
  return ws;
}

inline Desc pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* ws) {
  Desc p(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  p.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, ws);
  p.finalize();
  return p;
}

}  // namespace cudnn_test
