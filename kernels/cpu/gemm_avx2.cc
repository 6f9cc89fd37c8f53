// cpu::gemm for the baseline instruction set (x86-64-v3: AVX2 + FMA).
#include <cstdint>

#include <Eigen/Core>

#include "kernels/cpu/gemm_isa.h"

namespace rt::cpu::avx2 {
#include "kernels/cpu/gemm_impl.inc"
}  // namespace rt::cpu::avx2
