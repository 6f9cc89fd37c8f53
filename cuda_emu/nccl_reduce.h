// The arithmetic of the NCCL fake's reductions (all-reduce, reduce-scatter): every rank
// combines the same inputs in the same order with NCCL's rules per type and operation
// (Note [Reduction order and rounding] in nccl_reduce.cc).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>

namespace rt::emu::nccl {

// out[i] = in[0][i] op in[1][i] op ... op in[nranks-1][i], combined in rank order and
// rounded to the type after every step; ncclAvg as NCCL computes it. `out` may be one of
// the inputs (in place). Throws Error (ncclInvalidArgument) for a type it cannot reduce.
void reduce_in_rank_order(ncclDataType_t t, ncclRedOp_t op, int nranks, const void* const* in, void* out,
                          size_t count);

// IEEE half and bfloat16 from and to float, rounding to nearest even.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace rt::emu::nccl
