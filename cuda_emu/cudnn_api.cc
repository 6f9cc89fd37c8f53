// The C API of the cuDNN fake (--config=cuda-emu): handles (cudnnCreate, cudnnDestroy,
// cudnnSetStream, cudnnGetStream) and the backend API (create, destroy, set, get, finalize,
// execute). cudnn.h declares the functions, so they have C linkage and NVIDIA's signatures.
//
// Note [Execution]
// cudnnBackendExecute checks the call (handle, plan, variant pack, every tensor's pointer and
// alignment, the workspace) and queues the convolution, with its fused parts
// (Note [Fused graphs the fake runs] in cudnn_finalize.cc), on the handle's stream with
// rt::emu::enqueue; device memory is touched only there, on the stream's worker. Its uses
// cover exactly the bytes each tensor's dims and strides reach (reads of the inputs, a write
// of the output, or read-write when beta != 0) and a write of the plan's whole workspace,
// which the engine fills: a buffer past its allocation, one freed, on another device, never
// written, or raced from another stream is reported by the emulator.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "cuda_emu/cudnn_attrs.h"
#include "cuda_emu/cudnn_conv.h"
#include "cuda_emu/cudnn_finalize.h"
#include "cuda_emu/cudnn_fusion.h"
#include "cuda_emu/cudnn_status.h"
#include "cuda_emu/emu.h"

// What a cudnnHandle_t points at (cudnn_graph.h only declares it).
struct cudnnContext {
  int device = 0;
  cudaStream_t stream = nullptr;
};

namespace rt::emu::cudnn {
namespace {

struct Handles {
  std::mutex mu;
  std::unordered_set<cudnnContext*> live;
};

Handles& handles() {
  static auto* h = new Handles();  // leaked, like the engine's handles (Note [Leaked handles])
  return *h;
}

std::atomic<uint64_t> g_executions{0};

// A descriptor argument of cudnnBackendExecute: live, of `type`, finalized.
cudnnStatus_t execute_arg(cudnnBackendDescriptor_t p, cudnnBackendDescriptorType_t type, const char* what,
                          const Descriptor** out) {
  const char* where = "cudnnBackendExecute";
  if (!p) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, std::string(what) + " is null");
  const Descriptor* d = find_descriptor(p);
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, where, std::string(what) + " is not a live descriptor");
  if (d->type != type)
    return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, where,
                std::string(what) + " must be a " + desc_type_name(type) + ", got a " + desc_type_name(d->type));
  if (!d->node)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, where, std::string(what) + " is not finalized");
  *out = d;
  return CUDNN_STATUS_SUCCESS;
}

// The plan's device against the handle's, and the handle's stream against both.
cudnnStatus_t check_execute_device(const HandleInfo& h, const PlanInfo& plan) {
  const char* where = "cudnnBackendExecute";
  if (plan.device != h.device)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                "the plan was built with a handle of cuda:" + std::to_string(plan.device) +
                    " and is executed with one of cuda:" + std::to_string(h.device));
  const int sd = rt::emu::stream_device(h.stream);
  if (sd < 0) return fail(CUDNN_STATUS_BAD_PARAM, where, "the handle's stream was destroyed; cudnnSetStream another");
  if (sd != h.device)
    return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, where,
                "the handle belongs to cuda:" + std::to_string(h.device) + " but its stream" +
                    (h.stream ? "" : " (the legacy default stream of the current device)") + " is on cuda:" +
                    std::to_string(sd) + "; cudaSetDevice(" + std::to_string(h.device) + ") first");
  return CUDNN_STATUS_SUCCESS;
}

// Which slot the operation writes (Note [Execution]): y forward, x backward data, w backward filter.
int written_slot(const ConvProblem& p) { return p.op == ConvOp::forward ? 2 : p.op == ConvOp::backward_data ? 0 : 1; }

// The device memory an execution touches: ptrs[i] for the i-th real tensor of the graph (the
// convolution's x, w, y slots, then the prologue's scale and bias, then genstats' sum and
// sqsum), uses[i] its range and access, then the workspace's range when the plan has one.
struct Bound {
  std::vector<void*> ptrs;
  std::vector<rt::emu::MemUse> uses;
};

