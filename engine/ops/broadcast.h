// Broadcasting for the binary elementwise ops (internal to engine/ops): the result's shape
// and format, the walk over it (Note [Broadcast plan] in kernels/elementwise_ops.h), and
// the sum of a gradient back to a broadcast operand's shape.
#pragma once

#include "engine/tensor.h"
#include "kernels/elementwise_ops.h"

namespace rt::ops {

// The shape a and b broadcast to (NumPy/PyTorch: aligned at the last dim, each pair of
// sizes equal or one of them 1); false when they do not.
bool try_broadcast_shape(const Shape& a, const Shape& b, Shape& out);
// The same, or an rt::Error naming the op, both shapes and the first dim that clashes.
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);

// The memory format of a binary op's result of shape `out`: that of the first operand of
// that very shape, else of the first 4-D operand, else contiguous.
MemoryFormat broadcast_format(const Tensor& a, const Tensor& b, const Shape& out);

// The walk over the result (shape `out`, dense in format `f`) and operands a and b as they
// lie in memory (each in its own format).
ew::BroadcastPlan broadcast_plan(const Shape& out, MemoryFormat f, const Shape& a, MemoryFormat fa, const Shape& b,
                                 MemoryFormat fb);

// g (the result's shape, dense along p) summed over the dims operand `operand` broadcasts:
// a tensor of `shape` in format `f` (the operand's), on g's device, in g's dtype.
Tensor sum_to(const Tensor& g, const ew::BroadcastPlan& p, int operand, const Shape& shape, MemoryFormat f);

}  // namespace rt::ops
