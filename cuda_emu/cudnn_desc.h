// The objects behind the cuDNN fake's handles and backend descriptors: a descriptor's
// attributes as set, and once finalized the immutable Node other descriptors share.
//
// Note [Descriptors are copied]
// Like cuDNN 9.19 (checked against the real library), setting a descriptor-valued attribute
// copies the other descriptor's finalized content: the other descriptor may be destroyed
// afterwards, and finalizing it later changes nothing. Here the copy is a shared pointer to
// its immutable Node; queued work holds the Nodes it needs, so that destroying the plan and
// variant pack right after cudnnBackendExecute is safe.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "cuda_emu/cudnn_engines.h"

namespace rt::emu::cudnn {

struct Node;
using NodePtr = std::shared_ptr<const Node>;

// One attribute's value as set (or as finalize computed it).
struct Value {
  cudnnBackendAttributeType_t type = CUDNN_TYPE_INT64;
  int64_t count = 0;
  std::vector<uint8_t> bytes;  // count elements of the type, for every type but descriptors
  std::vector<NodePtr> descs;  // CUDNN_TYPE_BACKEND_DESCRIPTOR

  template <typename T>
  T at(int64_t i) const;  // element i as the C type of `type`
  int64_t i64(int64_t i = 0) const { return at<int64_t>(i); }
  std::vector<int64_t> i64s() const;
  double real() const;  // FLOAT or DOUBLE, element 0

  template <typename T>
  static Value of(cudnnBackendAttributeType_t type, const std::vector<T>& v);
  static Value of_descs(std::vector<NodePtr> v);
};
using AttrStore = std::map<int, Value>;  // by cudnnBackendAttributeName_t

// ---- what finalize derives, per descriptor type --------------------------------------------
struct TensorInfo {
  cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  std::vector<int64_t> dims, strides;
  int64_t uid = 0, alignment = 0;
  bool is_virtual = false;
};
struct ConvInfo {
  int spatial = 2;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  std::vector<int64_t> pre, post, stride, dilation;
};
// The x / w / y slots (dx, dw, dy for the backward operations: cudnn_conv.h).
struct OpInfo {
  ConvOp op = ConvOp::forward;
  NodePtr x, w, y, conv;
  double alpha = 1, beta = 0;
};
// A pointwise descriptor (CUDNN_BACKEND_POINTWISE_DESCRIPTOR) and a pointwise operation: y =
// mode(x[, b]); b is null for the one-input modes (RELU_FWD).
struct PointwiseInfo {
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;
  cudnnDataType_t math = CUDNN_DATA_FLOAT;
};
struct PointwiseOpInfo {
  cudnnPointwiseMode_t mode = CUDNN_POINTWISE_ADD;
  NodePtr x, b, y;
};
// GEN_STATS: per-channel sum and sum of squares of x.
struct GenStatsInfo {
  NodePtr x, sum, sqsum;
};
// What a fused graph adds to its convolution (Note [Fused graphs the fake runs] in
// cudnn_finalize.cc); all null for a single-convolution graph.
struct Fusion {
  NodePtr x;            // the prologue's real input X, which the convolution reads through it
  NodePtr scale, bias;  // the prologue's per-channel (1, C, 1, 1) tensors
  bool relu = false;
  NodePtr sum, sqsum;  // genstats' (1, O, 1, 1) f32 outputs
  bool prologue() const { return x != nullptr; }
  bool genstats() const { return sum != nullptr; }
};
// Note [Plans keep their engine]
// A graph takes the engine list in use when it is finalized, and engines, configs and plans
// built from it index into that list: a test that changes the list (set_engines) changes
// what later graphs get, never a plan already built.
struct GraphInfo {
  NodePtr op;  // the convolution (Note [Fused graphs the fake runs] in cudnn_finalize.cc)
  ConvCase conv;  // as the engines see it: for a prologue, x is the real X the prologue reads
  Fusion fusion;
  std::shared_ptr<const EngineList> list;
};
struct EngineInfo {
  NodePtr graph;
  int64_t index = 0;
  const GraphInfo& graph_info() const;
  const EngineSpec& spec() const;
};
struct CfgInfo {
  NodePtr engine;
  int64_t workspace = 0;
};
struct PlanInfo {
  NodePtr cfg;
  int device = 0;
  int64_t workspace = 0;
  const EngineInfo& engine() const;
  const GraphInfo& graph() const;
};
struct PackInfo {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  void* workspace = nullptr;
};

struct Node {
  cudnnBackendDescriptorType_t type;
  AttrStore attrs;  // as set, plus defaults and computed attributes (what Get reads)
  std::variant<std::monostate, TensorInfo, ConvInfo, OpInfo, PointwiseInfo, PointwiseOpInfo, GenStatsInfo, GraphInfo,
               EngineInfo, CfgInfo, PlanInfo, PackInfo>
      info;
  template <typename T>
  bool is() const {
    return std::holds_alternative<T>(info);
  }
  template <typename T>
  const T& as() const {
    return std::get<T>(info);
  }
};

// What a cudnnBackendDescriptor_t points at.
struct Descriptor {
  cudnnBackendDescriptorType_t type;
  AttrStore attrs;
  NodePtr node;  // non-null once finalized
};

// The live descriptors, so that a stale or foreign pointer is an error, not a crash.
Descriptor* new_descriptor(cudnnBackendDescriptorType_t type);
bool delete_descriptor(cudnnBackendDescriptor_t d);
Descriptor* find_descriptor(cudnnBackendDescriptor_t d);

// ---- handles ----------------------------------------------------------------------------------
struct HandleInfo {
  int device = 0;
  cudaStream_t stream = nullptr;
};
bool handle_info(cudnnHandle_t h, HandleInfo* out);  // false: not a live handle

// ---- templates --------------------------------------------------------------------------------
template <typename T>
T Value::at(int64_t i) const {
  T v{};
  std::memcpy(&v, bytes.data() + size_t(i) * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
Value Value::of(cudnnBackendAttributeType_t type, const std::vector<T>& v) {
  Value r;
  r.type = type;
  r.count = int64_t(v.size());
  r.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(r.bytes.data(), v.data(), r.bytes.size());
  return r;
}

}  // namespace rt::emu::cudnn
