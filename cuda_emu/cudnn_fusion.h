// The fused graphs of the cuDNN fake (Note [Fused graphs the fake runs] in cudnn_finalize.cc):
// the pointwise and genstats descriptors' finalize checks, the recognition of a graph of
// several operations as one of the patterns the fake runs (cudnn_fusion.cc), and the
// prologue and genstats computations its execution queues (cudnn_fusion_run.cc).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "cuda_emu/cudnn_conv.h"
#include "cuda_emu/cudnn_desc.h"

namespace rt::emu::cudnn {

cudnnStatus_t finalize_pointwise(Descriptor& d);     // CUDNN_BACKEND_POINTWISE_DESCRIPTOR
cudnnStatus_t finalize_pointwise_op(Descriptor& d);  // CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
cudnnStatus_t finalize_genstats(Descriptor& d);      // CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR

// A graph's operations, more than one: the convolution (*op) and its fusion, or the status
// (NOT_SUPPORTED_GRAPH_PATTERN, BAD_PARAM_SHAPE_MISMATCH, ...) with a message naming what was
// found and what the fake runs.
cudnnStatus_t match_fusion(const std::vector<NodePtr>& ops, NodePtr* op, Fusion* fusion);

// "convolution forward", "pointwise MUL", "genstats": an operation node, for messages.
std::string op_label(const NodePtr& op);

// ---- execution (cudnn_fusion_run.cc) -----------------------------------------------------------
// The prologue's output relu?(x * scale + bias) in float, rounded to p.dtype, laid out with
// x's strides p.xs: the buffer the convolution reads as its x.
std::vector<uint8_t> run_prologue(const ConvProblem& p, const Fusion& f, const void* x, const void* scale,
                                  const void* bias);
// Per output channel sum and sum of squares of y as stored (p.ys, p.dtype), in double, each
// rounded once to f32.
void run_genstats(const ConvProblem& p, const Fusion& f, const void* y, void* sum, void* sqsum);

}  // namespace rt::emu::cudnn
