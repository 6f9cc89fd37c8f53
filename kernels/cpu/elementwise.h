// Elementwise ops and full reductions on the CPU. The ops and their math come from the one
// table in kernels/elementwise_ops.h (Note [Elementwise op table]), shared with the CUDA
// backend; pointers are to dense memory (n elements, or laid out as a BroadcastPlan says).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/elementwise_ops.h"

namespace rt::cpu {

using Binary = ew::Binary;
using Unary = ew::Unary;

// y = op(a, b) over n elements (y may be a).
template <typename T>
void binary(Binary op, int64_t n, const T* a, const T* b, T* y);
// y (dense, p.numel() elements) = op(a, b) read through the plan's
// strides (Note [Broadcast plan]).
template <typename T>
void binary_broadcast(Binary op, const ew::BroadcastPlan& p, const T* a, const T* b, T* y);
// The table's da and/or db (null: not wanted) over the plan, one pass: da, db, y and dy are
// dense in the output's order (output-shaped; sum_to folds a broadcast operand's), a and b
// are read through the plan. Inputs the wanted formulas do not use may be null.
template <typename T>
void binary_backward(Binary op, const ew::BroadcastPlan& p, const T* a, const T* b, const T* y, const T* dy,
                     T* da, T* db);
// r (operand `operand`'s shape, dense in its format) = g (dense along p) summed over the
// dims that operand broadcasts. Accumulates in double; the order of the sums depends on
// the shapes only (not the thread count).
template <typename T>
void sum_to(const ew::BroadcastPlan& p, int operand, const T* g, T* r);
// y = a * s + t
template <typename T>
void affine(int64_t n, const T* a, double s, double t, T* y);
// y = op(x, p) (p: the op's scalar, pow's power; ignored by the others).
template <typename T>
void unary(Unary op, int64_t n, const T* x, T* y, double p = 0.0);
// dx = the table's backward; x or y may be null where the op's formula does not read it.
template <typename T>
void unary_backward(Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx, double p = 0.0);
// dx = dy where y > 0, else 0 (the relu mask read from the saved output).
template <typename T>
void relu_backward(int64_t n, const T* y, const T* dy, T* dx);
// a += alpha * b
template <typename T>
void axpy(int64_t n, double alpha, const T* b, T* a);
// Sum in double.
template <typename T>
double sum(int64_t n, const T* x);

}  // namespace rt::cpu