// Finds every real tensor of the graph in the variant pack, X in place of a prologue's
// virtual x (Note [Fused graphs the fake runs]), and checks its pointer: present, not null,
// aligned as its descriptor promises; then the workspace.
cudnnStatus_t bind_pack(const PlanInfo& plan, const PackInfo& pack, Bound* out) {
  const char* where = "cudnnBackendExecute";
  const GraphInfo& graph = plan.graph();
  const OpInfo& op = graph.op->as<OpInfo>();
  const Fusion& fusion = graph.fusion;
  const ConvProblem& p = graph.conv.p;
  const char* slot_names[3][3] = {{"x", "w", "y"}, {"dx", "w", "dy"}, {"x", "dw", "dy"}};
  const int written = written_slot(p);
  const auto conv_out = op.beta != 0.0 ? rt::emu::MemUse::read_write : rt::emu::MemUse::write;
  struct Binding {
    std::string name;
    NodePtr tensor;
    rt::emu::MemUse::Access access;
  };
  std::vector<Binding> binds;
  for (int i = 0; i < 3; ++i) {
    const NodePtr& t = i == 0 && fusion.prologue() ? fusion.x : i == 0 ? op.x : i == 1 ? op.w : op.y;
    binds.push_back({slot_names[int(p.op)][i], t, i == written ? conv_out : rt::emu::MemUse::read});
  }
  if (fusion.prologue()) {
    binds.push_back({"the prologue's scale", fusion.scale, rt::emu::MemUse::read});
    binds.push_back({"the prologue's bias", fusion.bias, rt::emu::MemUse::read});
  }
  if (fusion.genstats()) {
    binds.push_back({"genstats' sum", fusion.sum, rt::emu::MemUse::write});
    binds.push_back({"genstats' sqsum", fusion.sqsum, rt::emu::MemUse::write});
  }
  for (const Binding& b : binds) {
    const TensorInfo& t = b.tensor->as<TensorInfo>();
    const std::string name = b.name + " (unique id " + std::to_string(t.uid) + ")";
    const auto it = std::find(pack.uids.begin(), pack.uids.end(), t.uid);
    if (it == pack.uids.end())
      return fail(CUDNN_STATUS_BAD_PARAM, where,
                  "the variant pack has no pointer for " + name + "; add its unique id and pointer");
    void* ptr = pack.ptrs[size_t(it - pack.uids.begin())];
    if (!ptr)
      return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "the variant pack's pointer for " + name + " is null");
    if (reinterpret_cast<uintptr_t>(ptr) % uint64_t(t.alignment) != 0)
      return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, where,
                  "the pointer for " + name + " is not aligned to the " + std::to_string(t.alignment) +
                      " bytes its descriptor's CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT promises");
    out->ptrs.push_back(ptr);
    const size_t bytes =
        size_t(extent_elements(t.dims.data(), t.strides.data(), int(t.dims.size()))) * dtype_size(t.dtype);
    out->uses.push_back({ptr, bytes, b.access});
  }
  const size_t ws_bytes = size_t(plan.workspace);
  if (ws_bytes > 0 && !pack.workspace)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where,
                "the plan needs " + std::to_string(ws_bytes) +
                    " bytes of workspace (CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) and the variant pack has none");
  if (ws_bytes > 0) out->uses.push_back({pack.workspace, ws_bytes, rt::emu::MemUse::write});
  return CUDNN_STATUS_SUCCESS;
}

// The kernel lab's view (emu.h): 2 FLOPs per multiply-add of the direct convolution, in
// each of the three directions; each operand read once, the output written once (and
// read when beta != 0); bounded by the tensor cores of the storage type (f32: TF32 when
// the engine rounds its inputs so, else the CUDA cores). A fused graph adds only its
// per-channel tensors: the prologue is applied as x is loaded and the statistics taken as
// y is stored, which is the fusion's point (no extra pass over the activations).
rt::emu::LibraryCost conv_cost(const GraphInfo& graph, const Numerics& num, const Bound& bound) {
  const ConvProblem& p = graph.conv.p;
  rt::emu::LibraryCost cost;
  cost.api = "cudnnBackendExecute";
  cost.shape = p.str();
  cost.flops = 2.0 * double(p.N) * double(p.O) * double(p.HO) * double(p.WO) * double(p.C / p.groups) * double(p.KH) *
               double(p.KW);
  const double esz = double(dtype_size(p.dtype));
  const double x_bytes = double(p.N * p.C * p.H * p.W) * esz,
               w_bytes = double(p.O * (p.C / p.groups) * p.KH * p.KW) * esz,
               y_bytes = double(p.N * p.O * p.HO * p.WO) * esz;
  const int written = written_slot(p);
  const double out_bytes = written == 2 ? y_bytes : written == 0 ? x_bytes : w_bytes;
  cost.min_bytes = x_bytes + w_bytes + y_bytes + (graph.op->as<OpInfo>().beta != 0 ? out_bytes : 0.0);
  for (size_t i = 3; i < bound.ptrs.size(); ++i)
    cost.min_bytes += double(bound.uses[i].bytes);  // scale, bias, sum, sqsum
  cost.math = p.dtype == CUDNN_DATA_BFLOAT16       ? "bf16"
              : p.dtype == CUDNN_DATA_HALF         ? "f16"
              : p.dtype == CUDNN_DATA_DOUBLE       ? "f64"
              : num.input == Numerics::Input::tf32 ? "tf32"
                                                   : "f32";
  return cost;
}

}  // namespace

