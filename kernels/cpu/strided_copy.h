// The generic strided copy on the CPU: the shape ops' one kernel (permute, contiguous,
// concat, split/narrow, and the broadcast in the reductions' backward).
#pragma once

#include <cstddef>
#include <cstdint>

namespace rt::cpu {

// dst[sum_k i_k dst_stride[k]] = src[sum_k i_k src_stride[k]] for every index (i_0, ...,
// i_{ndim-1}) of size[]; strides in elements of elem_bytes (1, 2, 4 or 8) bytes. Best when
// the last dim is the one dst is contiguous along. ndim 0 copies one element.
void strided_copy(size_t elem_bytes, int ndim, const int64_t* size, const int64_t* src_stride,
                  const int64_t* dst_stride, const void* src, void* dst);

}  // namespace rt::cpu
