// cudnnBackendFinalize of the cuDNN fake: per descriptor type, the checks cuDNN makes (with
// its statuses and a message naming the problem), then the immutable Node that Get reads and
// other descriptors copy. Tensors, convolutions, operations and graphs: cudnn_finalize.cc;
// pointwise and genstats descriptors and the fused graphs' patterns: cudnn_fusion.cc;
// heuristics, engines, engine configs, plans and variant packs: cudnn_plan.cc.
#pragma once

#include <cudnn.h>

#include <memory>
#include <string>

#include "cuda_emu/cudnn_desc.h"

namespace rt::emu::cudnn {

cudnnStatus_t finalize(Descriptor& d);

// ---- shared by the two files --------------------------------------------------------------------
inline constexpr const char* kFinalize = "cudnnBackendFinalize";
const Value* find_attr(const AttrStore& a, cudnnBackendAttributeName_t name);
// The attribute, or null after recording "<what> is not set" (the caller returns BAD_PARAM).
const Value* required(const AttrStore& a, cudnnBackendAttributeName_t name, const char* what, cudnnStatus_t* st);
std::shared_ptr<Node> new_node(const Descriptor& d);

cudnnStatus_t finalize_tensor(Descriptor& d);
cudnnStatus_t finalize_convolution(Descriptor& d);
cudnnStatus_t finalize_operation(Descriptor& d);
cudnnStatus_t finalize_graph(Descriptor& d);
cudnnStatus_t finalize_heuristics(Descriptor& d);
cudnnStatus_t finalize_engine(Descriptor& d);
cudnnStatus_t finalize_engine_config(Descriptor& d);
cudnnStatus_t finalize_plan(Descriptor& d);
cudnnStatus_t finalize_variant_pack(Descriptor& d);

// An engine Node for `index` of the graph's list, with its notes as attributes.
NodePtr make_engine(const NodePtr& graph, int64_t index);
// An engine config Node for `engine`, with its workspace.
NodePtr make_engine_config(const NodePtr& engine);

}  // namespace rt::emu::cudnn
