#!/usr/bin/env bash
# The AVX-512 GEMM object must define no weak (mergeable) symbol outside its renamed
# namespaces, or the linker could hand AVX-512 code to baseline callers and crash CPUs
# without AVX-512 (Note [GEMM dispatch] in kernels/cpu/gemm.h).
set -euo pipefail
lib=$(find -L . -path '*gemm_avx512*' -name '*.o' | head -n 1)
[ -n "$lib" ] || { echo "the gemm_avx512 object file is not in the runfiles"; exit 1; }
leaks=$(nm -C --defined-only "$lib" | awk '$2 ~ /^[WVuw]$/' | grep -v -E 'RtEigenAvx512::|rt::cpu::avx512::|DW\.ref\.__gxx_personality_v0' || true)
if [ -n "$leaks" ]; then
  echo "weak symbols outside the AVX-512 namespaces in $lib:"
  echo "$leaks"
  exit 1
fi
echo "ok: $(nm -C --defined-only "$lib" | awk '$2 ~ /^[WVuw]$/' | wc -l) weak symbols, all namespaced"
