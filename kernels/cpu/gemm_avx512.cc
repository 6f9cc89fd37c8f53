// cpu::gemm for AVX-512 (x86-64-v4). Compiled with -march=x86-64-v4 (see BUILD) and run
// only on CPUs that have it (gemm.cc checks).
//
// Every standard header Eigen needs is included first, under its own name. Then Eigen's
// namespace is renamed for this file alone: its templates instantiate here as
// RtEigenAvx512::..., so the linker cannot pick this file's AVX-512 code for a baseline
// caller (or the reverse), which merging same-named template instances would otherwise do.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iosfwd>
#include <limits>
#include <new>
#include <type_traits>

#define Eigen RtEigenAvx512
#include <Eigen/Core>

#include "kernels/cpu/gemm_isa.h"

namespace rt::cpu::avx512 {
#include "kernels/cpu/gemm_impl.inc"
}  // namespace rt::cpu::avx512