bool handle_info(cudnnHandle_t h, HandleInfo* out) {
  Handles& hs = handles();
  std::lock_guard<std::mutex> g(hs.mu);
  if (!hs.live.count(h)) return false;
  out->device = h->device;
  out->stream = h->stream;
  return true;
}

}  // namespace rt::emu::cudnn

using namespace rt::emu::cudnn;

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  const char* where = "cudnnCreate";
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "handle is null");
  if (const std::string e = engine_list_error(); !e.empty()) return fail(CUDNN_STATUS_BAD_PARAM, where, e);
  int device = -1;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return fail(CUDNN_STATUS_NOT_INITIALIZED, where, std::string("cudaGetDevice failed: ") + cudaGetErrorString(e));
  auto* h = new cudnnContext{device, nullptr};
  Handles& hs = handles();
  std::lock_guard<std::mutex> g(hs.mu);
  hs.live.insert(h);
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return CUDNN_STATUS_SUCCESS;  // as cuDNN 9.19
  Handles& hs = handles();
  std::lock_guard<std::mutex> g(hs.mu);
  if (!hs.live.erase(handle))
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy", "not a live handle (destroyed twice, or not from cudnnCreate)");
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  const char* where = "cudnnSetStream";
  HandleInfo h;
  if (!handle_info(handle, &h)) return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live handle");
  if (stream) {
    const int d = rt::emu::stream_device(stream);
    if (d < 0)
      return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live stream (destroyed, or not from cudaStreamCreate)");
    if (d != h.device)
      return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, where,
                  "the stream is on cuda:" + std::to_string(d) + " but the handle belongs to cuda:" +
                      std::to_string(h.device) + " (the device current at cudnnCreate); use a handle per device");
  }
  Handles& hs = handles();
  std::lock_guard<std::mutex> g(hs.mu);
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  HandleInfo h;
  if (!stream) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnGetStream", "streamId is null");
  if (!handle_info(handle, &h)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream", "not a live handle");
  *stream = h.stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor) {
  const char* where = "cudnnBackendCreateDescriptor";
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "descriptor is null");
  if (int(type) < 0 || int(type) > int(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR))
    return fail(CUDNN_STATUS_BAD_PARAM, where, std::to_string(int(type)) + " is not a cudnnBackendDescriptorType_t");
  if (!emulated_type(type))
    return fail(CUDNN_STATUS_NOT_SUPPORTED, where,
                "descriptor type " + std::to_string(int(type)) +
                    " is not emulated: the fake runs convolution graphs, fused or not (tensor, convolution, "
                    "convolution operations, pointwise, pointwise operation, genstats operation, operation graph, "
                    "heuristics, engine, engine config, plan, variant pack)");
  *descriptor = new_descriptor(type);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  const char* where = "cudnnBackendDestroyDescriptor";
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "descriptor is null");
  if (!delete_descriptor(descriptor))
    return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live descriptor (destroyed twice?)");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, kFinalize, "descriptor is null");
  Descriptor* d = find_descriptor(descriptor);
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, kFinalize, "not a live descriptor");
  return finalize(*d);
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t elementCount,
                                       const void* arrayOfElements) {
  const char* where = "cudnnBackendSetAttribute";
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "descriptor is null");
  Descriptor* d = find_descriptor(descriptor);
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live descriptor");
  return set_attribute(*d, attributeName, attributeType, elementCount, arrayOfElements);
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
                                       int64_t* elementCount, void* arrayOfElements) {
  const char* where = "cudnnBackendGetAttribute";
  if (!descriptor) return fail(CUDNN_STATUS_BAD_PARAM, where, "descriptor is null");  // 9.19: not NULL_POINTER
  const Descriptor* d = find_descriptor(descriptor);
  if (!d) return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live descriptor");
  return get_attribute(*d, attributeName, attributeType, requestedElementCount, elementCount, arrayOfElements);
}

// Checks the call and queues the convolution on the handle's stream (Note [Execution]).
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
  const char* where = "cudnnBackendExecute";
  if (!handle) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where, "handle is null");
  HandleInfo h;
  if (!handle_info(handle, &h)) return fail(CUDNN_STATUS_BAD_PARAM, where, "not a live handle");
  const Descriptor *plan_d = nullptr, *pack_d = nullptr;
  if (cudnnStatus_t st = execute_arg(executionPlan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "executionPlan", &plan_d))
    return st;
  if (cudnnStatus_t st = execute_arg(variantPack, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variantPack", &pack_d))
    return st;
  const PlanInfo& plan = plan_d->node->as<PlanInfo>();
  const PackInfo& pack = pack_d->node->as<PackInfo>();
  if (cudnnStatus_t st = check_execute_device(h, plan)) return st;
  Bound bound;
  if (cudnnStatus_t st = bind_pack(plan, pack, &bound)) return st;

  const GraphInfo& graph = plan.graph();
  const EngineSpec& spec = plan.engine().spec();
  const OpInfo& op = graph.op->as<OpInfo>();
  const Fusion& fusion = graph.fusion;
  const ConvProblem& p = graph.conv.p;
  const Numerics num = numerics_of(spec, graph.conv, 0);
  const double alpha = op.alpha, beta = op.beta;
  note_engine_executed(spec.name);
  const std::string name = "cudnn " + spec.name + " convolution " + conv_op_name(p.op) +
                           (fusion.prologue() ? fusion.relu ? " +scale_bias_relu" : " +scale_bias" : "") +
                           (fusion.genstats() ? " +genstats" : "");
  rt::emu::LibraryCost cost = conv_cost(graph, num, bound);
  // A nondeterministic engine's order is drawn per execution: when queued, and anew at each
  // launch of a CUDA graph that captured it (emu.h, enqueue_issued). The fusion's tensors are
  // held (Note [Descriptors are copied]) and read on the stream's worker.
  const std::vector<void*>& ptrs = bound.ptrs;
  void* const scale = fusion.prologue() ? ptrs[3] : nullptr;
  void* const bias = fusion.prologue() ? ptrs[4] : nullptr;
  void* const sum = fusion.genstats() ? ptrs[ptrs.size() - 2] : nullptr;
  void* const sqsum = fusion.genstats() ? ptrs[ptrs.size() - 1] : nullptr;
  void* const ws = pack.workspace;
  const size_t ws_bytes = size_t(plan.workspace);
  auto issue = [p, num, fusion, x = ptrs[0], w = ptrs[1], y = ptrs[2], scale, bias, sum, sqsum, ws, ws_bytes, alpha,
                beta]() -> std::function<void()> {
    Numerics run_num = num;
    const uint64_t execution = g_executions.fetch_add(1);
    if (run_num.splits > 1) run_num.rotation = execution;  // as numerics_of sets it
    return [p, run_num, fusion, x, w, y, scale, bias, sum, sqsum, ws, ws_bytes, alpha, beta] {
      // The engine's scratch: every byte written (the emulator checked the whole range).
      if (ws_bytes > 0) std::memset(ws, 0xA5, ws_bytes);
      if (fusion.prologue()) {
        // The convolution reads the prologue's output, laid out like X (Note [Fused graphs the fake runs]).
        const std::vector<uint8_t> xin = run_prologue(p, fusion, x, scale, bias);
        run_conv(p, run_num, xin.data(), w, y, alpha, beta);
      } else {
        run_conv(p, run_num, x, w, y, alpha, beta);
      }
      if (fusion.genstats()) run_genstats(p, fusion, y, sum, sqsum);
    };
  };
  const cudaError_t e =
      rt::emu::enqueue_issued(h.stream, name, std::move(bound.uses), std::move(issue), std::move(cost));
  if (e != cudaSuccess)
    return fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, where,
                std::string("queueing the convolution failed: ") + cudaGetErrorString(e) +
                    (e == cudaErrorInvalidResourceHandle ? "" : " (an earlier fault on the device: see its report)"));
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
